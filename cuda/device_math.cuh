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

// Tree-sums one value per thread of the block; every thread gets the block's total. Safe to
// call several times in one kernel.
__device__ double block_sum(double mine) {
  __shared__ double tree[threads_per_block];
  __syncthreads();  // the previous call's readers are done with tree
  tree[threadIdx.x] = mine;
  __syncthreads();
  for (unsigned half = threads_per_block / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) tree[threadIdx.x] += tree[threadIdx.x + half];
    __syncthreads();
  }
  return tree[0];
}

// Step 2 of a two-pass sum: one block adds the `count` block sums into *out.
__global__ void __launch_bounds__(threads_per_block)
    final_sum_kernel(const double* __restrict__ partial, unsigned count, double* __restrict__ out) {
  double mine = 0.0;
  for (unsigned i = threadIdx.x; i < count; i += threads_per_block) mine += partial[i];
  const double total = block_sum(mine);
  if (threadIdx.x == 0) *out = total;
}

// A two-pass sum over n > 0 elements into the host double *out: `step1(blocks, partial)`
// launches blocks_for(n) blocks that each write their share's sum to partial[block]; then
// one block adds those. The scratch is freed in stream order on every path, and the
// stream is waited for. `what` names the operation in errors ("gpu::sum").
template <class Step1>
status two_pass_sum(const std::string& what, std::size_t n, cudaStream_t s, Step1 step1, double* out) {
  const unsigned blocks = blocks_for(n);
  double* scratch = nullptr;  // `blocks` partial sums, then the total
  if (status st = detail::check(
          cudaMallocAsync(reinterpret_cast<void**>(&scratch), (blocks + 1) * sizeof(double), s),
          what + ": cudaMallocAsync of its scratch", "expected free device memory; free buffers and retry");
      !st) {
    return st;
  }
  double total = 0.0;
  const status computed = [&] {
    step1(blocks, scratch);
    if (status st = launched((what + " (block sums)").c_str(), n); !st) return st;
    final_sum_kernel<<<1, threads_per_block, 0, s>>>(scratch, blocks, scratch + blocks);
    if (status st = launched((what + " (total)").c_str(), n); !st) return st;
    return detail::check(cudaMemcpyAsync(&total, scratch + blocks, sizeof total, cudaMemcpyDeviceToHost, s),
                         what + ": copying the total to the host", detail::launch_advice);
  }();
  const cudaError_t freed = cudaFreeAsync(scratch, s);
  const cudaError_t synced = cudaStreamSynchronize(s);
  if (!computed) return computed;
  if (freed != cudaSuccess) return detail::cuda_failure(what + ": cudaFreeAsync", freed, detail::launch_advice);
  if (synced != cudaSuccess) {
    return detail::cuda_failure(what + ": waiting for the stream", synced, detail::launch_advice);
  }
  *out = total;
  return ok_status();
}

}  // namespace
}  // namespace apiary::cuda::gpu
