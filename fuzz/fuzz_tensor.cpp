// libFuzzer target: a runtime.proto Tensor from the wire, decoded by every codec
// (NONE, FLOAT16, MEANSTD_16BIT, the 8-bit codecs, bfloat16 bytes): a decode either
// fails with an error or gives a tensor whose bytes match its dtype and shape, and
// encoding that tensor back without compression decodes to the same bytes (bfloat16:
// the same dtype and shape).
#include <cstddef>
#include <cstdint>

#include "messages/tensor/codec.hpp"
#include "runtime.pb.h"
#include "fuzz/quiet_protobuf.hpp"

namespace m = apiary::messages;


extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  apiary::pb::Tensor message;
  if (!message.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto tensor = m::decode(message);
  if (!tensor.ok()) return 0;
  if (tensor->byte_size() != tensor->numel() * m::element_size(tensor->type())) __builtin_trap();
  auto again = m::decode(m::encode_none(*tensor));
  if (!again.ok() || again->type() != tensor->type() || again->shape() != tensor->shape()) __builtin_trap();
  // bfloat16 travels as float32 by default (as hivemind sends it): every value comes back,
  // but a NaN's payload does not (it returns as the canonical NaN, as torch's cast gives).
  if (tensor->type() != m::dtype::bfloat16 && !(*again == *tensor)) __builtin_trap();
  return 0;
}
