// CUDA versions of the codec kernels in codec_kernels.hpp. Element-wise kernels are
// grid-stride loops over a bounded grid; tables (borders, codebooks) are copied into
// shared memory once per block. Explicit __fdiv_rn/__fmul_rn/__fadd_rn (never fused)
// keep the results bit-identical to the CPU twins in cpu_codec_kernels.cpp.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/codec_kernels.hpp"
#include "cuda/cuda_check.cuh"
#include "cuda/device_math.cuh"

namespace apiary::cuda::gpu {
namespace {

constexpr unsigned entries = static_cast<unsigned>(codebook_entries);

// Borders strictly below v among 255 ascending ones (NaN: 0), as the CPU twin.
__device__ __forceinline__ unsigned borders_below(const float* borders, float v) {
  unsigned pos = 0;
  for (unsigned step = 128; step > 0; step /= 2) pos += borders[pos + step - 1] < v ? step : 0;
  return pos;
}

// Copies `count` values of `table` into the block's shared `local`.
template <class T>
__device__ void load_shared(T* local, const T* table, unsigned count) {
  for (unsigned k = threadIdx.x; k < count; k += blockDim.x) local[k] = table[k];
  __syncthreads();
}

// One block per row: mean, then root mean square deviation, as cpu::row_moments.
__global__ void __launch_bounds__(threads_per_block)
    row_moments_kernel(float* means, float* stds, const float* __restrict__ x, std::size_t len,
                       float min_std) {
  const float* row = x + static_cast<std::size_t>(blockIdx.x) * len;
  double mine = 0.0;
  for (std::size_t i = threadIdx.x; i < len; i += threads_per_block) mine += static_cast<double>(row[i]);
  const auto mean = static_cast<float>(block_sum(mine) / static_cast<double>(len));
  double ssd = 0.0;
  for (std::size_t i = threadIdx.x; i < len; i += threads_per_block) {
    const double d = static_cast<double>(row[i]) - static_cast<double>(mean);
    ssd = __dadd_rn(ssd, __dmul_rn(d, d));  // multiply, then add (never fused)
  }
  const auto std = static_cast<float>(sqrt(block_sum(ssd) / static_cast<double>(len)));
  if (threadIdx.x == 0) {
    means[blockIdx.x] = mean;
    stds[blockIdx.x] = std >= min_std ? std : min_std;
  }
}

__global__ void __launch_bounds__(threads_per_block)
    standardize_kernel(std::uint16_t* __restrict__ dst, const float* __restrict__ x, std::size_t n,
                       std::size_t len, const float* means, const float* stds) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const std::size_t r = i / len;
    dst[i] = clamped_half_bits(__fdiv_rn(__fsub_rn(x[i], means[r]), stds[r]));
  }
}

__global__ void __launch_bounds__(threads_per_block)
    destandardize_kernel(float* __restrict__ dst, const std::uint16_t* __restrict__ src,
                         std::size_t n, std::size_t len, const float* means, const float* stds) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const std::size_t r = i / len;
    dst[i] = __fadd_rn(__fmul_rn(float_of_half_bits(src[i]), stds[r]), means[r]);
  }
}

// Step 1 of sum_squared_deviation: per block, its grid-stride share.
__global__ void __launch_bounds__(threads_per_block)
    ssd_blocks_kernel(const float* __restrict__ x, std::size_t n, double center, double* partial) {
  double mine = 0.0;
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const double d = static_cast<double>(x[i]) - center;
    mine = __dadd_rn(mine, __dmul_rn(d, d));
  }
  const double total = block_sum(mine);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void __launch_bounds__(threads_per_block)
    uniform_kernel(std::uint8_t* __restrict__ idx, const float* __restrict__ x, std::size_t n,
                   float shift, float scale) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    float v = __fdiv_rn(__fsub_rn(x[i], shift), scale);
    v = v >= -200.0f ? v : -200.0f;  // NaN goes to -200
    v = v <= 200.0f ? v : 200.0f;
    const int k = static_cast<int>(rintf(v)) + 128;
    idx[i] = static_cast<std::uint8_t>(k < 0 ? 0 : (k > 255 ? 255 : k));
  }
}

__global__ void __launch_bounds__(threads_per_block)
    search_kernel(std::uint8_t* __restrict__ idx, const float* __restrict__ x, std::size_t n,
                  float divisor, borders255 borders) {
  __shared__ float local[entries - 1];
  load_shared(local, borders.value, entries - 1);
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    idx[i] = static_cast<std::uint8_t>(borders_below(local, __fdiv_rn(x[i], divisor)));
  }
}

__global__ void __launch_bounds__(threads_per_block)
    histogram_kernel(std::uint32_t* counts, const float* __restrict__ x, std::size_t n) {
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const std::uint32_t b = __float_as_uint(x[i]);
    const std::uint32_t key = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
    atomicAdd(reinterpret_cast<unsigned*>(counts) + (key >> 16), 1u);
  }
}

// Per block: shared bucket totals, then one atomic add per bucket into the result.
__global__ void __launch_bounds__(threads_per_block)
    bucket_sums_kernel(double* sums, std::uint64_t* counts, const float* __restrict__ x,
                       const std::uint8_t* __restrict__ idx, std::size_t n) {
  __shared__ double local_sums[entries];
  __shared__ unsigned long long local_counts[entries];
  for (unsigned k = threadIdx.x; k < entries; k += blockDim.x) {
    local_sums[k] = 0.0;
    local_counts[k] = 0;
  }
  __syncthreads();
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    atomicAdd(&local_sums[idx[i]], static_cast<double>(x[i]));
    atomicAdd(&local_counts[idx[i]], 1ull);
  }
  __syncthreads();
  for (unsigned k = threadIdx.x; k < entries; k += blockDim.x) {
    if (local_counts[k] == 0) continue;
    atomicAdd(&sums[k], local_sums[k]);
    atomicAdd(reinterpret_cast<unsigned long long*>(counts) + k, local_counts[k]);
  }
}

__global__ void __launch_bounds__(threads_per_block)
    lookup_kernel(float* __restrict__ out, const float* codebook, const std::uint8_t* __restrict__ idx,
                  std::size_t n) {
  __shared__ float local[entries];
  load_shared(local, codebook, entries);
  for (std::size_t i = first_index(); i < n; i += grid_stride()) out[i] = local[idx[i]];
}

// One block per 4096-element block: the largest |x| bits.
__global__ void __launch_bounds__(threads_per_block)
    absmax_kernel(float* absmax, const float* __restrict__ x, std::size_t n) {
  __shared__ std::uint32_t tree[threads_per_block];
  const std::size_t begin = static_cast<std::size_t>(blockIdx.x) * blockwise_block;
  const std::size_t end = begin + blockwise_block < n ? begin + blockwise_block : n;
  std::uint32_t best = 0;
  for (std::size_t i = begin + threadIdx.x; i < end; i += threads_per_block) {
    best = max(best, __float_as_uint(x[i]) & 0x7fffffffu);
  }
  tree[threadIdx.x] = best;
  __syncthreads();
  for (unsigned half = threads_per_block / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) tree[threadIdx.x] = max(tree[threadIdx.x], tree[threadIdx.x + half]);
    __syncthreads();
  }
  if (threadIdx.x == 0) absmax[blockIdx.x] = __uint_as_float(tree[0]);
}

__global__ void __launch_bounds__(threads_per_block)
    quantize_kernel(std::uint8_t* __restrict__ q, const float* __restrict__ x, std::size_t n,
                    const float* absmax, borders255 mids, std::uint8_t zero_index) {
  __shared__ float local[entries - 1];
  load_shared(local, mids.value, entries - 1);
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    const float scale = absmax[i / blockwise_block];
    q[i] = scale > 0.0f ? static_cast<std::uint8_t>(borders_below(local, __fdiv_rn(x[i], scale)))
                        : zero_index;
  }
}

__global__ void __launch_bounds__(threads_per_block)
    dequantize_kernel(float* __restrict__ out, const std::uint8_t* __restrict__ q, std::size_t n,
                      const float* absmax, const float* code) {
  __shared__ float local[entries];
  load_shared(local, code, entries);
  for (std::size_t i = first_index(); i < n; i += grid_stride()) {
    out[i] = __fmul_rn(local[q[i]], absmax[i / blockwise_block]);
  }
}

}  // namespace

status row_moments(float* means, float* stds, const float* x, std::size_t rows, std::size_t len,
                   float min_std, stream_handle stream) {
  if (rows == 0 || len == 0) return ok_status();
  if (rows > 0x7fffffffu) {
    return status::failure("gpu::row_moments: got " + std::to_string(rows) +
                           " rows; expected at most 2^31 - 1 (one block each); split the tensor");
  }
  row_moments_kernel<<<static_cast<unsigned>(rows), threads_per_block, 0, as_stream(stream)>>>(
      means, stds, x, len, min_std);
  return launched("row_moments", rows * len);
}

status standardize_to_f16(std::uint16_t* dst, const float* x, std::size_t rows, std::size_t len,
                          const float* means, const float* stds, stream_handle stream) {
  const std::size_t n = rows * len;
  if (n == 0) return ok_status();
  standardize_kernel<<<blocks_for(n), threads_per_block, 0, as_stream(stream)>>>(dst, x, n, len,
                                                                                 means, stds);
  return launched("standardize_to_f16", n);
}

status destandardize_from_f16(float* dst, const std::uint16_t* src, std::size_t rows,
                              std::size_t len, const float* means, const float* stds,
                              stream_handle stream) {
  const std::size_t n = rows * len;
  if (n == 0) return ok_status();
  destandardize_kernel<<<blocks_for(n), threads_per_block, 0, as_stream(stream)>>>(dst, src, n, len,
                                                                                   means, stds);
  return launched("destandardize_from_f16", n);
}

status sum_squared_deviation(const float* x, std::size_t n, double center, double* out,
                             stream_handle stream) {
  if (out == nullptr) {
    return status::failure("gpu::sum_squared_deviation: got a null result pointer; expected a host double");
  }
  *out = 0.0;
  if (n == 0) return ok_status();
  const cudaStream_t s = as_stream(stream);
  return two_pass_sum(
      "gpu::sum_squared_deviation", n, s,
      [&](unsigned blocks, double* partial) {
        ssd_blocks_kernel<<<blocks, threads_per_block, 0, s>>>(x, n, center, partial);
      },
      out);
}

status uniform_indices(std::uint8_t* idx, const float* x, std::size_t n, float shift, float scale,
                       stream_handle stream) {
  if (n == 0) return ok_status();
  uniform_kernel<<<blocks_for(n), threads_per_block, 0, as_stream(stream)>>>(idx, x, n, shift, scale);
  return launched("uniform_indices", n);
}

status search_borders(std::uint8_t* idx, const float* x, std::size_t n, float divisor,
                      const borders255& borders, stream_handle stream) {
  if (n == 0) return ok_status();
  search_kernel<<<blocks_for(n), threads_per_block, 0, as_stream(stream)>>>(idx, x, n, divisor, borders);
  return launched("search_borders", n);
}

status key_histogram(std::uint32_t* counts, const float* x, std::size_t n, stream_handle stream) {
  if (n == 0) return ok_status();
  histogram_kernel<<<blocks_for(n), threads_per_block, 0, as_stream(stream)>>>(counts, x, n);
  return launched("key_histogram", n);
}

status bucket_sums(double* sums, std::uint64_t* counts, const float* x, const std::uint8_t* idx,
                   std::size_t n, stream_handle stream) {
  if (n == 0) return ok_status();
  bucket_sums_kernel<<<blocks_for(n), threads_per_block, 0, as_stream(stream)>>>(sums, counts, x, idx, n);
  return launched("bucket_sums", n);
}

status codebook_lookup(float* out, const float* codebook, const std::uint8_t* idx, std::size_t n,
                       stream_handle stream) {
  if (n == 0) return ok_status();
  lookup_kernel<<<blocks_for(n), threads_per_block, 0, as_stream(stream)>>>(out, codebook, idx, n);
  return launched("codebook_lookup", n);
}

status block_absmax(float* absmax, const float* x, std::size_t n, stream_handle stream) {
  if (n == 0) return ok_status();
  const std::size_t blocks = (n + blockwise_block - 1) / blockwise_block;
  absmax_kernel<<<static_cast<unsigned>(blocks), threads_per_block, 0, as_stream(stream)>>>(absmax, x, n);
  return launched("block_absmax", n);
}

status blockwise_quantize(std::uint8_t* q, const float* x, std::size_t n, const float* absmax,
                          const borders255& mids, std::uint8_t zero_index, stream_handle stream) {
  if (n == 0) return ok_status();
  quantize_kernel<<<blocks_for(n), threads_per_block, 0, as_stream(stream)>>>(q, x, n, absmax, mids,
                                                                              zero_index);
  return launched("blockwise_quantize", n);
}

status blockwise_dequantize(float* out, const std::uint8_t* q, std::size_t n, const float* absmax,
                            const float* code, stream_handle stream) {
  if (n == 0) return ok_status();
  dequantize_kernel<<<blocks_for(n), threads_per_block, 0, as_stream(stream)>>>(out, q, n, absmax, code);
  return launched("blockwise_dequantize", n);
}

}  // namespace apiary::cuda::gpu
