#pragma once
/// The bits of a binary32 float and back, for the CPU twins' bit arithmetic (binary16
/// conversion, absolute values on the bits) and their tests. memcpy, so no aliasing
/// rule is broken; compilers turn it into a register move.
#include <cstdint>
#include <cstring>

namespace apiary::cuda {

/// The IEEE binary32 bit pattern of `f`.
inline std::uint32_t bits_of(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// The float whose IEEE binary32 bit pattern is `u`.
inline float float_of(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace apiary::cuda
