#include "messages/tensor/tensor.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

namespace apiary::messages {

Result<std::size_t> element_count(const Shape& shape, std::size_t elem_bytes) {
  constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
  std::size_t count = 1;
  for (std::uint32_t extent : shape) {
    if (extent == 0) return std::size_t{0};  // an empty tensor, whatever the other extents
  }
  for (std::uint32_t extent : shape) {
    if (count > max / extent) {
      return make_error(errc::too_large,
                        "tensor shape {} has more elements than this machine can address; "
                        "expected a product of extents below 2^64",
                        format_shape(shape));
    }
    count *= extent;
  }
  if (elem_bytes > 1 && count > max / elem_bytes) {
    return make_error(errc::too_large,
                      "tensor shape {} with {}-byte elements needs more bytes than this "
                      "machine can address; split the tensor",
                      format_shape(shape), elem_bytes);
  }
  return count;
}

Result<Shape> parse_shape(std::string_view text) {
  Shape shape;
  if (text.empty()) return shape;
  auto bad = [&] {
    return make_error(errc::invalid_argument, "shape '{}': expected comma-separated extents such as 128,64", text);
  };
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    if (item.empty() || item.size() > 10) return bad();
    std::uint64_t extent = 0;
    for (char c : item) {
      if (c < '0' || c > '9') return bad();
      extent = extent * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (extent > 0xffffffffull) return bad();
    shape.push_back(static_cast<std::uint32_t>(extent));
    start = comma + 1;
  }
  return shape;
}

std::string format_shape(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  out += "]";
  return out;
}

Tensor::Tensor() : shape_{0} {}

Tensor::Tensor(dtype type, Shape shape, std::size_t numel, Buffer bytes, bool requires_grad)
    : type_(type),
      shape_(std::move(shape)),
      numel_(numel),
      bytes_(std::move(bytes)),
      requires_grad_(requires_grad) {}

Result<Tensor> Tensor::make(dtype type, Shape shape, Buffer bytes, bool requires_grad) {
  auto numel = element_count(shape, element_size(type));
  if (!numel) return numel.error();
  const std::size_t expected = *numel * element_size(type);
  if (bytes.size() != expected) {
    return make_error(errc::invalid_argument,
                      "tensor of shape {} and dtype {} needs {} bytes ({} elements of {} "
                      "bytes), got {}; pass the tensor's contiguous element bytes",
                      format_shape(shape), to_string(type), expected, *numel,
                      element_size(type), bytes.size());
  }
  return Tensor(type, std::move(shape), *numel, std::move(bytes), requires_grad);
}

Result<Tensor> Tensor::copy_of(dtype type, Shape shape, const void* data, std::size_t size,
                               bool requires_grad) {
  return make(type, std::move(shape), Buffer::copy_of(data, size), requires_grad);
}

Result<Tensor> Tensor::zeros(dtype type, Shape shape, bool requires_grad) {
  auto numel = element_count(shape, element_size(type));
  if (!numel) return numel.error();
  Buffer bytes = Buffer::allocate(*numel * element_size(type));
  if (!bytes.empty()) std::memset(bytes.data(), 0, bytes.size());
  return Tensor(type, std::move(shape), *numel, std::move(bytes), requires_grad);
}

bool operator==(const Tensor& a, const Tensor& b) {
  if (a.type_ != b.type_ || a.shape_ != b.shape_ || a.requires_grad_ != b.requires_grad_ ||
      a.bytes_.size() != b.bytes_.size()) {
    return false;
  }
  return a.bytes_.empty() || std::memcmp(a.bytes_.data(), b.bytes_.data(), a.bytes_.size()) == 0;
}

}  // namespace apiary::messages
