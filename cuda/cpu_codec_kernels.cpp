// The CPU twins of codec_kernels.hpp: plain indexed loops (vectorizable where the
// compiler can), no fused multiply-add (this file is built with -ffp-contract=off).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda/bits.hpp"
#include "cuda/codec_kernels.hpp"
#include "cuda/kernels.hpp"

namespace apiary::cuda::cpu {
namespace {

// Borders strictly below v in 255 ascending borders: a branch-free binary search (after
// the step of width w, pos counts the borders below v among the first pos + w). NaN: 0.
int borders_below(const float* borders, float v) {
  int pos = 0;
  for (int step = 128; step > 0; step /= 2) pos += borders[pos + step - 1] < v ? step : 0;
  return pos;
}

// Elements per chunk of the standardize loop's float scratch (16 KiB on the stack).
constexpr std::size_t chunk = 4096;

}  // namespace

double sum_squared_deviation(const float* x, std::size_t n, double center) noexcept {
  // 8 interleaved double lanes, combined pairwise, as cpu::sum.
  double lane[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (std::size_t j = 0; j < 8; ++j) {
      const double d = static_cast<double>(x[i + j]) - center;
      lane[j] += d * d;
    }
  }
  for (std::size_t j = 0; i + j < n; ++j) {
    const double d = static_cast<double>(x[i + j]) - center;
    lane[j] += d * d;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

void row_moments(float* means, float* stds, const float* x, std::size_t rows, std::size_t len,
                 float min_std) noexcept {
  for (std::size_t r = 0; r < rows && len > 0; ++r) {
    const float* row = x + r * len;
    const auto mean = static_cast<float>(sum(row, len) / static_cast<double>(len));
    const double ssd = sum_squared_deviation(row, len, static_cast<double>(mean));
    const auto std = static_cast<float>(std::sqrt(ssd / static_cast<double>(len)));
    means[r] = mean;
    stds[r] = std >= min_std ? std : min_std;  // also replaces a NaN std
  }
}

void standardize_to_f16(std::uint16_t* dst, const float* x, std::size_t rows, std::size_t len,
                        const float* means, const float* stds) noexcept {
  float scratch[chunk];
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t begin = 0; begin < len; begin += chunk) {
      const std::size_t count = std::min(chunk, len - begin);
      const float* in = x + r * len + begin;
      for (std::size_t i = 0; i < count; ++i) scratch[i] = (in[i] - means[r]) / stds[r];
      cast_f32_to_f16(dst + r * len + begin, scratch, count);
    }
  }
}

void destandardize_from_f16(float* dst, const std::uint16_t* src, std::size_t rows,
                            std::size_t len, const float* means, const float* stds) noexcept {
  for (std::size_t r = 0; r < rows; ++r) {
    cast_f16_to_f32(dst + r * len, src + r * len, len);
    float* out = dst + r * len;
    for (std::size_t i = 0; i < len; ++i) out[i] = out[i] * stds[r] + means[r];
  }
}

void uniform_indices(std::uint8_t* idx, const float* x, std::size_t n, float shift,
                     float scale) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    float v = (x[i] - shift) / scale;
    // Clamp far outside 0..255 first (NaN goes to -200), then round half to even.
    v = v >= -200.0f ? v : -200.0f;
    v = v <= 200.0f ? v : 200.0f;
    const int k = static_cast<int>(std::nearbyint(v)) + 128;
    idx[i] = static_cast<std::uint8_t>(k < 0 ? 0 : (k > 255 ? 255 : k));
  }
}

void search_borders(std::uint8_t* idx, const float* x, std::size_t n, float divisor,
                    const borders255& borders) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    idx[i] = static_cast<std::uint8_t>(borders_below(borders.value, x[i] / divisor));
  }
}

void key_histogram(std::uint32_t* counts, const float* x, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t b = bits_of(x[i]);
    const std::uint32_t key = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
    ++counts[key >> 16];
  }
}

void bucket_sums(double* sums, std::uint64_t* counts, const float* x, const std::uint8_t* idx,
                 std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    sums[idx[i]] += static_cast<double>(x[i]);
    counts[idx[i]] += 1;
  }
}

void codebook_lookup(float* out, const float* codebook, const std::uint8_t* idx,
                     std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = codebook[idx[i]];
}

void block_absmax(float* absmax, const float* x, std::size_t n) noexcept {
  for (std::size_t b = 0; b * blockwise_block < n; ++b) {
    const std::size_t begin = b * blockwise_block;
    const std::size_t end = std::min(n, begin + blockwise_block);
    // |x| as bits orders like |x| (NaN above infinity): an integer max.
    std::uint32_t best = 0;
    for (std::size_t i = begin; i < end; ++i) best = std::max(best, bits_of(x[i]) & 0x7fffffffu);
    absmax[b] = float_of(best);
  }
}

void blockwise_quantize(std::uint8_t* q, const float* x, std::size_t n, const float* absmax,
                        const borders255& mids, std::uint8_t zero_index) noexcept {
  for (std::size_t b = 0; b * blockwise_block < n; ++b) {
    const std::size_t begin = b * blockwise_block;
    const std::size_t len = std::min(blockwise_block, n - begin);
    if (absmax[b] > 0.0f) {
      search_borders(q + begin, x + begin, len, absmax[b], mids);
    } else {
      std::memset(q + begin, zero_index, len);
    }
  }
}

void blockwise_dequantize(float* out, const std::uint8_t* q, std::size_t n, const float* absmax,
                          const float* code) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = code[q[i]] * absmax[i / blockwise_block];
}

}  // namespace apiary::cuda::cpu
