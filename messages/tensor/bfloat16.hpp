#pragma once
/// bfloat16 <-> float32 conversions on raw bit patterns (bfloat16 is the upper half of
/// a float32). Used by the NONE codec's legacy mode, which ships bfloat16 as float32.
#include <cstdint>
#include <cstring>

namespace apiary::messages {

/// The float32 whose upper 16 bits are `bits` (exact: every bfloat16 is a float32).
inline float bfloat16_to_float(std::uint16_t bits) {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof value);
  return value;
}

/// The nearest bfloat16 to `value`, ties to even (as torch's float32 -> bfloat16 cast);
/// NaN stays NaN (quiet, sign kept), infinities stay infinities.
inline std::uint16_t float_to_bfloat16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // keep NaN a quiet NaN
  }
  const std::uint32_t lsb = (bits >> 16) & 1u;  // round half to even
  bits += 0x7fffu + lsb;
  return static_cast<std::uint16_t>(bits >> 16);
}

}  // namespace apiary::messages
