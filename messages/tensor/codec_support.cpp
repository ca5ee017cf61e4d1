// What the lossy codecs share: float32 views, conversions back, errors, byte access.
#include <cstring>
#include <string>

#include "messages/tensor/codec.hpp"
#include "messages/tensor/codec_kernels.hpp"
#include "messages/tensor/codecs.hpp"

namespace apiary::messages::detail {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "codec buffers are little-endian and are written with memcpy");

FloatValues::FloatValues(const Tensor& tensor) {
  const std::size_t n = tensor.numel();
  if (tensor.type() == dtype::float32) {
    data_ = tensor.data<float>();
    return;
  }
  owned_.resize(n);
  switch (tensor.type()) {
    case dtype::float16:
      kernels::halves_to_floats(owned_.data(), tensor.data<std::uint16_t>(), n);
      break;
    case dtype::bfloat16:
      kernels::bfloat16s_to_floats(owned_.data(), tensor.data<std::uint16_t>(), n);
      break;
    case dtype::float64:
      kernels::doubles_to_floats(owned_.data(), tensor.data<double>(), n);
      break;
    default:
      break;  // callers admit floating-point dtypes only
  }
  data_ = owned_.data();
}

FloatOutput::FloatOutput(dtype type, std::size_t n) : type_(type), n_(n) {
  if (type == dtype::float32) {
    direct_ = Buffer::allocate(n * sizeof(float));
    data_ = reinterpret_cast<float*>(direct_.data());
  } else {
    scratch_.resize(n);
    data_ = scratch_.data();
  }
}

Buffer FloatOutput::finish() {
  return type_ == dtype::float32 ? std::move(direct_) : floats_as(type_, scratch_.data(), n_);
}

Buffer floats_as(dtype type, const float* x, std::size_t n) {
  Buffer out = Buffer::allocate(n * element_size(type));
  if (n == 0) return out;
  switch (type) {
    case dtype::float16:
      kernels::floats_to_halves(reinterpret_cast<std::uint16_t*>(out.data()), x, n);
      break;
    case dtype::bfloat16:
      kernels::floats_to_bfloat16s(reinterpret_cast<std::uint16_t*>(out.data()), x, n);
      break;
    case dtype::float64:
      kernels::floats_to_doubles(reinterpret_cast<double*>(out.data()), x, n);
      break;
    default:
      std::memcpy(out.data(), x, n * sizeof(float));
      break;
  }
  return out;
}

Error unsupported_dtype(pb::CompressionType codec, dtype type, const char* accepted) {
  return make_error(errc::unsupported,
                    "compression {} does not apply to {} tensors: expected one of {}; send "
                    "this tensor with NONE or convert it first",
                    compression_name(codec), to_string(type), accepted);
}

Error wrong_size(pb::CompressionType codec, const DecodeHeader& header, std::size_t expected,
                 std::size_t actual, const char* layout) {
  return make_error(errc::malformed,
                    "{} tensor buffer has {} bytes, expected {} ({}) for shape {} ({} "
                    "elements); the message is truncated or corrupt, or a streamed tensor "
                    "was not combined before decoding",
                    compression_name(codec), actual, expected, layout,
                    format_shape(header.shape), header.numel);
}

void prepare(pb::Tensor& message, const Tensor& tensor, pb::CompressionType codec) {
  message.clear_size();
  message.set_chunks(0);
  message.mutable_size()->Add(tensor.shape().begin(), tensor.shape().end());
  message.set_requires_grad(tensor.requires_grad());
  message.set_dtype(std::string(to_string(tensor.type())));
  message.set_compression(codec);
}

void put_i64(std::string& buffer, std::size_t offset, std::int64_t value) {
  std::memcpy(buffer.data() + offset, &value, sizeof value);
}

std::int64_t get_i64(std::string_view buffer, std::size_t offset) {
  std::int64_t value;
  std::memcpy(&value, buffer.data() + offset, sizeof value);
  return value;
}

}  // namespace apiary::messages::detail
