#pragma once
/// Tensor <-> pb::Tensor (hivemind's runtime.proto Tensor). Only CompressionType NONE is
/// implemented: the buffer holds the raw little-endian element bytes.
#include <string>

#include "messages/result.hpp"
#include "messages/tensor/tensor.hpp"
#include "runtime.pb.h"

namespace apiary::messages {

/// Options of encode_none().
struct EncodeOptions {
  /// Send bfloat16 as float32 bytes (4 bytes per element), as hivemind does by default
  /// (its USE_LEGACY_BFLOAT16=1), so that older peers can read it. When false, bfloat16
  /// travels as its 2 raw bytes per element. decode() reads both.
  bool legacy_bfloat16 = true;
};

/// Encodes `tensor` with CompressionType NONE: buffer = element bytes (bfloat16 per
/// options), size = shape, dtype = wire name, requires_grad copied, chunks = 0.
pb::Tensor encode_none(const Tensor& tensor, const EncodeOptions& options = {});

/// Decodes a complete (not streamed, or already combined) pb::Tensor.
/// Errors: errc::unsupported for a compression other than NONE or an unknown dtype name;
/// errc::malformed for an unknown compression number, a missing dtype, or a buffer whose
/// size does not match shape x element size (bfloat16: 2 or 4 bytes per element);
/// errc::too_large for a shape whose element count overflows.
Result<Tensor> decode(const pb::Tensor& message);

/// Printable name of a compression ("NONE", "FLOAT16", ...; "unknown(<n>)" otherwise).
std::string compression_name(int compression);

}  // namespace apiary::messages
