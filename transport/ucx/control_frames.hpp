#pragma once
/// Frames the UCX transport makes itself (io.cpp, secure.cpp).
#include <cstdint>
#include <string>

#include "transport/transport.hpp"

namespace apiary::transport::ucx {

/// An ERROR frame for `call_id` (0 when the frame could not even be parsed).
inline Frame error_frame(std::uint64_t call_id, bool from_caller, const Error& e) {
  Frame f;
  f.envelope.set_kind(pb::ERROR);
  f.envelope.set_call_id(call_id);
  f.envelope.set_from_caller(from_caller);
  f.envelope.set_error_code(static_cast<std::uint32_t>(e.code));
  f.envelope.set_error_message(e.message.substr(0, 1024));
  return f;
}

/// A HANDSHAKE frame carrying Noise message `m`.
inline Frame handshake_frame(const std::string& m) {
  Frame f;
  f.envelope.set_kind(pb::HANDSHAKE);
  f.payload = Buffer::copy_of(m);
  return f;
}

}  // namespace apiary::transport::ucx
