// CPU twins of the kernels in kernels.cu. The loops are written so that GCC and Clang
// vectorize them (no calls, no early exits, integer selects instead of branches,
// restrict pointers); CMake compiles this file with -ffp-contract=off so that a multiply
// and an add are never fused, which keeps the results bit-identical to the CUDA kernels,
// and with -fno-trapping-math so that GCC if-converts the selects.
#include "cuda/bits.hpp"
#include "cuda/kernels.hpp"

namespace apiary::cuda::cpu {
namespace {

// binary32 bits -> binary16 bits, round to nearest even. Each case is computed and
// the right one selected, so the loop that inlines this stays branch-free.
inline std::uint32_t half_from_bits(std::uint32_t b) {
  const std::uint32_t sign = (b >> 16) & 0x8000u;
  const std::uint32_t mag = b & 0x7fffffffu;
  // Normal half (|x| in [2^-14, 2^16)): drop 13 mantissa bits with round-to-nearest-
  // even (add 0xfff plus the lowest kept bit), and rebias the exponent from 127 to 15
  // (subtract 112 << 23). A carry out of the mantissa correctly bumps the exponent,
  // and everything from 65520 upwards carries into the infinity pattern 0x7c00.
  const std::uint32_t normal = (mag - (112u << 23) + 0xfffu + ((mag >> 13) & 1u)) >> 13;
  // Subnormal half (|x| < 2^-14): adding 0.5f makes the FPU round |x| to a multiple of
  // 2^-24 (the ulp of 0.5f), which is the half subnormal step, in nearest-even mode; the
  // bits above those of 0.5f are then the half mantissa (0x400 is the smallest normal).
  const std::uint32_t subnormal = bits_of(float_of(mag) + 0.5f) - bits_of(0.5f);
  // NaN keeps its top 10 payload bits and becomes quiet; infinity and every finite
  // value from 2^16 upwards become infinity.
  const std::uint32_t nan = 0x7e00u | ((mag >> 13) & 0x3ffu);
  const std::uint32_t special = mag > 0x7f800000u ? nan : 0x7c00u;
  const std::uint32_t body =
      mag >= 0x47800000u ? special : (mag < 0x38800000u ? subnormal : normal);
  return sign | body;
}

// binary16 bits -> binary32 bits (exact).
inline std::uint32_t bits_from_half(std::uint32_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  const std::uint32_t mag = h & 0x7fffu;
  // Normal: widen the mantissa by 13 bits and rebias the exponent from 15 to 127.
  const std::uint32_t normal = (mag << 13) + (112u << 23);
  // Subnormal (and zero): mag * 2^-24 is exact in float (mag < 1024).
  const std::uint32_t subnormal = bits_of(static_cast<float>(mag) * 0x1p-24f);
  // Inf keeps an all-ones exponent; NaN also gets the quiet bit.
  const std::uint32_t special = (mag << 13) | 0x7f800000u | (mag > 0x7c00u ? 0x00400000u : 0u);
  const std::uint32_t body = mag >= 0x7c00u ? special : (mag < 0x0400u ? subnormal : normal);
  return sign | body;
}

constexpr std::size_t sum_lanes = 8;  // partial sums: enough for 4-wide double vectors x2

}  // namespace

// On x86-64 with GCC, each loop is also compiled for AVX2 and the best version is picked
// when the program loads (the casts run about 3x faster than the SSE2 baseline). The
// results are the same bits either way: no fusion, and the sum's lanes are explicit.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define APIARY_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define APIARY_CPU_CLONES
#endif

std::uint16_t f32_to_f16_bits(float value) noexcept {
  return static_cast<std::uint16_t>(half_from_bits(bits_of(value)));
}

float f16_bits_to_f32(std::uint16_t bits) noexcept { return float_of(bits_from_half(bits)); }

APIARY_CPU_CLONES void weighted_accumulate(float* acc, const float* x, float w,
                                           std::size_t n) noexcept {
  float* __restrict a = acc;
  const float* __restrict b = x;
  for (std::size_t i = 0; i < n; ++i) a[i] = a[i] + w * b[i];
}

APIARY_CPU_CLONES void cast_f32_to_f16(std::uint16_t* dst, const float* src,
                                       std::size_t n) noexcept {
  std::uint16_t* __restrict d = dst;
  const float* __restrict s = src;
  for (std::size_t i = 0; i < n; ++i) {
    // Clamp to +-65504 (bits 0x477fe000) on the bits, which keeps the loop free of float
    // compares (GCC will not if-convert those); NaN lies above infinity and passes.
    const std::uint32_t b = bits_of(s[i]);
    const std::uint32_t mag = b & 0x7fffffffu;
    const bool saturate = mag > 0x477fe000u && mag <= 0x7f800000u;
    const std::uint32_t clamped = saturate ? ((b & 0x80000000u) | 0x477fe000u) : b;
    d[i] = static_cast<std::uint16_t>(half_from_bits(clamped));
  }
}

APIARY_CPU_CLONES void cast_f16_to_f32(float* dst, const std::uint16_t* src,
                                       std::size_t n) noexcept {
  float* __restrict d = dst;
  const std::uint16_t* __restrict s = src;
  for (std::size_t i = 0; i < n; ++i) d[i] = float_of(bits_from_half(s[i]));
}

APIARY_CPU_CLONES void divide(float* dst, const float* src, float divisor, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] / divisor;
}

APIARY_CPU_CLONES double sum(const float* x, std::size_t n) noexcept {
  double lane[sum_lanes] = {};
  std::size_t i = 0;
  for (; i + sum_lanes <= n; i += sum_lanes) {
    for (std::size_t j = 0; j < sum_lanes; ++j) lane[j] += static_cast<double>(x[i + j]);
  }
  for (std::size_t j = 0; i + j < n; ++j) lane[j] += static_cast<double>(x[i + j]);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

}  // namespace apiary::cuda::cpu
