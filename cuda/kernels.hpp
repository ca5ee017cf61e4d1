#pragma once
/// Element-wise hot work of averaging and compression: weighted accumulate, fp32<->fp16
/// casts and a sum. Every kernel exists twice with one contract: `cpu::` (host memory,
/// vectorizable loops, always built) and `gpu::` (device memory, kernels.cu, built when
/// APIARY_HAVE_CUDA is defined; otherwise every `gpu::` call fails with a clear status).
/// The un-namespaced overloads at the end pick one by `backend`.
///
/// Both twins give the same bits for weighted accumulate and both casts (no fused
/// multiply-add, round to nearest even, the same NaN rule); `sum` differs only in
/// summation order (both accumulate in double). No CUDA header is included here.
#include <cstddef>
#include <cstdint>

#include "cuda/status.hpp"

namespace apiary::cuda {

/// Largest finite IEEE binary16 value; fp32->fp16 casts clamp to [-f16_max, f16_max].
inline constexpr float f16_max = 65504.0f;

namespace cpu {

/// acc[i] = acc[i] + w * x[i] for i in [0, n): a float multiply then a float add, each
/// rounded (never fused). `acc` and `x` must not overlap.
void weighted_accumulate(float* acc, const float* x, float w, std::size_t n) noexcept;

/// dst[i] = binary16 bits of clamp(src[i], -65504, 65504), rounded to nearest even.
/// Infinities become +-65504; NaN stays NaN (sign and top 10 payload bits kept, quiet
/// bit set), the rule of x86 F16C and ARM FCVT. Subnormal results are kept (no flush).
void cast_f32_to_f16(std::uint16_t* dst, const float* src, std::size_t n) noexcept;

/// dst[i] = the exact float value of the binary16 bits src[i] (subnormals, +-inf, and
/// NaN with its payload and quiet bit set, as F16C).
void cast_f16_to_f32(float* dst, const std::uint16_t* src, std::size_t n) noexcept;

/// dst[i] = src[i] / divisor (one rounded float division; averaging a sum of `divisor`
/// contributions). dst may equal src.
void divide(float* dst, const float* src, float divisor, std::size_t n) noexcept;

/// Sum of x[0..n) accumulated in double in a fixed order (8 interleaved partial sums,
/// then the tail, then a pairwise combination), so it is the same on every run.
double sum(const float* x, std::size_t n) noexcept;

/// IEEE binary32 -> binary16 bits, round to nearest even, no clamp: values of
/// magnitude >= 65520 become +-inf. NaN as in cast_f32_to_f16.
std::uint16_t f32_to_f16_bits(float value) noexcept;

/// IEEE binary16 bits -> the exact binary32 value (NaN as in cast_f16_to_f32).
float f16_bits_to_f32(std::uint16_t bits) noexcept;

}  // namespace cpu

namespace gpu {

/// cpu::weighted_accumulate on device pointers of the current device, enqueued on
/// `stream` (returns before the kernel ends; synchronize the stream before reading).
status weighted_accumulate(float* acc, const float* x, float w, std::size_t n,
                           stream_handle stream = nullptr);

/// cpu::cast_f32_to_f16 on device pointers, enqueued on `stream`.
status cast_f32_to_f16(std::uint16_t* dst, const float* src, std::size_t n,
                       stream_handle stream = nullptr);

/// cpu::cast_f16_to_f32 on device pointers, enqueued on `stream`.
status cast_f16_to_f32(float* dst, const std::uint16_t* src, std::size_t n,
                       stream_handle stream = nullptr);

/// cpu::divide on device pointers, enqueued on `stream`.
status divide(float* dst, const float* src, float divisor, std::size_t n,
              stream_handle stream = nullptr);

/// Sum of the device array x[0..n) in double (per-thread partial sums, a block tree,
/// then one block over the block sums: deterministic for a given n). Waits for
/// `stream` and writes the result to the host double `*out`.
status sum(const float* x, std::size_t n, double* out, stream_handle stream = nullptr);

}  // namespace gpu

/// weighted_accumulate on `where`'s memory (host for cpu, device for cuda).
status weighted_accumulate(backend where, float* acc, const float* x, float w, std::size_t n,
                           stream_handle stream = nullptr);

/// cast_f32_to_f16 on `where`'s memory.
status cast_f32_to_f16(backend where, std::uint16_t* dst, const float* src, std::size_t n,
                       stream_handle stream = nullptr);

/// cast_f16_to_f32 on `where`'s memory.
status cast_f16_to_f32(backend where, float* dst, const std::uint16_t* src, std::size_t n,
                       stream_handle stream = nullptr);

/// divide on `where`'s memory.
status divide(backend where, float* dst, const float* src, float divisor, std::size_t n,
              stream_handle stream = nullptr);

/// sum on `where`'s memory; the result always lands in the host double `*out`.
status sum(backend where, const float* x, std::size_t n, double* out,
           stream_handle stream = nullptr);

}  // namespace apiary::cuda
