// BLOCKWISE_8BIT: 4096-element blocks scaled by their absolute maximum, each value the
// index of the nearest entry of a signed dynamic code table sent in-band.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "messages/tensor/codec_kernels.hpp"
#include "messages/tensor/codecs.hpp"

namespace apiary::messages {
namespace {

constexpr const char* float_dtypes = "float32, float16, bfloat16, float64";
constexpr std::size_t header_bytes = 2 * sizeof(std::int64_t);
// Decades of the dynamic code table: magnitudes from 10^-6 up to 1.
constexpr int code_decades = 7;

std::vector<float> make_dynamic_code_table() {
  std::vector<double> values;
  values.reserve(codebook_entries);
  for (int i = 0; i < code_decades; ++i) {
    // 2^i equal steps over [0.1, 1]; their midpoints, scaled into decade i.
    const std::size_t steps = std::size_t{1} << i;
    const double decade = std::pow(10.0, i - (code_decades - 1));
    for (std::size_t j = 0; j < steps; ++j) {
      const double mid = 0.1 + 0.9 * (static_cast<double>(j) + 0.5) / static_cast<double>(steps);
      values.push_back(decade * mid);
      values.push_back(-decade * mid);
    }
  }
  values.push_back(0.0);
  values.push_back(1.0);
  std::sort(values.begin(), values.end());
  return std::vector<float>(values.begin(), values.end());
}

// Borders between neighbouring codes: the nearest code to v is the number of midpoints
// below v (a value exactly between two codes takes the lower one).
std::vector<float> code_midpoints(const std::vector<float>& code) {
  std::vector<float> mids(code.size() - 1);
  for (std::size_t k = 0; k + 1 < code.size(); ++k) {
    mids[k] = static_cast<float>((static_cast<double>(code[k]) + code[k + 1]) / 2.0);
  }
  return mids;
}

std::size_t block_count(std::size_t n) {
  return (n + blockwise_block_size - 1) / blockwise_block_size;
}

}  // namespace

const std::vector<float>& dynamic_code_table() {
  static const std::vector<float> table = make_dynamic_code_table();
  return table;
}

Status encode_blockwise8(const Tensor& tensor, pb::Tensor& message) {
  if (!is_floating_point(tensor.type())) {
    return detail::unsupported_dtype(pb::BLOCKWISE_8BIT, tensor.type(), float_dtypes);
  }
  const std::vector<float>& code = dynamic_code_table();
  static const std::vector<float> mids = code_midpoints(code);
  // The fastest search this CPU has for the table; they all give the same indices.
  // Both live for the process, like the code table.
  static const kernels::MirroredBorders* const mirrored = []() -> kernels::MirroredBorders* {
    if (!kernels::MirroredBorders::vectorized()) return nullptr;
    auto table = std::make_unique<kernels::MirroredBorders>();
    return table->build(mids.data()) ? table.release() : nullptr;
  }();
  static const kernels::BinnedBorders* const binned = []() -> kernels::BinnedBorders* {
    if (mirrored != nullptr) return nullptr;
    auto table = std::make_unique<kernels::BinnedBorders>();
    return table->build(mids.data()) ? table.release() : nullptr;
  }();
  // Index of the code nearest 0, used for all-zero blocks (absmax 0).
  const auto zero_index = static_cast<std::uint8_t>(
      std::count_if(mids.begin(), mids.end(), [](float m) { return m < 0.0f; }));
  const std::size_t n = tensor.numel();
  const std::size_t blocks = block_count(n);
  detail::prepare(message, tensor, pb::BLOCKWISE_8BIT);
  std::string& buffer = *message.mutable_buffer();
  const std::size_t code_at = header_bytes + blocks * sizeof(float);
  const std::size_t q_at = code_at + codebook_entries * sizeof(float);
  buffer.resize(q_at + n);
  detail::put_i64(buffer, 0, static_cast<std::int64_t>(blocks));
  detail::put_i64(buffer, sizeof(std::int64_t), static_cast<std::int64_t>(codebook_entries));
  std::memcpy(buffer.data() + code_at, code.data(), codebook_entries * sizeof(float));
  const detail::FloatValues x(tensor);
  auto* q = reinterpret_cast<std::uint8_t*>(buffer.data()) + q_at;
  std::vector<float> absmax(blocks);
  for (std::size_t b = 0; b < blocks; ++b) {
    // Per block: absmax, then each value / absmax to its nearest code.
    const std::size_t begin = b * blockwise_block_size;
    const std::size_t len = std::min(blockwise_block_size, n - begin);
    absmax[b] = kernels::abs_max(x.data() + begin, len);
    if (absmax[b] > 0.0f) {
      if (mirrored != nullptr) {
        // A full next block is fetched while this one is searched.
        const float* next = n - begin - len >= len ? x.data() + begin + len : nullptr;
        mirrored->search(q + begin, x.data() + begin, len, absmax[b], next);
      } else if (binned != nullptr) {
        binned->search(q + begin, x.data() + begin, len, absmax[b]);
      } else {
        kernels::search_borders(q + begin, x.data() + begin, len, absmax[b], mids.data());
      }
    } else {
      std::memset(q + begin, zero_index, len);
    }
  }
  if (blocks > 0) std::memcpy(buffer.data() + header_bytes, absmax.data(), blocks * sizeof(float));  // none: null data
  return ok_status();
}

Result<Tensor> decode_blockwise8(std::string_view buffer, DecodeHeader header) {
  const pb::CompressionType codec = pb::BLOCKWISE_8BIT;
  if (!is_floating_point(header.type)) return detail::unsupported_dtype(codec, header.type, float_dtypes);
  const std::size_t n = header.numel;
  const std::size_t blocks = block_count(n);
  const char* layout = "i64 n_absmax + i64 n_code + f32 absmax + f32 code + u8 per element";
  if (buffer.size() < header_bytes) {
    return detail::wrong_size(codec, header,
                              header_bytes + (blocks + codebook_entries) * sizeof(float) + n,
                              buffer.size(), layout);
  }
  const std::int64_t n_absmax = detail::get_i64(buffer, 0);
  const std::int64_t n_code = detail::get_i64(buffer, sizeof(std::int64_t));
  if (n_absmax != static_cast<std::int64_t>(blocks)) {
    return make_error(errc::malformed,
                      "BLOCKWISE_8BIT has {} absmax values, expected {} (one per {} elements "
                      "of shape {}); the message is corrupt or used another block size",
                      n_absmax, blocks, blockwise_block_size, format_shape(header.shape));
  }
  if (n_code < 1 || n_code > static_cast<std::int64_t>(codebook_entries)) {
    return make_error(errc::malformed,
                      "BLOCKWISE_8BIT code table has {} entries, expected 1..256; the message "
                      "is corrupt",
                      n_code);
  }
  const auto entries = static_cast<std::size_t>(n_code);
  const std::size_t code_at = header_bytes + blocks * sizeof(float);
  const std::size_t q_at = code_at + entries * sizeof(float);
  if (buffer.size() != q_at + n) return detail::wrong_size(codec, header, q_at + n, buffer.size(), layout);
  const auto* q = reinterpret_cast<const std::uint8_t*>(buffer.data()) + q_at;
  if (n > 0 && kernels::max_index(q, n) >= entries) {
    return make_error(errc::malformed,
                      "BLOCKWISE_8BIT index {} is outside the code table of {} entries: "
                      "expected indices below n_code; the message is corrupt",
                      kernels::max_index(q, n), entries);
  }
  std::vector<float> absmax(blocks);
  std::vector<float> code(codebook_entries, 0.0f);
  if (blocks > 0) std::memcpy(absmax.data(), buffer.data() + header_bytes, blocks * sizeof(float));  // none: null data
  std::memcpy(code.data(), buffer.data() + code_at, entries * sizeof(float));
  // out = code[q] * absmax of the block, in float32, then in the message's dtype.
  detail::FloatOutput values(header.type, n);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t begin = b * blockwise_block_size;
    const std::size_t len = std::min(blockwise_block_size, n - begin);
    kernels::scaled_gather(values.data() + begin, code.data(), q + begin, len, absmax[b]);
  }
  return Tensor::make(header.type, std::move(header.shape), values.finish(), header.requires_grad);
}

}  // namespace apiary::messages
