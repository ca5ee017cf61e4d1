#pragma once
/// Tensor <-> pb::Tensor (hivemind's runtime.proto Tensor) with any CompressionType: NONE
/// (raw little-endian element bytes), FLOAT16, MEANSTD_16BIT, UNIFORM_8BIT, QUANTILE_8BIT
/// and BLOCKWISE_8BIT (layouts and dtype rules in codecs.hpp).
#include <string>
#include <string_view>

#include "messages/result.hpp"
#include "messages/tensor/tensor.hpp"
#include "runtime.pb.h"

namespace apiary::messages {

/// Options of encode() and encode_none().
struct EncodeOptions {
  /// Send bfloat16 as float32 bytes (4 bytes per element), as hivemind does by default
  /// (its USE_LEGACY_BFLOAT16=1), so that older peers can read it. When false, bfloat16
  /// travels as its 2 raw bytes per element. decode() reads both.
  bool legacy_bfloat16 = true;
};

/// Encodes `tensor` with CompressionType NONE: buffer = element bytes (bfloat16 per
/// options), size = shape, dtype = wire name, requires_grad copied, chunks = 0.
pb::Tensor encode_none(const Tensor& tensor, const EncodeOptions& options = {});

/// Encodes `tensor` with `compression`. NONE applies to every dtype; FLOAT16 and
/// MEANSTD_16BIT to float32/float16/float64 (MEANSTD_16BIT not to 0-d tensors); the 8-bit
/// codecs to float32/float16/bfloat16/float64. Anything else is errc::unsupported naming
/// the codec and the dtype; an unknown compression number is errc::invalid_argument.
Result<pb::Tensor> encode(const Tensor& tensor, pb::CompressionType compression,
                          const EncodeOptions& options = {});

/// encode() into an existing `message`, whose buffer capacity is reused: a sender that
/// keeps one message per tensor pays no allocation (nor page faults) per encode. Same
/// errors as encode(); after an error `message` is unspecified.
Status encode_into(const Tensor& tensor, pb::CompressionType compression, pb::Tensor& message,
                   const EncodeOptions& options = {});

/// Decodes a complete (not streamed, or already combined) pb::Tensor of any compression.
/// Errors: errc::unsupported for an unknown dtype name or a codec that does not apply to
/// the dtype; errc::malformed for an unknown compression number, a missing dtype, or a
/// buffer that does not hold the codec's layout for the shape (NONE: shape x element size,
/// bfloat16 2 or 4 bytes per element); errc::too_large for a shape whose element count
/// overflows.
Result<Tensor> decode(const pb::Tensor& message);

/// A runtime.proto Tensor's fields other than its buffer (decode's input without a
/// message, e.g. from Python: the buffer is read where it lies, not copied into one).
struct WireTensor {
  std::string_view dtype;
  Shape shape;
  int compression = 0;
  bool requires_grad = false;
};
/// decode() of the message those fields and `buffer` make.
Result<Tensor> decode(const WireTensor& fields, std::string_view buffer);

/// Printable name of a compression ("NONE", "FLOAT16", ...; "unknown(<n>)" otherwise).
std::string compression_name(int compression);

}  // namespace apiary::messages
