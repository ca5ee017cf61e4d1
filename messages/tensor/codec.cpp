#include "messages/tensor/codec.hpp"

#include <cstring>
#include <string>

#include "messages/tensor/bfloat16.hpp"
#include "messages/tensor/codecs.hpp"

namespace apiary::messages {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the NONE codec copies element bytes as they are: the wire is little-endian");

// bfloat16 elements (2 bytes each) -> float32 bytes (4 bytes each), written to `out`.
void widen_bfloat16(const Buffer& bytes, std::size_t numel, std::string& out) {
  out.resize(numel * sizeof(float));
  for (std::size_t i = 0; i < numel; ++i) {
    std::uint16_t half;
    std::memcpy(&half, bytes.chars() + 2 * i, sizeof half);
    const float wide = bfloat16_to_float(half);
    std::memcpy(out.data() + 4 * i, &wide, sizeof wide);
  }
}

// float32 bytes -> bfloat16 elements, rounding to nearest even.
Buffer narrow_to_bfloat16(std::string_view buffer, std::size_t numel) {
  Buffer out = Buffer::allocate(numel * 2);
  for (std::size_t i = 0; i < numel; ++i) {
    float wide;
    std::memcpy(&wide, buffer.data() + 4 * i, sizeof wide);
    const std::uint16_t half = float_to_bfloat16(wide);
    std::memcpy(out.data() + 2 * i, &half, sizeof half);
  }
  return out;
}

Shape shape_of(const pb::Tensor& message) {
  return Shape(message.size().begin(), message.size().end());
}

}  // namespace

std::string compression_name(int compression) {
  if (pb::CompressionType_IsValid(compression)) {
    return pb::CompressionType_Name(static_cast<pb::CompressionType>(compression));
  }
  return "unknown(" + std::to_string(compression) + ")";
}

pb::Tensor encode_none(const Tensor& tensor, const EncodeOptions& options) {
  pb::Tensor message;
  if (tensor.type() == dtype::bfloat16 && options.legacy_bfloat16) {
    widen_bfloat16(tensor.bytes(), tensor.numel(), *message.mutable_buffer());
  } else {
    message.set_buffer(tensor.bytes().chars(), tensor.byte_size());
  }
  message.mutable_size()->Add(tensor.shape().begin(), tensor.shape().end());
  message.set_requires_grad(tensor.requires_grad());
  message.set_dtype(std::string(to_string(tensor.type())));
  message.set_compression(pb::NONE);
  return message;
}

Status encode_into(const Tensor& tensor, pb::CompressionType compression, pb::Tensor& message,
                   const EncodeOptions& options) {
  switch (compression) {
    case pb::NONE:
      if (tensor.type() == dtype::bfloat16 && options.legacy_bfloat16) {
        message = encode_none(tensor, options);
      } else {
        detail::prepare(message, tensor, pb::NONE);
        message.mutable_buffer()->assign(tensor.bytes().chars(), tensor.byte_size());
      }
      return ok_status();
    case pb::FLOAT16: return encode_float16(tensor, message);
    case pb::MEANSTD_16BIT: return encode_meanstd16(tensor, message);
    case pb::UNIFORM_8BIT: return encode_uniform8(tensor, message);
    case pb::QUANTILE_8BIT: return encode_quantile8(tensor, message);
    case pb::BLOCKWISE_8BIT: return encode_blockwise8(tensor, message);
    default: break;
  }
  return make_error(errc::invalid_argument,
                    "compression {} is not a CompressionType: expected NONE, FLOAT16, "
                    "MEANSTD_16BIT, QUANTILE_8BIT, UNIFORM_8BIT or BLOCKWISE_8BIT",
                    compression_name(compression));
}

Result<pb::Tensor> encode(const Tensor& tensor, pb::CompressionType compression,
                          const EncodeOptions& options) {
  pb::Tensor message;
  if (auto st = encode_into(tensor, compression, message, options); !st) return st.error();
  return message;
}

Result<Tensor> decode(const pb::Tensor& message) {
  return decode(WireTensor{message.dtype(), shape_of(message), message.compression(), message.requires_grad()},
                message.buffer());
}

Result<Tensor> decode(const WireTensor& fields, std::string_view buffer) {
  const int compression = fields.compression;
  if (!pb::CompressionType_IsValid(compression)) {
    return make_error(errc::malformed,
                      "tensor compression {} is not a CompressionType: expected 0..5; the "
                      "sender uses a newer schema or the message is corrupt",
                      compression);
  }
  auto type = parse_dtype(fields.dtype);
  if (!type) return type.error();
  Shape shape = fields.shape;
  auto numel = element_count(shape, element_size(*type) * 2);  // room for legacy bfloat16
  if (!numel) return numel.error();
  if (compression != pb::NONE) {
    DecodeHeader header{*type, std::move(shape), *numel, static_cast<pb::CompressionType>(compression),
                        fields.requires_grad};
    switch (compression) {
      case pb::FLOAT16: return decode_float16(buffer, std::move(header));
      case pb::MEANSTD_16BIT: return decode_meanstd16(buffer, std::move(header));
      case pb::UNIFORM_8BIT:
      case pb::QUANTILE_8BIT: return decode_codebook8(buffer, std::move(header));
      default: return decode_blockwise8(buffer, std::move(header));
    }
  }

  const std::size_t native = *numel * element_size(*type);
  if (*type == dtype::bfloat16 && buffer.size() == *numel * sizeof(float) && *numel > 0) {
    // Legacy bfloat16: float32 bytes on the wire, rounded back to bfloat16.
    return Tensor::make(*type, std::move(shape), narrow_to_bfloat16(buffer, *numel),
                        fields.requires_grad);
  }
  if (buffer.size() != native) {
    const char* legacy = *type == dtype::bfloat16 ? " (or 4 per element, legacy float32)" : "";
    return make_error(errc::malformed,
                      "tensor buffer has {} bytes, expected {} for shape {} of {} ({} elements "
                      "of {} bytes{}); the message is truncated or its shape is wrong (a "
                      "streamed tensor must be combined before decoding)",
                      buffer.size(), native, format_shape(shape), to_string(*type), *numel,
                      element_size(*type), legacy);
  }
  return Tensor::copy_of(*type, std::move(shape), buffer.data(), buffer.size(),
                         fields.requires_grad);
}

}  // namespace apiary::messages
