#include "messages/tensor/codec_kernels.hpp"

#include "messages/tensor/bfloat16.hpp"
#include "messages/tensor/codec_simd.hpp"
#include "messages/tensor/float16.hpp"

namespace apiary::messages::kernels {
namespace {
// Partial sums kept apart so that a float64 sum vectorizes without reassociation: two
// 4-wide float64 vectors.
constexpr std::size_t lanes = 8;
}  // namespace

APIARY_CODEC_CLONES void floats_to_halves(std::uint16_t* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
}

APIARY_CODEC_CLONES void halves_to_floats(float* dst, const std::uint16_t* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}

APIARY_CODEC_CLONES void floats_to_bfloat16s(std::uint16_t* dst, const float* src,
                                             std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = float_to_bfloat16(src[i]);
}

APIARY_CODEC_CLONES void bfloat16s_to_floats(float* dst, const std::uint16_t* src,
                                             std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = bfloat16_to_float(src[i]);
}

APIARY_CODEC_CLONES void doubles_to_floats(float* dst, const double* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

APIARY_CODEC_CLONES void floats_to_doubles(double* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<double>(src[i]);
}

APIARY_CODEC_CLONES double sum(const float* x, std::size_t n) {
  double acc[lanes] = {};
  const std::size_t body = n - n % lanes;
  for (std::size_t i = 0; i < body; i += lanes) {
    for (std::size_t j = 0; j < lanes; ++j) acc[j] += static_cast<double>(x[i + j]);
  }
  for (std::size_t i = body; i < n; ++i) acc[i - body] += static_cast<double>(x[i]);
  double total = 0.0;
  for (std::size_t j = 0; j < lanes; ++j) total += acc[j];
  return total;
}

APIARY_CODEC_CLONES double sum_squared_deviation(const float* x, std::size_t n, double center) {
  double acc[lanes] = {};
  const std::size_t body = n - n % lanes;
  for (std::size_t i = 0; i < body; i += lanes) {
    for (std::size_t j = 0; j < lanes; ++j) {
      const double d = static_cast<double>(x[i + j]) - center;
      acc[j] += d * d;
    }
  }
  for (std::size_t i = body; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - center;
    acc[i - body] += d * d;
  }
  double total = 0.0;
  for (std::size_t j = 0; j < lanes; ++j) total += acc[j];
  return total;
}

APIARY_CODEC_CLONES float abs_max(const float* x, std::size_t n) {
  // |x| as bits orders like |x| as a value (NaN above infinity): an integer max.
  std::uint32_t best = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t mag = bits_of_float(x[i]) & 0x7fffffffu;
    best = mag > best ? mag : best;
  }
  return float_of_bits(best);
}

APIARY_CODEC_CLONES std::uint8_t max_index(const std::uint8_t* idx, std::size_t n) {
  std::uint8_t best = 0;
  for (std::size_t i = 0; i < n; ++i) best = idx[i] > best ? idx[i] : best;
  return best;
}

APIARY_CODEC_CLONES void standardize_to_halves(std::uint16_t* dst, const float* x,
                                               std::size_t n, float mean, float std) {
  for (std::size_t i = 0; i < n; ++i) {
    dst[i] = float_to_half(clamp_to_half_range((x[i] - mean) / std));
  }
}

APIARY_CODEC_CLONES void destandardize(float* dst, const std::uint16_t* src, std::size_t n,
                                       float mean, float std) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]) * std + mean;
}

APIARY_CODEC_CLONES void destandardize_doubles(double* dst, const std::uint16_t* src, std::size_t n,
                                               float mean, float std) {
  const double m = mean;
  const double s = std;
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<double>(half_to_float(src[i])) * s + m;
}

void destandardize_halves(std::uint16_t* dst, const std::uint16_t* src, std::size_t n, float mean, float std) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t scaled = float_to_half(half_to_float(src[i]) * std);
    dst[i] = float_to_half(half_to_float(scaled) + mean);
  }
}

APIARY_CODEC_CLONES void uniform_indices(std::uint8_t* idx, const float* x, std::size_t n,
                                         float shift, float scale) {
  // Adding and subtracting 1.5 * 2^23 rounds a float of magnitude below 2^22 to an
  // integer, half to even, in the default rounding mode. Values are first clamped to
  // +-200 (well past the 0..255 range; NaN goes to -200) so the trick applies.
  constexpr float magic = 12582912.0f;
  for (std::size_t i = 0; i < n; ++i) {
    float v = (x[i] - shift) / scale;
    v = v >= -200.0f ? v : -200.0f;
    v = v <= 200.0f ? v : 200.0f;
    const float rounded = (v + magic) - magic;
    int k = static_cast<int>(rounded) + 128;
    k = k < 0 ? 0 : k;
    k = k > 255 ? 255 : k;
    idx[i] = static_cast<std::uint8_t>(k);
  }
}

void bucket_sums(const float* x, const std::uint8_t* idx, std::size_t n, double* sums,
                 std::uint64_t* counts) {
  for (std::size_t i = 0; i < n; ++i) {
    sums[idx[i]] += static_cast<double>(x[i]);
    counts[idx[i]] += 1;
  }
}

void key_histogram(std::uint32_t* counts, const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) ++counts[order_key(bits_of_float(x[i])) >> 16];
}

APIARY_CODEC_CLONES void gather16(std::uint16_t* out, const std::uint16_t* table,
                                  const std::uint8_t* idx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = table[idx[i]];
}

APIARY_CODEC_CLONES void gather32(std::uint32_t* out, const std::uint32_t* table,
                                  const std::uint8_t* idx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = table[idx[i]];
}

APIARY_CODEC_CLONES void gather64(std::uint64_t* out, const std::uint64_t* table,
                                  const std::uint8_t* idx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = table[idx[i]];
}

APIARY_CODEC_CLONES void scaled_gather(float* out, const float* code, const std::uint8_t* q,
                                       std::size_t n, float scale) {
  for (std::size_t i = 0; i < n; ++i) out[i] = code[q[i]] * scale;
}

}  // namespace apiary::messages::kernels
