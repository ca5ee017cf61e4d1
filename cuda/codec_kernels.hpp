#pragma once
/// The element loops of the tensor codecs (hivemind's buffer layouts are assembled by
/// the caller from these pieces): MEANSTD_16BIT, UNIFORM_8BIT, QUANTILE_8BIT and
/// BLOCKWISE_8BIT encode and decode; FLOAT16 is cast_f32_to_f16 / cast_f16_to_f32 of
/// kernels.hpp. As there, every kernel exists as a `cpu::` twin (host memory) and a
/// `gpu::` kernel (device memory of the current device, enqueued on a stream), and the
/// un-namespaced overloads pick one by `backend`. Every array argument lives in the
/// chosen backend's memory; `borders255` travels by value.
///
/// Twins give the same bits for every kernel except the two that add floats in an order
/// that depends on the backend: row_moments (both accumulate in double; the means and
/// standard deviations may differ in the last bit) and bucket_sums (double sums; the CUDA
/// version adds in a nondeterministic order). All counts and indices are exact.
#include <cstddef>
#include <cstdint>

#include "cuda/status.hpp"

namespace apiary::cuda {

/// Entries of an 8-bit codebook (UNIFORM_8BIT, QUANTILE_8BIT, BLOCKWISE_8BIT code table).
inline constexpr std::size_t codebook_entries = 256;
/// Elements per BLOCKWISE_8BIT block (one absmax each).
inline constexpr std::size_t blockwise_block = 4096;

/// 255 ascending borders between the 256 buckets of an 8-bit code: quantiles for
/// QUANTILE_8BIT, midpoints of the code table for BLOCKWISE_8BIT. 1020 bytes, passed by
/// value so that kernels need no device copy of them.
struct borders255 {
  float value[codebook_entries - 1];  ///< ascending; index k = borders strictly below
};

namespace cpu {

/// MEANSTD_16BIT statistics of `rows` rows of `len` floats: means[r] = float(sum / len)
/// (sum in double), stds[r] = max(float(sqrt(sum((x - mean)^2) / len)), min_std); a NaN
/// std becomes min_std. len > 0.
void row_moments(float* means, float* stds, const float* x, std::size_t rows, std::size_t len,
                 float min_std) noexcept;
/// dst = binary16 of clamp((x - means[r]) / stds[r], +-65504) per row, as cast_f32_to_f16.
void standardize_to_f16(std::uint16_t* dst, const float* x, std::size_t rows, std::size_t len,
                        const float* means, const float* stds) noexcept;
/// dst = float(src) * stds[r] + means[r] per row (multiply, then add; never fused).
void destandardize_from_f16(float* dst, const std::uint16_t* src, std::size_t rows,
                            std::size_t len, const float* means, const float* stds) noexcept;

/// Sum of (x[i] - center)^2 in double (UNIFORM_8BIT's standard deviation).
double sum_squared_deviation(const float* x, std::size_t n, double center) noexcept;
/// idx[i] = clamp(round_half_even((x[i] - shift) / scale) + 128, 0, 255); NaN gives 0.
/// scale > 0 (UNIFORM_8BIT: shift = mean, scale = 6 std / 256).
void uniform_indices(std::uint8_t* idx, const float* x, std::size_t n, float shift,
                     float scale) noexcept;
/// idx[i] = number of borders strictly below x[i] / divisor (NaN gives 0); divisor > 0.
void search_borders(std::uint8_t* idx, const float* x, std::size_t n, float divisor,
                    const borders255& borders) noexcept;
/// counts[k] += 1 for k = the top 16 bits of the order key of x[i] (negative floats
/// below positive, NaN above +inf); counts has 65536 entries. QUANTILE_8BIT estimates
/// its quantiles from this histogram.
void key_histogram(std::uint32_t* counts, const float* x, std::size_t n) noexcept;
/// sums[idx[i]] += x[i] (double), counts[idx[i]] += 1; both 256 entries. The codebook of
/// UNIFORM_8BIT and QUANTILE_8BIT is sums / counts (0 for an empty bucket).
void bucket_sums(double* sums, std::uint64_t* counts, const float* x, const std::uint8_t* idx,
                 std::size_t n) noexcept;
/// out[i] = codebook[idx[i]] (UNIFORM_8BIT and QUANTILE_8BIT decode; 256 entries).
void codebook_lookup(float* out, const float* codebook, const std::uint8_t* idx,
                     std::size_t n) noexcept;

/// absmax[b] = largest |x| of block b (4096 elements, the last one shorter), compared on
/// the bits (a NaN in the block gives NaN). ceil(n / 4096) outputs.
void block_absmax(float* absmax, const float* x, std::size_t n) noexcept;
/// q[i] = number of `mids` below x[i] / absmax[b] of its block, or zero_index where
/// absmax[b] is not above 0 (all-zero or NaN blocks).
void blockwise_quantize(std::uint8_t* q, const float* x, std::size_t n, const float* absmax,
                        const borders255& mids, std::uint8_t zero_index) noexcept;
/// out[i] = code[q[i]] * absmax[b] of its block (float multiply); code has 256 entries.
void blockwise_dequantize(float* out, const std::uint8_t* q, std::size_t n, const float* absmax,
                          const float* code) noexcept;

}  // namespace cpu

namespace gpu {

/// cpu::row_moments on device arrays, enqueued on `stream` (one block per row).
status row_moments(float* means, float* stds, const float* x, std::size_t rows, std::size_t len,
                   float min_std, stream_handle stream = nullptr);
/// cpu::standardize_to_f16 on device arrays.
status standardize_to_f16(std::uint16_t* dst, const float* x, std::size_t rows, std::size_t len,
                          const float* means, const float* stds, stream_handle stream = nullptr);
/// cpu::destandardize_from_f16 on device arrays.
status destandardize_from_f16(float* dst, const std::uint16_t* src, std::size_t rows,
                              std::size_t len, const float* means, const float* stds,
                              stream_handle stream = nullptr);
/// cpu::sum_squared_deviation of a device array; waits for `stream`, result in host *out.
status sum_squared_deviation(const float* x, std::size_t n, double center, double* out,
                             stream_handle stream = nullptr);
/// cpu::uniform_indices on device arrays.
status uniform_indices(std::uint8_t* idx, const float* x, std::size_t n, float shift, float scale,
                       stream_handle stream = nullptr);
/// cpu::search_borders on device arrays.
status search_borders(std::uint8_t* idx, const float* x, std::size_t n, float divisor,
                      const borders255& borders, stream_handle stream = nullptr);
/// cpu::key_histogram on device arrays (atomic integer adds: exact).
status key_histogram(std::uint32_t* counts, const float* x, std::size_t n,
                     stream_handle stream = nullptr);
/// cpu::bucket_sums on device arrays (atomic adds: sums in nondeterministic order).
status bucket_sums(double* sums, std::uint64_t* counts, const float* x, const std::uint8_t* idx,
                   std::size_t n, stream_handle stream = nullptr);
/// cpu::codebook_lookup on device arrays.
status codebook_lookup(float* out, const float* codebook, const std::uint8_t* idx, std::size_t n,
                       stream_handle stream = nullptr);
/// cpu::block_absmax on device arrays.
status block_absmax(float* absmax, const float* x, std::size_t n, stream_handle stream = nullptr);
/// cpu::blockwise_quantize on device arrays.
status blockwise_quantize(std::uint8_t* q, const float* x, std::size_t n, const float* absmax,
                          const borders255& mids, std::uint8_t zero_index,
                          stream_handle stream = nullptr);
/// cpu::blockwise_dequantize on device arrays.
status blockwise_dequantize(float* out, const std::uint8_t* q, std::size_t n, const float* absmax,
                            const float* code, stream_handle stream = nullptr);

}  // namespace gpu

/// row_moments on `where`'s memory (rows = 0 or len = 0: nothing to do).
status row_moments(backend where, float* means, float* stds, const float* x, std::size_t rows,
                   std::size_t len, float min_std, stream_handle stream = nullptr);
/// standardize_to_f16 on `where`'s memory.
status standardize_to_f16(backend where, std::uint16_t* dst, const float* x, std::size_t rows,
                          std::size_t len, const float* means, const float* stds,
                          stream_handle stream = nullptr);
/// destandardize_from_f16 on `where`'s memory.
status destandardize_from_f16(backend where, float* dst, const std::uint16_t* src,
                              std::size_t rows, std::size_t len, const float* means,
                              const float* stds, stream_handle stream = nullptr);
/// sum_squared_deviation on `where`'s memory; the result lands in the host double *out.
status sum_squared_deviation(backend where, const float* x, std::size_t n, double center,
                             double* out, stream_handle stream = nullptr);
/// uniform_indices on `where`'s memory.
status uniform_indices(backend where, std::uint8_t* idx, const float* x, std::size_t n,
                       float shift, float scale, stream_handle stream = nullptr);
/// search_borders on `where`'s memory.
status search_borders(backend where, std::uint8_t* idx, const float* x, std::size_t n,
                      float divisor, const borders255& borders, stream_handle stream = nullptr);
/// key_histogram on `where`'s memory.
status key_histogram(backend where, std::uint32_t* counts, const float* x, std::size_t n,
                     stream_handle stream = nullptr);
/// bucket_sums on `where`'s memory.
status bucket_sums(backend where, double* sums, std::uint64_t* counts, const float* x,
                   const std::uint8_t* idx, std::size_t n, stream_handle stream = nullptr);
/// codebook_lookup on `where`'s memory.
status codebook_lookup(backend where, float* out, const float* codebook, const std::uint8_t* idx,
                       std::size_t n, stream_handle stream = nullptr);
/// block_absmax on `where`'s memory.
status block_absmax(backend where, float* absmax, const float* x, std::size_t n,
                    stream_handle stream = nullptr);
/// blockwise_quantize on `where`'s memory.
status blockwise_quantize(backend where, std::uint8_t* q, const float* x, std::size_t n,
                          const float* absmax, const borders255& mids, std::uint8_t zero_index,
                          stream_handle stream = nullptr);
/// blockwise_dequantize on `where`'s memory.
status blockwise_dequantize(backend where, float* out, const std::uint8_t* q, std::size_t n,
                            const float* absmax, const float* code,
                            stream_handle stream = nullptr);

}  // namespace apiary::cuda
