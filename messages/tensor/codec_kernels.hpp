#pragma once
/// The element loops of the tensor codecs: plain indexed loops over non-aliasing arrays,
/// single-threaded, compiled so that the compiler vectorizes them (codec_kernels.cpp is
/// built with the dynamic vectorizer cost model, and for AVX2 beside the baseline on
/// x86-64). Sizes are element counts.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace apiary::messages::kernels {

/// dst[i] = float16(clamp(src[i], -65504, 65504)), round to nearest even; NaN stays NaN.
void floats_to_halves_clamped(std::uint16_t* dst, const float* src, std::size_t n);
/// dst[i] = float16(src[i]) without clamping (overflow gives infinity), as a cast.
void floats_to_halves(std::uint16_t* dst, const float* src, std::size_t n);
/// dst[i] = float32(src[i]) (exact).
void halves_to_floats(float* dst, const std::uint16_t* src, std::size_t n);
/// dst[i] = bfloat16(src[i]), round to nearest even.
void floats_to_bfloat16s(std::uint16_t* dst, const float* src, std::size_t n);
/// dst[i] = float32(src[i]) for bfloat16 src (exact).
void bfloat16s_to_floats(float* dst, const std::uint16_t* src, std::size_t n);
/// dst[i] = float32(src[i]) for float64 src, round to nearest even.
void doubles_to_floats(float* dst, const double* src, std::size_t n);
/// dst[i] = float64(src[i]) (exact).
void floats_to_doubles(double* dst, const float* src, std::size_t n);

/// Sum of x[0..n), accumulated in float64 over 8 interleaved lanes.
double sum(const float* x, std::size_t n);
/// Sum of (x[i] - center)^2 in float64 over 8 interleaved lanes.
double sum_squared_deviation(const float* x, std::size_t n, double center);
/// Largest |x[i]| (compared on the bit patterns; a NaN input gives NaN).
float abs_max(const float* x, std::size_t n);
/// Largest value of idx[0..n) (0 for n = 0).
std::uint8_t max_index(const std::uint8_t* idx, std::size_t n);

/// dst[i] = float16(clamp((x[i] - mean) / std, -65504, 65504)).
void standardize_to_halves(std::uint16_t* dst, const float* x, std::size_t n, float mean,
                           float std);
/// dst[i] = float32(src[i]) * std + mean (multiply, then add; never fused).
void destandardize(float* dst, const std::uint16_t* src, std::size_t n, float mean, float std);
/// The same in float64, as torch's in-place ops on a float64 tensor compute it:
/// dst[i] = float64(src[i]) * float64(std) + float64(mean).
void destandardize_doubles(double* dst, const std::uint16_t* src, std::size_t n, float mean, float std);
/// The same on a float16 tensor, rounded to float16 after the multiply and after the add
/// (each op in float32, as torch's mul_ / add_ with a float32 operand):
/// dst[i] = float16(float32(float16(float32(src[i]) * std)) + mean).
void destandardize_halves(std::uint16_t* dst, const std::uint16_t* src, std::size_t n, float mean, float std);

/// idx[i] = clamp(round_half_even((x[i] - shift) / scale) + 128, 0, 255); scale > 0.
void uniform_indices(std::uint8_t* idx, const float* x, std::size_t n, float shift, float scale);
/// idx[i] = number of the 255 ascending `borders` strictly below x[i] / divisor, in
/// [0, 255] (torch.bucketize with right=False; NaN gives 0). divisor > 0.
void search_borders(std::uint8_t* idx, const float* x, std::size_t n, float divisor,
                    const float* borders);
/// search_borders through a table, for borders that are at most one per bin of the top 16
/// bits of order_key (bins 2^-7 wide relative to their values; true of the dynamic code
/// table's midpoints and of quantiles of most data): per bin, the count of borders in
/// earlier bins and the low 16 key bits of the one inside, packed in one uint32, so a
/// search is one table read and one compare. Worth building (256 KiB, about 0.1 ms) for
/// 2^16 values or more. Same results as search_borders for non-NaN values.
class BinnedBorders {
 public:
  /// Builds the table over 255 ascending borders; false if a bin holds two of them (then
  /// use search_borders).
  bool build(const float* borders);
  /// idx[i] = number of borders below x[i] / divisor; divisor > 0. After build() is true.
  void search(std::uint8_t* idx, const float* x, std::size_t n, float divisor) const;

 private:
  // Per bin: (borders in earlier bins) << 16 | low 16 bits of its border's order_key, or
  // 0xffff without a border (no key of the bin lies above it).
  std::vector<std::uint32_t> entries_;
};

/// search_borders for 255 ascending borders mirrored about zero (the j-th negative border
/// from zero is minus the j-th positive one; the positives may have extra ones at the top),
/// whose positive borders fit in 256 bins of at most 8 top mantissa bits per binade: the
/// dynamic code table's midpoints. With AVX-512 VBMI the tables sit in registers and 64
/// values take a few byte permutes; otherwise the search is scalar (use BinnedBorders).
/// Same results as search_borders for every value, NaN included (index 0).
class MirroredBorders {
 public:
  /// Builds the tables over 255 ascending borders; false if they are not mirrored or do
  /// not fit (then use BinnedBorders or search_borders).
  bool build(const float* borders);
  /// idx[i] = number of borders below x[i] / divisor; divisor > 0. After build() is true.
  /// `next` (optional): n values the caller reads afterwards (its next block), which the
  /// vector search brings into cache while it computes.
  void search(std::uint8_t* idx, const float* x, std::size_t n, float divisor,
              const float* next = nullptr) const;
  /// True when this CPU runs the vector search (x86-64 with AVX-512 F, BW, VL, DQ, VBMI).
  static bool vectorized();

 private:
  [[nodiscard]] std::uint8_t search_one(float v) const;

  std::uint32_t negatives_ = 0;      // borders below zero
  std::int32_t lowest_exponent_ = 0; // biased float exponent of the smallest positive border
  std::int32_t binades_ = 0;         // binades from the smallest to the largest border
  // Per binade slot (below the lowest, each binade, above): first bin | mantissa shift << 16.
  std::array<std::uint32_t, 32> binade_params_{};
  std::array<std::uint8_t, 256> below_{};  // per bin: positive borders in earlier bins
  // Per bin: the mantissa of its border (0x7fffff without one), low byte first.
  std::array<std::array<std::uint8_t, 256>, 3> mantissa_bytes_{};
};

/// sums[k] += x[i] and counts[k] += 1 for k = idx[i]; sums and counts have 256 entries.
void bucket_sums(const float* x, const std::uint8_t* idx, std::size_t n, double* sums,
                 std::uint64_t* counts);

/// counts[k] += 1 for k = the top 16 bits of order_key(x[i]); counts has 65536 entries.
void key_histogram(std::uint32_t* counts, const float* x, std::size_t n);

/// A uint32 that orders like the float32 `v` (negative below positive, NaN above +inf).
inline std::uint32_t order_key(std::uint32_t float_bits) {
  return (float_bits & 0x80000000u) != 0 ? ~float_bits : (float_bits | 0x80000000u);
}
/// The float32 bits whose order_key is `key`.
inline std::uint32_t bits_of_order_key(std::uint32_t key) {
  return (key & 0x80000000u) != 0 ? (key & 0x7fffffffu) : ~key;
}

/// out[i] = table[idx[i]] for element types of 2, 4 and 8 bytes.
void gather16(std::uint16_t* out, const std::uint16_t* table, const std::uint8_t* idx,
              std::size_t n);
/// As gather16, 4-byte elements.
void gather32(std::uint32_t* out, const std::uint32_t* table, const std::uint8_t* idx,
              std::size_t n);
/// As gather16, 8-byte elements.
void gather64(std::uint64_t* out, const std::uint64_t* table, const std::uint8_t* idx,
              std::size_t n);
/// out[i] = code[q[i]] * scale (float32).
void scaled_gather(float* out, const float* code, const std::uint8_t* q, std::size_t n,
                   float scale);

}  // namespace apiary::messages::kernels
