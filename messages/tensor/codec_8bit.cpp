// UNIFORM_8BIT and QUANTILE_8BIT: one byte per element indexing an in-band codebook of
// bucket means, i64 length || f32 codebook || u8 indices.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "messages/tensor/codec.hpp"
#include "messages/tensor/codec_kernels.hpp"
#include "messages/tensor/codecs.hpp"
#include "messages/tensor/float16.hpp"

namespace apiary::messages {
namespace {

constexpr const char* float_dtypes = "float32, float16, bfloat16, float64";
// UNIFORM_8BIT spans +-3 standard deviations with its 256 buckets.
constexpr float range_in_sigmas = 6.0f;
// Most elements QUANTILE_8BIT sorts for exact quantiles; larger tensors are estimated
// from a histogram in one pass (a sort of 64 MiB would take a second).
constexpr std::size_t exact_quantile_limit = std::size_t{1} << 16;
constexpr std::size_t header_bytes = sizeof(std::int64_t);
// Fewest elements for which building a BinnedBorders table (256 KiB) pays off.
constexpr std::size_t binned_search_min = std::size_t{1} << 16;

bool applies(dtype type) { return is_floating_point(type); }

// Codebook = mean of the original values of each bucket (0 for an empty one), then the
// whole buffer: length, codebook, indices (already written at their offset). Returns
// the values per bucket.
std::vector<std::uint64_t> finish_codebook(std::string& buffer, const float* x, std::size_t n) {
  const auto* idx = reinterpret_cast<const std::uint8_t*>(buffer.data()) + header_bytes +
                    codebook_entries * sizeof(float);
  std::vector<double> sums(codebook_entries, 0.0);
  std::vector<std::uint64_t> counts(codebook_entries, 0);
  kernels::bucket_sums(x, idx, n, sums.data(), counts.data());
  std::vector<float> codebook(codebook_entries, 0.0f);
  for (std::size_t k = 0; k < codebook_entries; ++k) {
    if (counts[k] > 0) codebook[k] = static_cast<float>(sums[k] / static_cast<double>(counts[k]));
  }
  detail::put_i64(buffer, 0, static_cast<std::int64_t>(codebook_entries));
  std::memcpy(buffer.data() + header_bytes, codebook.data(), codebook_entries * sizeof(float));
  return counts;
}

std::uint8_t* indices_at(std::string& buffer) {
  return reinterpret_cast<std::uint8_t*>(buffer.data()) + header_bytes +
         codebook_entries * sizeof(float);
}

// Numpy's default (linear) quantile of sorted values at fraction q.
float linear_quantile(const std::vector<float>& sorted, double q) {
  const double h = static_cast<double>(sorted.size() - 1) * q;
  const auto lo = static_cast<std::size_t>(std::floor(h));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = h - static_cast<double>(lo);
  const double a = sorted[lo];
  const double b = sorted[hi];
  return static_cast<float>(a + frac * (b - a));
}

// Estimated value of rank `r` (0-based) from a histogram of 2^16 order-key bins: the
// bin holding that rank, and the rank's place inside it, spread evenly over the bin's
// value range. Bins are 2^-7 wide relative to their values (7 mantissa bits), so the
// estimate is close even before the interpolation inside the bin.
class RankEstimator {
 public:
  explicit RankEstimator(const float* x, std::size_t n) : counts_(histogram_bins, 0) {
    kernels::key_histogram(counts_.data(), x, n);
  }

  // Ranks must be asked in ascending order.
  double value_at(std::size_t rank) {
    while (below_ + counts_[bin_] <= rank) below_ += counts_[bin_++];
    const auto first = static_cast<std::uint32_t>(bin_) << 16;
    const double lo = float_of_bits(kernels::bits_of_order_key(first));
    const double hi = float_of_bits(kernels::bits_of_order_key(first | 0xffffu));
    const double t = (static_cast<double>(rank - below_) + 0.5) / counts_[bin_];
    return lo + t * (hi - lo);
  }

 private:
  static constexpr std::size_t histogram_bins = std::size_t{1} << 16;
  std::vector<std::uint32_t> counts_;
  std::size_t bin_ = 0;
  std::size_t below_ = 0;
};

}  // namespace

std::vector<float> quantile_borders(const float* x, std::size_t n) {
  std::vector<float> borders(codebook_entries - 1, 0.0f);
  if (n == 0) return borders;
  if (n <= exact_quantile_limit) {
    // Exact: numpy's linear quantiles of a sorted copy. NaN sorts last.
    std::vector<float> sorted(x, x + n);
    std::sort(sorted.begin(), sorted.end(), [](float a, float b) {
      return std::isnan(b) ? !std::isnan(a) : a < b;
    });
    for (std::size_t k = 1; k < codebook_entries; ++k) {
      borders[k - 1] = linear_quantile(sorted, static_cast<double>(k) / codebook_entries);
    }
    return borders;
  }
  // Estimated: the same interpolation between estimated order statistics.
  RankEstimator ranks(x, n);
  for (std::size_t k = 1; k < codebook_entries; ++k) {
    const double h = static_cast<double>(n - 1) * static_cast<double>(k) / codebook_entries;
    const auto lo = static_cast<std::size_t>(std::floor(h));
    const double a = ranks.value_at(lo);
    const double b = ranks.value_at(std::min(lo + 1, n - 1));
    borders[k - 1] = static_cast<float>(a + (h - static_cast<double>(lo)) * (b - a));
  }
  return borders;
}

Status encode_uniform8(const Tensor& tensor, pb::Tensor& message) {
  if (!applies(tensor.type())) {
    return detail::unsupported_dtype(pb::UNIFORM_8BIT, tensor.type(), float_dtypes);
  }
  const std::size_t n = tensor.numel();
  detail::prepare(message, tensor, pb::UNIFORM_8BIT);
  std::string& buffer = *message.mutable_buffer();
  buffer.resize(header_bytes + codebook_entries * sizeof(float) + n);
  const detail::FloatValues x(tensor);
  // shift = mean; scale = 6 * (unbiased std) / 256.
  const float shift = n > 0 ? static_cast<float>(kernels::sum(x.data(), n) / static_cast<double>(n)) : 0.0f;
  float scale = 0.0f;
  if (n > 1) {
    const double ssd = kernels::sum_squared_deviation(x.data(), n, static_cast<double>(shift));
    const auto std = static_cast<float>(std::sqrt(ssd / static_cast<double>(n - 1)));
    scale = range_in_sigmas * std / static_cast<float>(codebook_entries);
  }
  if (scale > 0.0f && std::isfinite(scale)) {
    kernels::uniform_indices(indices_at(buffer), x.data(), n, shift, scale);
  } else {
    // A constant tensor (or one element): every value sits at the centre bucket, whose
    // codebook entry is then that constant.
    std::memset(indices_at(buffer), codebook_entries / 2, n);
  }
  (void)finish_codebook(buffer, x.data(), n);
  return ok_status();
}

Status encode_quantile8(const Tensor& tensor, pb::Tensor& message) {
  if (!applies(tensor.type())) {
    return detail::unsupported_dtype(pb::QUANTILE_8BIT, tensor.type(), float_dtypes);
  }
  const std::size_t n = tensor.numel();
  detail::prepare(message, tensor, pb::QUANTILE_8BIT);
  std::string& buffer = *message.mutable_buffer();
  buffer.resize(header_bytes + codebook_entries * sizeof(float) + n);
  const detail::FloatValues x(tensor);
  std::vector<float> borders = quantile_borders(x.data(), n);
  auto bucketize = [&] {
    kernels::BinnedBorders binned;
    if (n >= binned_search_min && binned.build(borders.data())) {
      binned.search(indices_at(buffer), x.data(), n, 1.0f);
    } else {
      kernels::search_borders(indices_at(buffer), x.data(), n, 1.0f, borders.data());
    }
    return finish_codebook(buffer, x.data(), n);
  };
  const std::vector<std::uint64_t> counts = bucketize();
  if (n > exact_quantile_limit) {
    // One Lloyd step on large tensors: each border moves to the midpoint of the means of
    // the buckets beside it (where both hold values), then the values are bucketed again.
    // The wire format and decoders are unchanged (the codebook is in-band); the error is
    // lower than with the quantiles alone (randn: MSE 6.1e-4 instead of 7.4e-4, where
    // hivemind's quantile-of-quantiles estimate gives 6.7e-4).
    std::vector<float> codebook(codebook_entries);
    std::memcpy(codebook.data(), buffer.data() + header_bytes, codebook_entries * sizeof(float));
    bool moved = false;
    for (std::size_t k = 0; k + 1 < codebook_entries; ++k) {
      if (counts[k] == 0 || counts[k + 1] == 0) continue;
      const float mid = codebook[k] + (codebook[k + 1] - codebook[k]) / 2;
      if (std::isfinite(mid) && mid != borders[k]) {
        borders[k] = mid;
        moved = true;
      }
    }
    // Borders stay sorted: bucket means are ordered, and an unmoved border lies between
    // its buckets' values.
    for (std::size_t k = 1; k < borders.size(); ++k) borders[k] = std::max(borders[k], borders[k - 1]);
    if (moved) (void)bucketize();
  }
  return ok_status();
}

Result<Tensor> decode_codebook8(std::string_view buffer, DecodeHeader header) {
  const auto codec = header.compression;
  if (!applies(header.type)) return detail::unsupported_dtype(codec, header.type, float_dtypes);
  const std::size_t n = header.numel;
  const char* layout = "i64 codebook length + f32 codebook + u8 index per element";
  if (buffer.size() < header_bytes) {
    return detail::wrong_size(codec, header, header_bytes + codebook_entries * sizeof(float) + n,
                              buffer.size(), layout);
  }
  const std::int64_t length = detail::get_i64(buffer, 0);
  if (length < 1 || length > static_cast<std::int64_t>(codebook_entries)) {
    return make_error(errc::malformed,
                      "{} codebook length is {}, expected 1..256; the message is corrupt or "
                      "not a {} tensor",
                      compression_name(codec), length, compression_name(codec));
  }
  const auto entries = static_cast<std::size_t>(length);
  const std::size_t expected = header_bytes + entries * sizeof(float) + n;
  if (buffer.size() != expected) return detail::wrong_size(codec, header, expected, buffer.size(), layout);
  const auto* idx = reinterpret_cast<const std::uint8_t*>(buffer.data()) + header_bytes +
                    entries * sizeof(float);
  if (n > 0 && kernels::max_index(idx, n) >= entries) {
    return make_error(errc::malformed,
                      "{} index {} is outside the codebook of {} entries: expected indices "
                      "below the codebook length; the message is corrupt",
                      compression_name(codec), kernels::max_index(idx, n), entries);
  }
  // The codebook in the output dtype (padded to 256 entries), then one lookup per element.
  std::vector<float> codebook(codebook_entries, 0.0f);
  std::memcpy(codebook.data(), buffer.data() + header_bytes, entries * sizeof(float));
  const Buffer table = detail::floats_as(header.type, codebook.data(), codebook_entries);
  Buffer out = Buffer::allocate(n * element_size(header.type));
  if (n > 0) {
    switch (element_size(header.type)) {
      case 2:
        kernels::gather16(reinterpret_cast<std::uint16_t*>(out.data()),
                          reinterpret_cast<const std::uint16_t*>(table.data()), idx, n);
        break;
      case 4:
        kernels::gather32(reinterpret_cast<std::uint32_t*>(out.data()),
                          reinterpret_cast<const std::uint32_t*>(table.data()), idx, n);
        break;
      default:
        kernels::gather64(reinterpret_cast<std::uint64_t*>(out.data()),
                          reinterpret_cast<const std::uint64_t*>(table.data()), idx, n);
        break;
    }
  }
  return Tensor::make(header.type, std::move(header.shape), std::move(out), header.requires_grad);
}

}  // namespace apiary::messages
