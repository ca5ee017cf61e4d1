#pragma once
/// What the codec loop files share: how loops are compiled for several instruction sets,
/// and small helpers. Internal to messages/tensor/codec_kernels*.cpp.
#include <cstdint>

#include "messages/tensor/float16.hpp"

// On x86-64 with GCC each plain loop is also built for AVX2 and the loader picks the best
// one (APIARY_CODEC_CLONES); loops GCC cannot vectorize by itself have an explicit AVX2
// version chosen at run time (APIARY_CODEC_AVX2). Results are the same bits either way:
// no fused multiply-add, explicit lanes, the same comparisons.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#include <immintrin.h>
#define APIARY_CODEC_CLONES __attribute__((target_clones("avx2", "default")))
#define APIARY_CODEC_AVX2 1
#else
#define APIARY_CODEC_CLONES
#define APIARY_CODEC_AVX2 0
#endif

namespace apiary::messages::kernels {

/// clamp(v, -65504, 65504) on the bits, which keeps loops free of float compares (GCC
/// does not if-convert those); NaN lies above infinity and passes unchanged.
inline float clamp_to_half_range(float v) {
  const std::uint32_t bits = bits_of_float(v);
  const std::uint32_t mag = bits & 0x7fffffffu;
  const bool saturate = mag > 0x477fe000u && mag <= 0x7f800000u;
  return float_of_bits(saturate ? ((bits & 0x80000000u) | 0x477fe000u) : bits);
}

}  // namespace apiary::messages::kernels
