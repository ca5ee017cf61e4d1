// CUDA versions of the kernels declared in kernels.hpp. Grid-stride loops, so any n
// runs on a bounded grid; explicit __fmul_rn/__fadd_rn (never fused) and explicit NaN
// handling make the results bit-identical to the CPU twins in cpu_kernels.cpp.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/cuda_check.cuh"
#include "cuda/device_math.cuh"
#include "cuda/kernels.hpp"

namespace apiary::cuda::gpu {
namespace {

__global__ void __launch_bounds__(threads_per_block)
    weighted_accumulate_kernel(float* __restrict__ acc, const float* __restrict__ x, float w,
                               std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    acc[i] = __fadd_rn(acc[i], __fmul_rn(w, x[i]));
  }
}

__global__ void __launch_bounds__(threads_per_block)
    cast_f32_to_f16_kernel(std::uint16_t* __restrict__ dst, const float* __restrict__ src,
                           std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) dst[i] = clamped_half_bits(src[i]);
}

__global__ void __launch_bounds__(threads_per_block)
    cast_f16_to_f32_kernel(float* __restrict__ dst, const std::uint16_t* __restrict__ src,
                           std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride())
    dst[i] = float_of_half_bits(src[i]);
}

__global__ void __launch_bounds__(threads_per_block)
    divide_kernel(float* dst, const float* src, float divisor, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) dst[i] = __fdiv_rn(src[i], divisor);
}

// Step 1: each block writes the sum of its grid-stride share of x to partial[block].
__global__ void __launch_bounds__(threads_per_block)
    block_sums_kernel(const float* __restrict__ x, std::size_t n, double* __restrict__ partial) {
  double mine = 0.0;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) mine += static_cast<double>(x[i]);
  const double total = block_sum(mine);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

}  // namespace

status weighted_accumulate(float* acc, const float* x, float w, std::size_t n,
                           stream_handle stream) {
  if (n == 0) return ok_status();
  weighted_accumulate_kernel<<<blocks_for(n), threads_per_block, 0, as_stream(stream)>>>(acc, x, w,
                                                                                         n);
  return launched("weighted_accumulate", n);
}

status cast_f32_to_f16(std::uint16_t* dst, const float* src, std::size_t n, stream_handle stream) {
  if (n == 0) return ok_status();
  cast_f32_to_f16_kernel<<<blocks_for(n), threads_per_block, 0, as_stream(stream)>>>(dst, src, n);
  return launched("cast_f32_to_f16", n);
}

status cast_f16_to_f32(float* dst, const std::uint16_t* src, std::size_t n, stream_handle stream) {
  if (n == 0) return ok_status();
  cast_f16_to_f32_kernel<<<blocks_for(n), threads_per_block, 0, as_stream(stream)>>>(dst, src, n);
  return launched("cast_f16_to_f32", n);
}

status divide(float* dst, const float* src, float divisor, std::size_t n, stream_handle stream) {
  if (n == 0) return ok_status();
  divide_kernel<<<blocks_for(n), threads_per_block, 0, as_stream(stream)>>>(dst, src, divisor, n);
  return launched("divide", n);
}

status sum(const float* x, std::size_t n, double* out, stream_handle stream) {
  if (out == nullptr) {
    return status::failure("gpu::sum: got a null result pointer; expected a host double");
  }
  if (n == 0) {
    *out = 0.0;
    return ok_status();
  }
  const cudaStream_t s = as_stream(stream);
  return two_pass_sum(
      "gpu::sum", n, s,
      [&](unsigned blocks, double* partial) { block_sums_kernel<<<blocks, threads_per_block, 0, s>>>(x, n, partial); },
      out);
}

}  // namespace apiary::cuda::gpu
