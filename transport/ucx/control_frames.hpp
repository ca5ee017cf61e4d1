#pragma once
/// Frames the UCX transport makes itself (io.cpp, secure.cpp).
#include <cstdint>
#include <string>

#include "messages/identity/peer_id.hpp"
#include "messages/utf8.hpp"
#include "transport/transport.hpp"

namespace apiary::transport::ucx {

/// PeerID bytes as text for an error message (saying so when they are not a PeerID).
inline std::string peer_text(const std::string& bytes) {
  auto id = messages::PeerId::from_bytes(bytes);
  return id ? id->to_string() : fmt::format("(a malformed PeerID of {} bytes)", bytes.size());
}

/// An ERROR frame for `call_id` (0 when the frame could not even be parsed).
inline Frame error_frame(std::uint64_t call_id, bool from_caller, const Error& e) {
  Frame f;
  f.envelope.set_kind(pb::ERROR);
  f.envelope.set_call_id(call_id);
  f.envelope.set_from_caller(from_caller);
  f.envelope.set_error_code(static_cast<std::uint32_t>(e.code));
  f.envelope.set_error_message(messages::valid_utf8(e.message, 1024));
  return f;
}

/// Room a relayed frame's envelope leaves for the CIRCUIT_DATA envelope around it (kind,
/// circuit, sizes, the payload's tag and the outer envelope's).
inline constexpr std::size_t k_relay_overhead_bytes = 128;

/// Whether `kind` is one of the relay frames the transport handles itself.
inline bool is_relay_frame(pb::FrameKind kind) {
  return kind == pb::RELAY_RESERVE || kind == pb::RELAY_RESERVED || kind == pb::CIRCUIT_OPEN ||
         kind == pb::CIRCUIT_DATA || kind == pb::CIRCUIT_CLOSE;
}

/// A relay frame of `kind` about circuit `circuit`; `from_opener`: the sender opened it.
inline Frame relay_frame(pb::FrameKind kind, std::uint64_t circuit, bool from_opener) {
  Frame f;
  f.envelope.set_kind(kind);
  f.envelope.mutable_relay()->set_circuit(circuit);
  f.envelope.mutable_relay()->set_from_opener(from_opener);
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
