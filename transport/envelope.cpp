// The checks every received envelope passes before the transport acts on it.
#include <fmt/format.h>

#include "transport/transport.hpp"

namespace apiary::transport {

Result<pb::Envelope> decode_envelope(const void* data, std::size_t size) {
  if (size > k_max_envelope_bytes) {
    return make_error(errc::malformed, "over the {} byte limit", k_max_envelope_bytes);
  }
  pb::Envelope envelope;
  if (!envelope.ParseFromArray(data, static_cast<int>(size))) {
    return make_error(errc::malformed, "not an apiary.pb.Envelope");
  }
  if (envelope.kind() == pb::FRAME_UNSPECIFIED || !pb::FrameKind_IsValid(envelope.kind())) {
    return make_error(errc::malformed, "unknown frame kind {}", static_cast<int>(envelope.kind()));
  }
  return envelope;
}

}  // namespace apiary::transport
