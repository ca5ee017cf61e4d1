// The codec loops that GCC does not vectorize by itself (table lookups, the F16C
// conversion): a portable version, and an explicit AVX2 one chosen at run time.
#include <vector>

#include "messages/tensor/codec_kernels.hpp"
#include "messages/tensor/codec_simd.hpp"
#include "messages/tensor/float16.hpp"

namespace apiary::messages::kernels {

namespace {

APIARY_CODEC_CLONES void floats_to_halves_clamped_portable(std::uint16_t* dst, const float* src,
                                                           std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_half(clamp_to_half_range(src[i]));
}

#if APIARY_CODEC_AVX2
// The same conversion with the F16C instruction (round to nearest even, subnormals kept,
// NaN made quiet with its top payload bits: the bits of float_to_half), clamping on the
// bits as clamp_to_half_range does.
__attribute__((target("avx2,f16c"))) void floats_to_halves_clamped_f16c(std::uint16_t* dst,
                                                                        const float* src,
                                                                        std::size_t n) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i max_bits = _mm256_set1_epi32(0x477fe000);  // 65504.0f
  const __m256i inf_bits = _mm256_set1_epi32(0x7f800000);
  const std::size_t body = n - n % 8;
  for (std::size_t i = 0; i < body; i += 8) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i mag = _mm256_and_si256(bits, abs_mask);
    const __m256i saturate = _mm256_andnot_si256(_mm256_cmpgt_epi32(mag, inf_bits),
                                                 _mm256_cmpgt_epi32(mag, max_bits));
    const __m256i clamped = _mm256_or_si256(_mm256_andnot_si256(abs_mask, bits), max_bits);
    const __m256 v = _mm256_castsi256_ps(_mm256_blendv_epi8(bits, clamped, saturate));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  floats_to_halves_clamped_portable(dst + body, src + body, n - body);
}
#endif

}  // namespace

void floats_to_halves_clamped(std::uint16_t* dst, const float* src, std::size_t n) {
#if APIARY_CODEC_AVX2
  static const bool f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  if (f16c) return floats_to_halves_clamped_f16c(dst, src, n);
#endif
  floats_to_halves_clamped_portable(dst, src, n);
}

namespace {

// Branch-free binary search: after the step of width w, pos counts the borders below v
// among the first pos + w.
inline int borders_below(const float* borders, float v) {
  int pos = 0;
  pos += borders[pos + 127] < v ? 128 : 0;
  pos += borders[pos + 63] < v ? 64 : 0;
  pos += borders[pos + 31] < v ? 32 : 0;
  pos += borders[pos + 15] < v ? 16 : 0;
  pos += borders[pos + 7] < v ? 8 : 0;
  pos += borders[pos + 3] < v ? 4 : 0;
  pos += borders[pos + 1] < v ? 2 : 0;
  pos += borders[pos] < v ? 1 : 0;
  return pos;
}

void search_borders_scalar(std::uint8_t* idx, const float* x, std::size_t n, float divisor,
                           const float* borders) {
  for (std::size_t i = 0; i < n; ++i) {
    idx[i] = static_cast<std::uint8_t>(borders_below(borders, x[i] / divisor));
  }
}

#if APIARY_CODEC_AVX2
// Narrows 32 int32 (each 0..255; v[0] holds the first eight) to 32 bytes and stores
// them in order at `out`. Inlined into each AVX2 loop.
__attribute__((target("avx2"), always_inline)) inline void store_in_order(std::uint8_t* out,
                                                                          const __m256i (&v)[4]) {
  const __m256i lo = _mm256_packus_epi32(v[0], v[1]);
  const __m256i hi = _mm256_packus_epi32(v[2], v[3]);
  const __m256i bytes = _mm256_packus_epi16(lo, hi);
  const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), ordered);
}

// The same search, eight values at a time with AVX2 gathers (GCC does not vectorize the
// table lookups by itself). Same comparisons, same results.
__attribute__((target("avx2"))) void search_borders_avx2(std::uint8_t* idx, const float* x,
                                                         std::size_t n, float divisor,
                                                         const float* borders) {
  // Four groups of eight in flight: each gather waits on the previous step's result, so
  // independent groups hide that latency.
  constexpr std::size_t group = 32;
  const __m256 div = _mm256_set1_ps(divisor);
  const std::size_t body = n - n % group;
  for (std::size_t i = 0; i < body; i += group) {
    __m256 v[4];
    __m256i pos[4];
    for (int g = 0; g < 4; ++g) {
      v[g] = _mm256_div_ps(_mm256_loadu_ps(x + i + 8 * g), div);
      pos[g] = _mm256_setzero_si256();
    }
    for (int step = 128; step > 0; step >>= 1) {
      const __m256i offset = _mm256_set1_epi32(step - 1);
      const __m256i width = _mm256_set1_epi32(step);
      for (int g = 0; g < 4; ++g) {
        const __m256 border = _mm256_i32gather_ps(borders, _mm256_add_epi32(pos[g], offset), 4);
        const __m256 below = _mm256_cmp_ps(border, v[g], _CMP_LT_OQ);
        pos[g] = _mm256_add_epi32(pos[g], _mm256_and_si256(_mm256_castps_si256(below), width));
      }
    }
    store_in_order(idx + i, pos);
  }
  search_borders_scalar(idx + body, x + body, n - body, divisor, borders);
}
#endif

}  // namespace

void search_borders(std::uint8_t* idx, const float* x, std::size_t n, float divisor,
                    const float* borders) {
#if APIARY_CODEC_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return search_borders_avx2(idx, x, n, divisor, borders);
#endif
  search_borders_scalar(idx, x, n, divisor, borders);
}

bool BinnedBorders::build(const float* borders) {
  constexpr std::size_t bins = std::size_t{1} << 16;
  constexpr std::uint32_t no_border = 0xffffu;
  std::vector<std::uint32_t> per_bin(bins, 0);
  std::vector<std::uint32_t> low_key(bins, no_border);
  for (std::size_t k = 0; k < 255; ++k) {
    // -0 and +0 are equal values: keep the border in +0's bin so both compare alike.
    const float b = borders[k] == 0.0f ? 0.0f : borders[k];
    const std::uint32_t key = order_key(bits_of_float(b));
    if (++per_bin[key >> 16] > 1) return false;
    low_key[key >> 16] = key & 0xffffu;
  }
  entries_.assign(bins, 0);
  std::uint32_t below = 0;
  for (std::size_t bin = 0; bin < bins; ++bin) {
    entries_[bin] = (below << 16) | low_key[bin];
    below += per_bin[bin];
  }
  return true;
}

namespace {

// Within a bin, border < v exactly when the low key bits of v are above the border's.
APIARY_CODEC_CLONES void binned_search_portable(std::uint8_t* idx, const float* x, std::size_t n,
                                                float divisor, const std::uint32_t* entries) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t key = order_key(bits_of_float(x[i] / divisor));
    const std::uint32_t entry = entries[key >> 16];
    idx[i] = static_cast<std::uint8_t>((entry >> 16) + ((key & 0xffffu) > (entry & 0xffffu) ? 1u : 0u));
  }
}

#if APIARY_CODEC_AVX2
// The same, 32 values per step with AVX2 gathers; same comparisons, same results.
__attribute__((target("avx2"))) void binned_search_avx2(std::uint8_t* idx, const float* x,
                                                        std::size_t n, float divisor,
                                                        const std::uint32_t* entries) {
  constexpr std::size_t group = 32;
  const __m256 div = _mm256_set1_ps(divisor);
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i low16 = _mm256_set1_epi32(0xffff);
  const std::size_t body = n - n % group;
  for (std::size_t i = 0; i < body; i += group) {
    __m256i count[4];
    for (int g = 0; g < 4; ++g) {
      const __m256i bits = _mm256_castps_si256(_mm256_div_ps(_mm256_loadu_ps(x + i + 8 * g), div));
      // order_key: flip all bits of negatives, only the sign bit of the others.
      const __m256i key = _mm256_xor_si256(bits, _mm256_or_si256(_mm256_srai_epi32(bits, 31), sign));
      const __m256i entry = _mm256_i32gather_epi32(reinterpret_cast<const int*>(entries),
                                                   _mm256_srli_epi32(key, 16), 4);
      const __m256i above = _mm256_cmpgt_epi32(_mm256_and_si256(key, low16), _mm256_and_si256(entry, low16));
      count[g] = _mm256_sub_epi32(_mm256_srli_epi32(entry, 16), above);  // above is -1 or 0
    }
    store_in_order(idx + i, count);
  }
  binned_search_portable(idx + body, x + body, n - body, divisor, entries);
}
#endif

}  // namespace

void BinnedBorders::search(std::uint8_t* idx, const float* x, std::size_t n, float divisor) const {
#if APIARY_CODEC_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return binned_search_avx2(idx, x, n, divisor, entries_.data());
#endif
  binned_search_portable(idx, x, n, divisor, entries_.data());
}

}  // namespace apiary::messages::kernels
