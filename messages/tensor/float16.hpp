#pragma once
/// IEEE binary16 <-> binary32 conversions on raw bit patterns, written branch-free so that
/// loops over them vectorize. Round to nearest even, subnormals kept, infinities stay
/// infinities and NaN stays a quiet NaN. Matches torch/numpy float32 -> float16 casts.
#include <cstdint>
#include <cstring>

namespace apiary::messages {

/// Largest finite binary16 value; the FLOAT16 codec clamps to [-65504, 65504] first.
inline constexpr float half_max = 65504.0f;

/// The bits of a float32.
inline std::uint32_t bits_of_float(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

/// The float32 with the given bits.
inline float float_of_bits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

/// The binary16 nearest to `value` (ties to even); 65520 and above become infinity.
inline std::uint16_t float_to_half(float value) {
  const std::uint32_t bits = bits_of_float(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t mag = bits & 0x7fffffffu;
  // |x| in [2^-14, 2^16): move the exponent bias from 127 to 15 (-112 << 23) and drop
  // 13 mantissa bits rounding half to even; a mantissa carry lands in the exponent.
  const std::uint32_t normal = (mag - 0x38000000u + 0x0fffu + ((mag >> 13) & 1u)) >> 13;
  // |x| < 2^-14: adding 0.5 rounds |x| to a multiple of 2^-24 (the half subnormal step,
  // the ulp of 0.5f) in the default rounding mode; what lies above 0.5 is the mantissa.
  const std::uint32_t subnormal = bits_of_float(float_of_bits(mag) + 0.5f) - 0x3f000000u;
  // Infinity and overflow -> 0x7c00; NaN keeps its top payload bits and is made quiet.
  const std::uint32_t special = mag > 0x7f800000u ? (0x7e00u | ((mag >> 13) & 0x03ffu)) : 0x7c00u;
  const std::uint32_t body =
      mag >= 0x47800000u ? special : (mag < 0x38800000u ? subnormal : normal);
  return static_cast<std::uint16_t>(sign | body);
}

/// The float32 equal to the binary16 `half` (exact).
inline float half_to_float(std::uint16_t half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  const std::uint32_t mag = half & 0x7fffu;
  // Normal: widen the mantissa by 13 bits and move the bias from 15 to 127.
  const std::uint32_t normal = (mag << 13) + 0x38000000u;
  // Subnormal or zero: mag * 2^-24 is exact in float32.
  const std::uint32_t subnormal = bits_of_float(static_cast<float>(mag) * 0x1p-24f);
  // Infinity or NaN: all-ones exponent, payload kept, NaN made quiet.
  const std::uint32_t special = (mag << 13) | 0x7f800000u | (mag > 0x7c00u ? 0x00400000u : 0u);
  const std::uint32_t body = mag >= 0x7c00u ? special : (mag < 0x0400u ? subnormal : normal);
  return float_of_bits(sign | body);
}

}  // namespace apiary::messages
