// Encrypted connections: the Noise XX handshake on a new connection, refusals, sealing
// and opening frames, and identity proofs of the nodes behind a gateway
// (transport/README.md "Encrypted connections").
#include "messages/identity/key_proto.hpp"
#include "noise.pb.h"
#include "transport/ucx/control_frames.hpp"
#include "transport/ucx/transport.hpp"

namespace apiary::transport::ucx {

Status Transport::begin_handshake(Endpoint& ep) {
  auto hs = messages::noise::Handshake::create(ep.outbound, *identity_, advertised_);
  if (!hs) return hs.error();
  ep.handshake = std::make_unique<messages::noise::Handshake>(std::move(*hs));
  if (!ep.outbound) return ok_status();
  auto m1 = ep.handshake->write_message();
  if (!m1) return m1.error();
  transmit(ep, handshake_frame(*m1), true);
  return ok_status();
}

void Transport::refuse(Endpoint& ep, const Error& why, bool tell_peer) {
  if (ep.failed) return;
  ++counters_.refused;
  if (tell_peer) {
    ep.flush_on_close = true;  // the ERROR leaves before the connection closes
    control_out_.push_back({&ep, error_frame(0, false, why), true});
  }
  mark_failed(ep, why);
}

void Transport::on_handshake_frame(Endpoint& ep, const pb::Envelope& env, const void* data, std::size_t length) {
  const auto kind = env.kind();
  if (config_.insecure) {  // only a HANDSHAKE frame comes here
    refuse(ep, make_error(errc::protocol,
                          "{} opened an encrypted connection, but this node runs --insecure (plaintext): "
                          "start both with --insecure, or neither",
                          ep.key),
           true);
    return;
  }
  if (kind == pb::ERROR) {
    refuse(ep, make_error(errc::protocol, "{} refused the connection: {}", ep.key, env.error_message()), false);
    return;
  }
  if (kind == pb::HELLO) {
    refuse(ep, make_error(errc::protocol,
                          "{} connects without encryption (--insecure), but this node requires encrypted "
                          "connections: start both with --insecure, or neither",
                          ep.key),
           true);
    return;
  }
  if (kind != pb::HANDSHAKE || env.payload_size() != length) {
    refuse(ep, make_error(errc::protocol, "{} sent a frame of kind {} ({} bytes) before the handshake finished", ep.key,
                          pb::FrameKind_Name(kind), length),
           true);
    return;
  }
  auto& hs = *ep.handshake;
  if (auto st = hs.read_message(std::string_view(static_cast<const char*>(data), length)); !st) {
    refuse(ep, make_error(st.error().code, "handshake with {} failed: {}", ep.key, st.error().message), true);
    return;
  }
  if (hs.my_turn()) {
    auto m = hs.write_message();
    if (!m) {
      refuse(ep, make_error(m.error().code, "handshake with {} failed: {}", ep.key, m.error().message), true);
      return;
    }
    control_out_.push_back({&ep, handshake_frame(*m), true});
  }
  if (!hs.done()) return;
  auto session = hs.finish();
  if (!session) {
    refuse(ep, session.error(), true);
    return;
  }
  ep.session = std::make_shared<messages::noise::Session>(std::move(*session));
  ep.handshake.reset();
  ep.peer_id = ep.session->remote.bytes();
  ep.listen_addr = ep.session->remote_listen_addr;
  ++counters_.handshakes;
  if (!ep.outbound) {
    // The responder is done: it proves the PeerIDs of the nodes behind its gateway, then
    // its HELLO tells the dialler to start (a dialled PeerID is checked against them all).
    for (const auto& key : extra_identities_) {
      auto proof = identity_frame(ep, key);
      if (proof) control_out_.push_back({&ep, std::move(*proof), false});
    }
    control_out_.push_back({&ep, hello_frame(), false});
    unblocked_.push_back(&ep);
  }
}

Result<Frame> Transport::identity_frame(const Endpoint& ep, const messages::Ed25519PrivateKey& key) const {
  pb::NoiseHandshakePayload proof;
  proof.set_identity_key(messages::encode_public_key_proto(key.public_key()));
  auto sig = key.sign(std::string(messages::noise::k_static_key_prefix) + ep.session->local_static);
  if (!sig) return sig.error();
  proof.set_identity_sig(*sig);
  Frame f;
  f.envelope.set_kind(pb::IDENTITY);
  f.payload = Buffer::copy_of(proof.SerializeAsString());
  return f;
}

void Transport::prove_identity(const messages::Ed25519PrivateKey& key) {
  if (config_.insecure) return;
  for (const auto& k : extra_identities_) {
    if (k.public_key() == key.public_key()) return;
  }
  extra_identities_.push_back(key);
  for (auto& [h, e] : endpoints_) {
    if (!e->session || e->failed) continue;  // a handshake still running sends every proof when it ends
    auto proof = identity_frame(*e, key);
    if (proof) send_on(*e, std::move(*proof));
  }
}

void Transport::send_proofs(Endpoint& ep) {
  for (const auto& key : extra_identities_) {
    auto proof = identity_frame(ep, key);
    if (proof) transmit(ep, std::move(*proof), false);
  }
}

void Transport::on_identity(Endpoint& ep, const Buffer& payload) {
  constexpr std::size_t k_max_proven = 1 << 16;
  pb::NoiseHandshakePayload proof;
  Error why;
  if (!proof.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    why = make_error(errc::malformed, "{} sent an identity proof that is not a NoiseHandshakePayload", ep.key);
  } else if (auto key = messages::decode_public_key_proto(proof.identity_key()); !key) {
    why = make_error(key.error().code, "{} sent an identity proof with a bad key: {}", ep.key, key.error().message);
  } else if (!key->verify(std::string(messages::noise::k_static_key_prefix) + ep.session->remote_static,
                          proof.identity_sig())) {
    why = make_error(errc::crypto, "{} sent a proof of PeerID {} that its signature does not bear out", ep.key,
                     messages::PeerId::from_public_key(*key).to_string());
  } else if (ep.proven.size() >= k_max_proven) {
    why = make_error(errc::too_large, "{} proved more than {} PeerIDs on one connection", ep.key, k_max_proven);
  } else {
    ep.proven.insert(messages::PeerId::from_public_key(*key).bytes());
    return;
  }
  refuse(ep, why, false);
}

bool Transport::admit_call(Endpoint& ep, const Frame& frame) {
  constexpr std::size_t k_max_refused_calls = 4096;
  const pb::Envelope& env = frame.envelope;
  if (env.kind() == pb::CIRCUIT_OPEN && !frame.expect_peer.empty() && ep.peer_id != frame.expect_peer) {
    // A relayed connection is dialled through the relay its address names, and no other.
    const CircuitEnd end{ep.key, env.relay().circuit(), false};
    auto it = circuits_.find(end);
    if (it != circuits_.end()) {
      mark_failed(*it->second, make_error(errc::crypto,
                                          "{} was dialled through the relay at {} as PeerID {}, but the peer there "
                                          "proved PeerID {}; the relay's address is stale or an impostor's",
                                          it->second->key, ep.key, peer_text(frame.expect_peer),
                                          peer_text(ep.peer_id)));
      it->second->circuit_closed = true;  // the relay never heard of it
    }
    return false;
  }
  if (!env.from_caller()) return true;
  if (!ep.refused_calls.empty() && ep.refused_calls.count(env.call_id()) != 0) return false;  // a refused call's
  if (env.kind() != pb::OPEN || frame.expect_peer.empty()) return true;
  if (ep.peer_id == frame.expect_peer || ep.proven.count(frame.expect_peer) != 0) return true;
  ++counters_.refused_calls;
  if (ep.refused_calls.size() >= k_max_refused_calls) ep.refused_calls.clear();
  ep.refused_calls.insert(env.call_id());
  std::string others;
  for (const auto& p : ep.proven) others += (others.empty() ? "" : ", ") + peer_text(p);
  const Error why = make_error(
      errc::crypto,
      "call to '{}' not sent: {} was dialled as PeerID {}, but the peer there proved PeerID {}{}{}; the address is "
      "stale (another node listens there now) or an impostor's",
      env.handle(), ep.key, peer_text(frame.expect_peer), peer_text(ep.peer_id),
      others.empty() ? "" : " and the nodes behind its gateway ", others);
  handler_->on_frame(ep.key, error_frame(env.call_id(), false, why));
  return false;
}

Result<std::string> Transport::seal_frame(messages::noise::CipherState& cipher, Frame& frame, std::uint64_t first) {
  using messages::noise::k_tag_bytes;
  // The envelope's nonce, then the payload's: the receiver opens the envelope first and
  // finds the payload's tag in it.
  if (!frame.payload.empty()) {
    // Sealed into a pooled buffer: the encryption is the one copy (the payload may be a
    // view of a caller's tensor, which stays as it is).
    const std::size_t size = frame.payload.size();
    Buffer out = Buffer::allocate(size);
    std::byte tag[k_tag_bytes];
    if (auto st = cipher.seal_at(first + 1, {}, frame.payload.data(), size, out.data(), tag); !st) return st.error();
    frame.envelope.set_payload_mac(tag, k_tag_bytes);
    frame.payload = std::move(out);
  }
  std::string header = frame.envelope.SerializeAsString();
  const std::size_t plain = header.size();
  header.resize(plain + k_tag_bytes);
  auto* h = reinterpret_cast<std::byte*>(header.data());
  if (auto st = cipher.seal_at(first, {}, h, plain, h, h + plain); !st) return st.error();
  return header;
}

Result<std::string> Transport::open_header(Endpoint& ep, const void* header, std::size_t size) {
  using messages::noise::k_tag_bytes;
  Status st = ok_status();
  std::string plain;
  if (size < k_tag_bytes) {
    st = make_error(errc::crypto, "an envelope of {} bytes is shorter than its tag", size);
  } else {
    plain.resize(size - k_tag_bytes);
    const auto* in = static_cast<const std::byte*>(header);
    st = ep.session->recv.open({}, in, plain.size(), reinterpret_cast<std::byte*>(plain.data()), in + plain.size());
  }
  if (st) return plain;
  Error why = make_error(errc::crypto, "a frame from {} ({}) failed authentication: {}; the connection is closed",
                         ep.key, ep.session->remote.to_string(), st.error().message);
  refuse(ep, why, false);
  return why;
}

}  // namespace apiary::transport::ucx
