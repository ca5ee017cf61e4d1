// FLOAT16 and MEANSTD_16BIT: half-precision bodies, the second with per-row statistics.
#include <cmath>
#include <cstring>
#include <vector>

#include "messages/tensor/codec_kernels.hpp"
#include "messages/tensor/codecs.hpp"

namespace apiary::messages {
namespace {

constexpr const char* half_dtypes = "float32, float16, float64";
// Smallest std MEANSTD_16BIT divides by: float32 epsilon, 2^-23 (as upstream).
constexpr float min_std = 0x1p-23f;

bool half_codec_applies(dtype type) {
  return type == dtype::float32 || type == dtype::float16 || type == dtype::float64;
}

std::uint16_t* halves_at(std::string& buffer) {
  return reinterpret_cast<std::uint16_t*>(buffer.data());
}

const std::uint16_t* halves_at(std::string_view buffer) {
  return reinterpret_cast<const std::uint16_t*>(buffer.data());
}

// Rows of the last dimension: M = prod(shape[:-1]) and the row length.
struct Rows {
  std::size_t count = 0;
  std::size_t length = 0;
};

Result<Rows> rows_of(const Shape& shape) {
  const Shape leading(shape.begin(), shape.end() - 1);
  auto count = element_count(leading, 2 * sizeof(float));
  if (!count) return count.error();
  return Rows{*count, shape.back()};
}

Error zero_dim(const char* what) {
  return make_error(errc::unsupported,
                    "MEANSTD_16BIT {} a 0-d tensor: expected at least one dimension (the "
                    "statistics are per last-dimension row); send scalars with FLOAT16 or NONE",
                    what);
}

}  // namespace

Status encode_float16(const Tensor& tensor, pb::Tensor& message) {
  if (!half_codec_applies(tensor.type())) {
    return detail::unsupported_dtype(pb::FLOAT16, tensor.type(), half_dtypes);
  }
  const std::size_t n = tensor.numel();
  detail::prepare(message, tensor, pb::FLOAT16);
  std::string& buffer = *message.mutable_buffer();
  buffer.resize(n * 2);
  const detail::FloatValues x(tensor);
  kernels::floats_to_halves_clamped(halves_at(buffer), x.data(), n);
  return ok_status();
}

Result<Tensor> decode_float16(std::string_view buffer, DecodeHeader header) {
  if (!half_codec_applies(header.type)) {
    return detail::unsupported_dtype(pb::FLOAT16, header.type, half_dtypes);
  }
  const std::size_t n = header.numel;
  if (buffer.size() != 2 * n) {
    return detail::wrong_size(pb::FLOAT16, header, 2 * n, buffer.size(), "2 bytes per element");
  }
  if (header.type == dtype::float16) {
    return Tensor::copy_of(header.type, std::move(header.shape), buffer.data(), buffer.size(),
                           header.requires_grad);
  }
  detail::FloatOutput values(header.type, n);
  kernels::halves_to_floats(values.data(), halves_at(buffer), n);
  return Tensor::make(header.type, std::move(header.shape), values.finish(), header.requires_grad);
}

Status encode_meanstd16(const Tensor& tensor, pb::Tensor& message) {
  if (!half_codec_applies(tensor.type())) {
    return detail::unsupported_dtype(pb::MEANSTD_16BIT, tensor.type(), half_dtypes);
  }
  if (tensor.shape().empty()) return zero_dim("cannot encode");
  auto rows = rows_of(tensor.shape());
  if (!rows) return rows.error();
  const std::size_t n = tensor.numel();
  const std::size_t m = rows->count;
  const std::size_t len = rows->length;
  std::vector<float> means(m, 0.0f);
  std::vector<float> stds(m, min_std);
  detail::prepare(message, tensor, pb::MEANSTD_16BIT);
  std::string& buffer = *message.mutable_buffer();
  buffer.resize(2 * n + 2 * m * sizeof(float));
  const detail::FloatValues values(tensor);
  for (std::size_t r = 0; r < m && len > 0; ++r) {
    const float* x = values.data() + r * len;
    // Mean of the row, then the root mean square of the row minus that mean.
    const float mean = static_cast<float>(kernels::sum(x, len) / static_cast<double>(len));
    const double ssd = kernels::sum_squared_deviation(x, len, static_cast<double>(mean));
    const float std = static_cast<float>(std::sqrt(ssd / static_cast<double>(len)));
    means[r] = mean;
    stds[r] = std >= min_std ? std : min_std;  // also replaces a NaN std
    kernels::standardize_to_halves(halves_at(buffer) + r * len, x, len, means[r], stds[r]);
  }
  if (m > 0) {  // memcpy may not take the null data of empty vectors
    std::memcpy(buffer.data() + 2 * n, means.data(), m * sizeof(float));
    std::memcpy(buffer.data() + 2 * n + m * sizeof(float), stds.data(), m * sizeof(float));
  }
  return ok_status();
}

Result<Tensor> decode_meanstd16(std::string_view buffer, DecodeHeader header) {
  if (!half_codec_applies(header.type)) {
    return detail::unsupported_dtype(pb::MEANSTD_16BIT, header.type, half_dtypes);
  }
  if (header.shape.empty()) return zero_dim("cannot decode");
  auto rows = rows_of(header.shape);
  if (!rows) return rows.error();
  const std::size_t n = header.numel;
  const std::size_t m = rows->count;
  const std::size_t len = rows->length;
  const std::size_t expected = 2 * n + 2 * m * sizeof(float);
  if (buffer.size() != expected) {
    return detail::wrong_size(pb::MEANSTD_16BIT, header, expected, buffer.size(),
                              "fp16[numel] + f32 means[M] + f32 stds[M], M = rows of the last "
                              "dimension");
  }
  std::vector<float> means(m);
  std::vector<float> stds(m);
  if (m > 0) {  // no rows (a dimension of 0): no statistics, and memcpy may not take null
    std::memcpy(means.data(), buffer.data() + 2 * n, m * sizeof(float));
    std::memcpy(stds.data(), buffer.data() + 2 * n + m * sizeof(float), m * sizeof(float));
  }
  // Each dtype as hivemind's decoder computes it: halves cast to the tensor's dtype, then
  // multiplied by the row's std and added its mean in place (torch's type promotion).
  if (header.type == dtype::float64) {
    Buffer out = Buffer::allocate(n * sizeof(double));
    auto* dst = reinterpret_cast<double*>(out.data());
    for (std::size_t r = 0; r < m && len > 0; ++r) {
      kernels::destandardize_doubles(dst + r * len, halves_at(buffer) + r * len, len, means[r], stds[r]);
    }
    return Tensor::make(header.type, std::move(header.shape), std::move(out), header.requires_grad);
  }
  if (header.type == dtype::float16) {
    Buffer out = Buffer::allocate(n * 2);
    auto* dst = reinterpret_cast<std::uint16_t*>(out.data());
    for (std::size_t r = 0; r < m && len > 0; ++r) {
      kernels::destandardize_halves(dst + r * len, halves_at(buffer) + r * len, len, means[r], stds[r]);
    }
    return Tensor::make(header.type, std::move(header.shape), std::move(out), header.requires_grad);
  }
  detail::FloatOutput values(header.type, n);
  for (std::size_t r = 0; r < m && len > 0; ++r) {
    kernels::destandardize(values.data() + r * len, halves_at(buffer) + r * len, len, means[r],
                           stds[r]);
  }
  return Tensor::make(header.type, std::move(header.shape), values.finish(), header.requires_grad);
}

}  // namespace apiary::messages
