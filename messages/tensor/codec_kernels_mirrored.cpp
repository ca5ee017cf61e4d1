// MirroredBorders: the border search of BLOCKWISE_8BIT without memory lookups. The
// positive borders are split by binade (float exponent) into at most 256 bins, each
// holding at most one border; per bin, a byte says how many borders lie in earlier bins
// and three bytes hold the mantissa of its border. Those tables live in AVX-512 registers
// and are read with byte permutes, 64 values at a time.
#include <algorithm>

// GCC 12 reports the AVX-512 intrinsics' own placeholder operands as "may be used
// uninitialized" once inlined; the operands are written by the instructions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "messages/tensor/codec_kernels.hpp"
#include "messages/tensor/codec_simd.hpp"
#include "messages/tensor/float16.hpp"

namespace apiary::messages::kernels {

namespace {

constexpr std::uint32_t mantissa_mask = 0x7fffffu;
constexpr std::uint32_t mantissa_bits = 23;
// The binade slot of every value below the lowest border's binade (and of zero).
constexpr std::uint32_t below_slot = 0;

std::uint32_t exponent_of(float v) { return bits_of_float(v) >> mantissa_bits; }

}  // namespace

bool MirroredBorders::build(const float* borders) {
  std::uint32_t negatives = 0;
  while (negatives < 255 && borders[negatives] < 0.0f) ++negatives;
  const std::uint32_t positives = 255 - negatives;
  if (positives == 0 || negatives > positives) return false;
  const float* pos = borders + negatives;
  if (!(pos[0] > 0.0f)) return false;
  // Mirror: the j-th negative border from zero is minus the j-th positive one.
  for (std::uint32_t j = 0; j < negatives; ++j) {
    if (borders[negatives - 1 - j] != -pos[j]) return false;
  }
  for (std::uint32_t k = 1; k < positives; ++k) {
    if (!(pos[k - 1] < pos[k])) return false;
  }
  const std::uint32_t lowest = exponent_of(pos[0]);
  const std::uint32_t highest = exponent_of(pos[positives - 1]);
  // Slots: below_slot, one per binade, one above; they index a 32-entry register table.
  if (highest - lowest + 1 > binade_params_.size() - 2) return false;
  negatives_ = negatives;
  lowest_exponent_ = lowest;
  binades_ = highest - lowest + 1;
  std::uint32_t bins = 0;
  auto add_bin = [&](std::uint32_t below, std::uint32_t mantissa) {
    if (bins == below_.size()) return false;
    below_[bins] = static_cast<std::uint8_t>(below);
    for (std::size_t b = 0; b < mantissa_bytes_.size(); ++b) {
      mantissa_bytes_[b][bins] = static_cast<std::uint8_t>(mantissa >> (8 * b));
    }
    ++bins;
    return true;
  };
  // A bin without a border holds the largest mantissa: no value of the bin lies above it.
  binade_params_[below_slot] = bins | (31u << 16);
  if (!add_bin(0, mantissa_mask)) return false;
  std::uint32_t k = 0;
  for (std::uint32_t e = lowest; e <= highest; ++e) {
    const std::uint32_t first = k;
    while (k < positives && exponent_of(pos[k]) == e) ++k;
    // Fewest top mantissa bits that put the binade's borders in distinct bins.
    std::uint32_t width = 0;
    auto distinct = [&](std::uint32_t bits) {
      for (std::uint32_t i = first + 1; i < k; ++i) {
        const std::uint32_t shift = mantissa_bits - bits;
        if (((bits_of_float(pos[i]) & mantissa_mask) >> shift) ==
            ((bits_of_float(pos[i - 1]) & mantissa_mask) >> shift)) {
          return false;
        }
      }
      return true;
    };
    while (!distinct(width)) ++width;
    if (width > 8) return false;
    binade_params_[e - lowest + 1] = bins | ((mantissa_bits - width) << 16);
    std::uint32_t i = first;
    for (std::uint32_t bin = 0; bin < (1u << width); ++bin) {
      const std::uint32_t below = i;
      std::uint32_t mantissa = mantissa_mask;
      if (i < k && ((bits_of_float(pos[i]) & mantissa_mask) >> (mantissa_bits - width)) == bin) {
        mantissa = bits_of_float(pos[i]) & mantissa_mask;
        ++i;
      }
      if (!add_bin(below, mantissa)) return false;
    }
  }
  // Every slot above the highest binade: all positive borders are below.
  for (std::size_t s = binades_ + 1; s < binade_params_.size(); ++s) {
    binade_params_[s] = bins | (31u << 16);
  }
  return add_bin(positives, mantissa_mask);
}

// One value: count the positive borders below t (|v|, or the next float above |v| for a
// negative v, so that ties count as below), then mirror for negatives.
std::uint8_t MirroredBorders::search_one(float v) const {
  if (v != v) return 0;  // NaN: no border is below it
  const std::uint32_t bits = bits_of_float(v);
  const std::uint32_t negative = bits >> 31;
  const std::uint32_t t = (bits & 0x7fffffffu) + negative;
  const std::int32_t slot =
      std::clamp<std::int32_t>(static_cast<std::int32_t>(t >> mantissa_bits) - lowest_exponent_ + 1,
                               0, binades_ + 1);
  const std::uint32_t params = binade_params_[slot];
  const std::uint32_t mantissa = t & mantissa_mask;
  const std::uint32_t bin = (params & 0xffffu) + (mantissa >> (params >> 16));
  const std::uint32_t border = mantissa_bytes_[0][bin] | (mantissa_bytes_[1][bin] << 8) |
                               (mantissa_bytes_[2][bin] << 16);
  const std::uint32_t count = below_[bin] + (mantissa > border ? 1u : 0u);
  return static_cast<std::uint8_t>(negative != 0 ? negatives_ - std::min(count, negatives_)
                                                 : negatives_ + count);
}

#if APIARY_CODEC_AVX2
#define APIARY_CODEC_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi")))

namespace {

// 16 int32 lanes joined from four quarters of 16 bytes each.
APIARY_CODEC_VBMI inline __m512i join_quarters(const __m128i* q) {
  __m512i r = _mm512_castsi128_si512(q[0]);
  r = _mm512_inserti32x4(r, q[1], 1);
  r = _mm512_inserti32x4(r, q[2], 2);
  return _mm512_inserti32x4(r, q[3], 3);
}

// table[bin] for 64 byte indices over a 256-byte table held in four registers.
APIARY_CODEC_VBMI inline __m512i lookup256(const __m512i* table, __m512i bin) {
  const __m512i low = _mm512_permutex2var_epi8(table[0], bin, table[1]);
  const __m512i high = _mm512_permutex2var_epi8(table[2], bin, table[3]);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(bin), low, high);
}

// The first n - n % 64 values; `sources` are the 256-byte tables below, then the
// mantissa bytes from the lowest. Fetches next[0..n) into L1 on the way (if not null).
APIARY_CODEC_VBMI std::size_t search_vbmi(std::uint8_t* idx, const float* x, std::size_t n,
                                          float divisor, const float* next,
                                          const std::uint32_t* binade_params,
                                          const std::uint8_t* const* sources,
                                          std::int32_t lowest_exponent, std::int32_t binades,
                                          std::uint32_t negatives_count) {
  const __m512 div = _mm512_set1_ps(divisor);
  const __m512i params_lo = _mm512_loadu_si512(binade_params);
  const __m512i params_hi = _mm512_loadu_si512(binade_params + 16);
  __m512i tables[4][4];
  for (int t = 0; t < 4; ++t) {
    for (int j = 0; j < 4; ++j) tables[t][j] = _mm512_loadu_si512(sources[t] + 64 * j);
  }
  const __m512i exponent_base = _mm512_set1_epi32(lowest_exponent - 1);
  const __m512i top_slot = _mm512_set1_epi32(binades + 1);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i mant = _mm512_set1_epi32(static_cast<int>(mantissa_mask));
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff);
  const __m512i low16 = _mm512_set1_epi32(0xffff);
  const __m512i negatives = _mm512_set1_epi8(static_cast<char>(negatives_count));
  const __m512i one = _mm512_set1_epi8(1);
  const std::size_t body = n - n % 64;
  for (std::size_t i = 0; i < body; i += 64) {
    // The memory is idle while this loop computes: fetch what the caller reads next.
    if (next != nullptr) {
      for (int line = 0; line < 4; ++line) __builtin_prefetch(next + i + 16 * line, 0, 3);
    }
    __m128i bins[4], m0[4], m1[4], m2[4];
    __mmask64 negative = 0, nan = 0;
    for (int g = 0; g < 4; ++g) {
      // t = |v| (next float up for negatives); its binade slot, then its bin.
      const __m512 v = _mm512_div_ps(_mm512_loadu_ps(x + i + 16 * g), div);
      const __m512i bits = _mm512_castps_si512(v);
      negative |= static_cast<__mmask64>(_mm512_movepi32_mask(bits)) << (16 * g);
      nan |= static_cast<__mmask64>(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) << (16 * g);
      const __m512i t = _mm512_add_epi32(_mm512_and_si512(bits, magnitude), _mm512_srli_epi32(bits, 31));
      __m512i slot = _mm512_sub_epi32(_mm512_srli_epi32(t, mantissa_bits), exponent_base);
      slot = _mm512_min_epi32(_mm512_max_epi32(slot, zero), top_slot);
      const __m512i params = _mm512_permutex2var_epi32(params_lo, slot, params_hi);
      const __m512i m = _mm512_and_si512(t, mant);
      const __m512i bin = _mm512_add_epi32(_mm512_and_si512(params, low16),
                                           _mm512_srlv_epi32(m, _mm512_srli_epi32(params, 16)));
      bins[g] = _mm512_cvtepi32_epi8(bin);
      m0[g] = _mm512_cvtepi32_epi8(m);
      m1[g] = _mm512_cvtepi32_epi8(_mm512_srli_epi32(m, 8));
      m2[g] = _mm512_cvtepi32_epi8(_mm512_srli_epi32(m, 16));
    }
    // Per byte lane: the borders in earlier bins, plus one if the bin's border is below.
    const __m512i bin = join_quarters(bins);
    const __m512i mb0 = join_quarters(m0), mb1 = join_quarters(m1), mb2 = join_quarters(m2);
    const __m512i below = lookup256(tables[0], bin);
    const __m512i b0 = lookup256(tables[1], bin);
    const __m512i b1 = lookup256(tables[2], bin);
    const __m512i b2 = lookup256(tables[3], bin);
    const __mmask64 above =
        _mm512_cmpgt_epu8_mask(mb2, b2) |
        (_mm512_cmpeq_epi8_mask(mb2, b2) &
         (_mm512_cmpgt_epu8_mask(mb1, b1) | (_mm512_cmpeq_epi8_mask(mb1, b1) & _mm512_cmpgt_epu8_mask(mb0, b0))));
    const __m512i count = _mm512_mask_add_epi8(below, above, below, one);
    // Mirror: negatives + count above zero, negatives - min(count, negatives) below it.
    const __m512i up = _mm512_add_epi8(negatives, count);
    const __m512i down = _mm512_sub_epi8(negatives, _mm512_min_epu8(count, negatives));
    _mm512_storeu_si512(idx + i, _mm512_maskz_mov_epi8(~nan, _mm512_mask_blend_epi8(negative, up, down)));
  }
  return body;
}

}  // namespace
#endif

bool MirroredBorders::vectorized() {
#if APIARY_CODEC_AVX2
  static const bool vbmi = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                           __builtin_cpu_supports("avx512vbmi");
  return vbmi;
#else
  return false;
#endif
}

void MirroredBorders::search(std::uint8_t* idx, const float* x, std::size_t n, float divisor,
                             const float* next) const {
  std::size_t done = 0;
#if APIARY_CODEC_AVX2
  if (vectorized()) {
    const std::uint8_t* sources[4] = {below_.data(), mantissa_bytes_[0].data(),
                                      mantissa_bytes_[1].data(), mantissa_bytes_[2].data()};
    done = search_vbmi(idx, x, n, divisor, next, binade_params_.data(), sources, lowest_exponent_,
                       binades_, negatives_);
  }
#endif
  for (std::size_t i = done; i < n; ++i) idx[i] = search_one(x[i] / divisor);
}

}  // namespace apiary::messages::kernels
