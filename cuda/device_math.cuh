#pragma once
// What the .cu files share: launch geometry, grid-stride indexing, the binary16 rules of
// the CPU twins, and the launch check. Included by .cu files only.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/cuda_check.cuh"
#include "cuda/status.hpp"

namespace apiary::cuda::gpu {
namespace {

// 256 threads = 8 warps: a common sweet spot for memory-bound element-wise kernels.
constexpr unsigned threads_per_block = 256;
// Grid cap, in blocks: 8192 x 256 = 2M threads, about 8 waves of an H200's 132 SMs x
// 2048 resident threads; larger arrays are covered by the grid-stride loop.
constexpr std::size_t max_blocks = 8192;

inline unsigned blocks_for(std::size_t n) {
  const std::size_t wanted = (n + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned>(std::min(wanted, max_blocks));
}

inline cudaStream_t as_stream(stream_handle s) { return static_cast<cudaStream_t>(s); }

__device__ __forceinline__ std::size_t first_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ std::size_t grid_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

// fp32 -> fp16 bits with the clamp and NaN rule of cpu::cast_f32_to_f16.
__device__ __forceinline__ std::uint16_t clamped_half_bits(float v) {
  const std::uint32_t b = __float_as_uint(v);
  const std::uint32_t mag = b & 0x7fffffffu;
  if (mag > 0x7f800000u) {  // NaN: keep sign and top payload bits, set the quiet bit
    return static_cast<std::uint16_t>(((b >> 16) & 0x8000u) | 0x7e00u | ((mag >> 13) & 0x3ffu));
  }
  v = fminf(fmaxf(v, -65504.0f), 65504.0f);
  return __half_as_ushort(__float2half_rn(v));
}

// fp16 bits -> fp32 with the NaN rule of cpu::cast_f16_to_f32.
__device__ __forceinline__ float float_of_half_bits(std::uint16_t h) {
  const std::uint32_t mag = h & 0x7fffu;
  if (mag > 0x7c00u) {  // NaN: widen the payload, set the quiet bit
    return __uint_as_float((static_cast<std::uint32_t>(h & 0x8000u) << 16) | 0x7fc00000u |
                           (mag << 13));
  }
  return __half2float(__ushort_as_half(h));
}

inline status launched(const char* kernel, std::size_t n) {
  return detail::check(
      cudaGetLastError(),
      std::string("launch of ") + kernel + " over " + std::to_string(n) + " elements",
      detail::launch_advice);
}

}  // namespace
}  // namespace apiary::cuda::gpu
