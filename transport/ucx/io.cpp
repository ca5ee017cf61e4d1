// The UCX transport's data path: connections, sends, active-message receipt
// (eager and rendezvous), HELLO naming, keepalives and failure handling. What encrypted
// connections add (handshake, sealing, identity proofs) is in secure.cpp.
#include "transport/ucx/transport.hpp"

#include "transport/ucx/control_frames.hpp"

#include <algorithm>
#include <cstring>

namespace apiary::transport::ucx {
namespace {

struct SendOp {
  std::string header;
  Buffer payload;
  Transport* self = nullptr;
  PeerKey key;         ///< set for rendezvous sends, which count as traffic in flight
};

}  // namespace

// ---- connections ----------------------------------------------------------------

void Transport::on_conn_request(ucp_conn_request_h request, void* arg) {
  static_cast<Transport*>(arg)->conn_requests_.push_back(request);
}

void Transport::accept_pending() {
  auto requests = std::move(conn_requests_);
  conn_requests_.clear();
  for (auto* req : requests) {
    auto ep = accept_endpoint(worker_->get(), req, config_.mode, &on_ep_error, this);
    if (!ep) continue;  // the client sees its connection fail
    Endpoint* e = adopt(*ep, fmt::format("inbound:{}", ++inbound_counter_), false);
    if (config_.insecure) {
      send_on(*e, hello_frame());  // lets the dialler start sending
      continue;
    }
    // Encrypted: the dialler speaks first (Noise XX); nothing else goes out before the
    // handshake ends.
    e->ready = false;
    if (auto st = begin_handshake(*e); !st) refuse(*e, st.error(), false);
  }
}

Frame Transport::hello_frame() const {
  Frame hello;
  hello.envelope.set_kind(pb::HELLO);
  hello.envelope.set_peer_id(config_.peer_id);
  hello.envelope.set_listen_addr(advertised_);
  return hello;
}

Endpoint* Transport::adopt(ucp_ep_h ep, PeerKey key, bool outbound) {
  auto e = std::make_unique<Endpoint>();
  e->ep = ep;
  e->key = key;
  e->outbound = outbound;
  e->last_rx = e->last_probe = Clock::now();
  Endpoint* raw = e.get();
  endpoints_[ep] = std::move(e);
  if (by_key_.count(key) == 0) by_key_[key] = raw;
  return raw;
}

Endpoint* Transport::find_or_connect(const PeerKey& key) {
  if (auto it = by_key_.find(key); it != by_key_.end()) return it->second;
  if (key.find('/') != PeerKey::npos) return connect_relayed(key);
  auto hp = split_host_port(key);
  if (!hp) {
    handler_->on_peer_down(key, hp.error());
    return nullptr;
  }
  auto ep = connect_endpoint(worker_->get(), hp->first, hp->second, config_.mode, &on_ep_error, this);
  if (!ep) {
    handler_->on_peer_down(key, ep.error());
    return nullptr;
  }
  Endpoint* e = adopt(*ep, key, true);
  if (config_.insecure) {
    send_on(*e, hello_frame());
  } else if (auto st = begin_handshake(*e); !st) {
    refuse(*e, st.error(), false);
  }
  // Everything after the HELLO (or the handshake) waits for the peer's first frame (its
  // first encrypted one).
  e->ready = false;
  return e;
}

void Transport::advertise(const std::string& listen_addr) {
  advertised_ = listen_addr;
  for (auto& [h, e] : endpoints_) {
    if (!e->failed && e->ready && (e->session || config_.insecure)) send_on(*e, hello_frame());
  }
}

void Transport::on_hello(Endpoint& ep, const pb::Envelope& env) {
  // Recorded, not used as the key: UCX 1.13 may deliver frames sent before wireup
  // completed ahead of the HELLO sent first, so an inbound connection keeps the name
  // it got on accept and answers go back on it. An encrypted connection knows both from
  // its handshake, the PeerID proven.
  // A later HELLO tells a new listen address (Transport::advertise); over an encrypted
  // connection the PeerID stays the one its handshake proved.
  ep.listen_addr = messages::valid_utf8(env.listen_addr(), 512);
  if (!ep.session) ep.peer_id = env.peer_id().substr(0, 256);
}

void Transport::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<Transport*>(arg);
  auto it = self->endpoints_.find(ep);
  if (it == self->endpoints_.end()) return;
  Endpoint& e = *it->second;
  if (e.outbound && !e.ready) {
    self->mark_failed(e, make_error(errc::peer_down, "cannot reach {}: {}; check that an apiary node listens there",
                                    e.key, ucs_status_string(status)));
  } else {
    self->mark_failed(e, make_error(errc::peer_down, "connection to {} failed: {}", e.key,
                                    ucs_status_string(status)));
  }
}

void Transport::mark_failed(Endpoint& ep, Error why) {
  if (ep.failed) return;
  ep.failed = true;
  ep.failure = std::move(why);
}

void Transport::reap_failed() {
  std::vector<const void*> dead;
  for (auto& [h, e] : endpoints_) {
    if (e->failed) dead.push_back(h);
  }
  for (const void* h : dead) {
    auto node = endpoints_.extract(h);
    Endpoint& e = *node.mapped();
    bool was_primary = false;
    if (auto it = by_key_.find(e.key); it != by_key_.end() && it->second == &e) {
      by_key_.erase(it);
      was_primary = true;
    }
    if (!e.via.empty()) {
      // A relayed connection: the far end hears through the relay (after any refusal,
      // which went ahead of this on the same connection).
      circuits_.erase(CircuitEnd{e.via, e.circuit, !e.outbound});
      if (!e.circuit_closed) close_circuit(CircuitEnd{e.via, e.circuit, !e.outbound}, e.failure);
    } else if (e.flush_on_close) {
      lingering_.emplace_back(e.ep, Clock::now() + k_refusal_linger);
    } else if (void* r = close_endpoint(e.ep, true)) {
      closing_.push_back(r);
    }
    ++counters_.down;
    // Another live connection to the same peer keeps it up.
    bool other = false;
    for (auto& [h2, e2] : endpoints_) {
      if (e2->key == e.key && !e2->failed) {
        other = true;
        if (was_primary) by_key_[e.key] = e2.get();
        break;
      }
    }
    if (!other) {
      if (e.via.empty()) relay_link_down(e.key, e.failure);
      handler_->on_peer_down(e.key, e.failure);
    }
  }
  release_completed(closing_);
}

void Transport::close_lingering(Clock::time_point now, bool all) {
  auto over = std::stable_partition(lingering_.begin(), lingering_.end(),
                                    [&](const auto& l) { return !all && l.second > now; });
  for (auto it = over; it != lingering_.end(); ++it) {
    if (void* r = close_endpoint(it->first, false)) closing_.push_back(r);
  }
  lingering_.erase(over, lingering_.end());
}

void Transport::disconnect(const PeerKey& peer) {
  for (auto& [h, e] : endpoints_) {
    if (e->key == peer) mark_failed(*e, make_error(errc::peer_down, "disconnected from {}", peer));
  }
}

std::string Transport::describe(const PeerKey& peer) {
  auto it = by_key_.find(peer);
  if (it == by_key_.end()) return {};
  const Endpoint& e = *it->second;
  std::string out;
  if (!e.via.empty()) {
    out = fmt::format("relayed through {} (circuit {})\n", e.via, e.circuit);
    if (auto r = by_key_.find(e.via); r != by_key_.end()) out += describe_endpoint(r->second->ep);
  } else {
    out = describe_endpoint(e.ep);
  }
  if (e.session) {
    out += fmt::format("\nencrypted: {} with {}\n", messages::noise::k_protocol, e.session->remote.to_string());
  } else {
    out += config_.insecure ? "\nplaintext (--insecure)\n" : "\nhandshake not finished\n";
  }
  return out;
}

// ---- sending ----------------------------------------------------------------------

void Transport::send(const PeerKey& to, Frame frame) {
  Endpoint* ep = find_or_connect(to);
  if (ep != nullptr) send_on(*ep, std::move(frame));
}

void Transport::send_on(Endpoint& ep, Frame frame) {
  if (ep.failed) return;  // its peer_down is about to be reported
  if (!ep.ready) {
    ep.backlog.push_back(std::move(frame));
    return;
  }
  if (ep.session && !admit_call(ep, frame)) return;
  transmit(ep, std::move(frame), false);
}

void Transport::transmit(Endpoint& ep, Frame frame, bool plain) {
  if (ep.failed && !plain) return;
  frame.envelope.set_payload_size(frame.payload.size());
  const bool sealed = ep.session != nullptr && !plain;
  // A plaintext envelope is serialized once, here. A sealed one is measured before sealing:
  // a frame dropped after it took its nonces would fail every frame after it at the
  // receiver (the size adds the envelope's tag and the payload's tag field).
  std::string plain_header;
  std::size_t header_bytes = 0;
  if (sealed) {
    header_bytes = frame.envelope.ByteSizeLong() + messages::noise::k_tag_bytes +
                   (frame.payload.empty() ? 0 : messages::noise::k_tag_bytes + 2);
  } else {
    plain_header = frame.envelope.SerializeAsString();
    header_bytes = plain_header.size();
  }
  // A relayed frame's envelope travels inside the relay frame's, which must fit too.
  const std::size_t header_limit = ep.via.empty() ? max_header_ : max_header_ - k_relay_overhead_bytes;
  if (header_bytes > header_limit) {
    // Never hand UCX 1.13 an oversized header: it would crash the sender.
    handler_->on_frame(ep.key, error_frame(frame.envelope.call_id(), !frame.envelope.from_caller(),
                                           make_error(errc::too_large,
                                                      "envelope of {} bytes exceeds the {} byte limit",
                                                      header_bytes, header_limit)));
    return;
  }
  if (!sealed) {
    // Over shared memory the receiver fetches a large payload with cma, which pins the
    // sender's pages one by one: a view of 4 KiB pages (a caller's tensor) costs more to
    // pin than to copy into a pooled huge-page block first. Only up to k_stage_max_bytes,
    // though: the copy runs before the send starts, and a large one delays it by more than
    // the pinning costs (see worker.hpp). Over tcp the socket copies either way, so a view
    // leaves as it is. (A sealed payload is already in a pooled buffer.)
    const std::size_t size = frame.payload.size();
    if (config_.mode == Mode::shm && size >= k_stage_min_bytes && size <= k_stage_max_bytes &&
        !frame.payload.huge_backed()) {
      frame.payload = Buffer::copy_of(frame.payload.data(), size);
    }
    send_now(ep, std::move(plain_header), std::move(frame.payload));
    return;
  }
  auto first = ep.session->send.reserve(frame.payload.empty() ? 1 : 2);
  if (!first) {
    mark_failed(ep, make_error(errc::crypto, "sealing a frame to {} failed: {}", ep.key, first.error().message));
    return;
  }
  auto job = std::make_shared<TxJob>();
  if (crypto_ && frame.payload.size() >= k_offload_crypto_bytes) {
    // Sealed on a worker while this thread drives UCX; frames behind it wait in order.
    ep.tx_queue.push_back(job);
    auto cipher = std::make_shared<messages::noise::CipherState>(ep.session->send.fork());
    auto pending = std::make_shared<Frame>(std::move(frame));
    crypto_->submit([this, job, cipher, pending, n = *first] {
      auto header = seal_frame(*cipher, *pending, n);
      if (header) {
        job->header = std::move(*header);
        job->payload = std::move(pending->payload);
      } else {
        job->failed = header.error();
      }
      job->done.store(true, std::memory_order_release);
      post([this] { drain_tx(); });
    });
    return;
  }
  auto header = seal_frame(ep.session->send, frame, *first);
  if (!header) {
    mark_failed(ep, make_error(errc::crypto, "sealing a frame to {} failed: {}", ep.key, header.error().message));
    return;
  }
  if (ep.tx_queue.empty()) {
    send_now(ep, std::move(*header), std::move(frame.payload));
    return;
  }
  job->header = std::move(*header);
  job->payload = std::move(frame.payload);
  job->done.store(true, std::memory_order_release);
  ep.tx_queue.push_back(std::move(job));
}

void Transport::drain_tx() {
  for (auto& [h, e] : endpoints_) {
    auto& q = e->tx_queue;
    while (!q.empty() && q.front()->done.load(std::memory_order_acquire)) {
      std::shared_ptr<TxJob> job = std::move(q.front());
      q.pop_front();
      if (job->failed) {
        mark_failed(*e, make_error(errc::crypto, "sealing a frame to {} failed: {}", e->key, job->failed->message));
        q.clear();
        break;
      }
      if (!e->failed) send_now(*e, std::move(job->header), std::move(job->payload));
    }
  }
}

void Transport::send_now(Endpoint& ep, std::string header, Buffer payload) {
  if (!ep.via.empty()) {
    relay_out(ep, std::move(header), std::move(payload));
    return;
  }
  auto op = std::make_unique<SendOp>();
  op->header = std::move(header);
  op->payload = std::move(payload);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_REPLY;  // lets the receiver know (and answer) who sent it
  // Large payloads always take rendezvous (zero-copy). Left to itself, UCX 1.13 sends
  // messages queued before wireup completes as eager fragments, copied on both sides.
  const bool large = op->payload.size() >= k_rndv_threshold_bytes;
  if (large) {
    p.flags |= UCP_AM_SEND_FLAG_RNDV;
    op->self = this;
    op->key = ep.key;
  }
  p.cb.send = &on_send_done;
  p.user_data = op.get();
  void* req = ucp_am_send_nbx(ep.ep, k_frame_am_id, op->header.data(), op->header.size(),
                              op->payload.data(), op->payload.size(), &p);
  ++counters_.sent;
  counters_.bytes_sent += op->header.size() + op->payload.size();
  if (req == nullptr) return;  // completed at once; op freed here
  if (UCS_PTR_IS_ERR(req)) {
    mark_failed(ep, make_error(errc::peer_down, "send to {} failed: {}", ep.key,
                               ucs_status_string(UCS_PTR_STATUS(req))));
    return;
  }
  if (large) {
    ++ep.transfers;
    ++rndv_sends_;
  }
  op.release();  // on_send_done frees it
}

void Transport::on_send_done(void* request, ucs_status_t /*status*/, void* user_data) {
  // A failed send also fails its endpoint, which on_ep_error reports.
  std::unique_ptr<SendOp> op(static_cast<SendOp*>(user_data));
  if (op->self != nullptr) {
    --op->self->rndv_sends_;
    op->self->transfer_done(op->key);
  }
  ucp_request_free(request);
}

void Transport::send_control(Endpoint& ep, pb::FrameKind kind) {
  Frame f;
  f.envelope.set_kind(kind);
  send_on(ep, std::move(f));
}

// ---- receiving --------------------------------------------------------------------

ucs_status_t Transport::on_stray_am(void* arg, const void*, size_t, void*, size_t,
                                    const ucp_am_recv_param_t*) {
  ++static_cast<Transport*>(arg)->counters_.stray;
  return UCS_OK;  // drops the message (and releases rendezvous data)
}

ucs_status_t Transport::on_frame_am(void* arg, const void* header, size_t header_length, void* data,
                                    size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<Transport*>(arg);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0) {
    ++self->counters_.stray;  // anonymous senders are not served
    return UCS_OK;
  }
  auto it = self->endpoints_.find(param->reply_ep);
  if (it == self->endpoints_.end() || it->second->failed) {
    ++self->counters_.stray;
    return UCS_OK;
  }
  return self->on_wire(*it->second, header, header_length, data, length,
                       (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0);
}

ucs_status_t Transport::on_wire(Endpoint& ep, const void* header, std::size_t header_length, void* data,
                                std::size_t length, bool rndv) {
  Transport* const self = this;
  ep.last_rx = Clock::now();
  const bool first = !ep.heard;
  ep.heard = true;
  const bool secure = !self->config_.insecure;
  if (secure && !ep.session) {
    // Before the handshake ends only its messages (in clear, eager) are accepted.
    Result<pb::Envelope> env = decode_envelope(header, header_length);
    if (!env.ok()) {
      ++self->counters_.malformed;
      self->refuse(ep, make_error(errc::malformed, "malformed handshake frame of {} bytes from {}: {}", header_length,
                                  ep.key, env.error().message),
                   true);
    } else if (rndv) {
      self->refuse(ep, make_error(errc::protocol, "{} sent {} bytes by rendezvous before the handshake finished",
                                  ep.key, length),
                   true);
    } else {
      self->on_handshake_frame(ep, *env, data, length);
    }
    return UCS_OK;
  }
  const void* plain_header = header;
  std::size_t plain_length = header_length;
  std::string opened;
  if (secure) {
    auto o = self->open_header(ep, header, header_length);
    if (!o) return UCS_OK;  // the connection is failed, saying why
    opened = std::move(*o);
    plain_header = opened.data();
    plain_length = opened.size();
  }
  Result<pb::Envelope> decoded = decode_envelope(plain_header, plain_length);
  if (!decoded.ok()) {
    ++self->counters_.malformed;
    // Answer on the same connection; the frame itself is dropped.
    self->replies_.emplace_back(ep.key, error_frame(0, false,
        make_error(errc::malformed, "malformed envelope of {} bytes from {}: {}", header_length, ep.key,
                   decoded.error().message)));
    return UCS_OK;
  }
  Frame frame;
  frame.envelope = std::move(*decoded);
  ++self->counters_.received;
  self->counters_.bytes_received += header_length + length;
  const auto kind = frame.envelope.kind();
  // Flushed after progress returns. An encrypted responder sends its identity proofs
  // first, then its HELLO: calls leave once every PeerID behind it is known.
  if (!ep.ready && (!secure || kind == pb::HELLO)) self->unblocked_.push_back(&ep);
  if (kind == pb::HANDSHAKE) {
    if (secure) {
      self->refuse(ep, make_error(errc::protocol, "{} sent a handshake message after the handshake", ep.key), false);
    } else {
      self->on_handshake_frame(ep, frame.envelope, data, length);
    }
    return UCS_OK;
  }
  if (!secure && first && ep.outbound && kind == pb::ERROR && frame.envelope.call_id() == 0) {
    // The peer refused the connection as its first word (it requires encryption).
    self->refuse(ep, make_error(errc::protocol, "{} refused the connection: {}", ep.key,
                                frame.envelope.error_message()),
                 false);
    return UCS_OK;
  }
  // An encrypted payload's nonce is taken now, in arrival order, whenever it is opened.
  std::uint64_t payload_nonce = 0;
  std::string payload_tag;
  if (secure && frame.envelope.payload_size() > 0) {
    auto n = ep.session->recv.reserve(1);
    if (!n || frame.envelope.payload_mac().size() != messages::noise::k_tag_bytes) {
      self->refuse(ep, make_error(errc::protocol, "{} sent an encrypted payload without its tag", ep.key), false);
      return UCS_OK;
    }
    payload_nonce = *n;
    payload_tag = std::move(*frame.envelope.mutable_payload_mac());
    frame.envelope.clear_payload_mac();
  }
  if (kind == pb::HELLO) {
    self->on_hello(ep, frame.envelope);
    return UCS_OK;
  }
  if (kind == pb::KEEPALIVE) {
    Frame ack;
    ack.envelope.set_kind(pb::KEEPALIVE_ACK);
    self->replies_.emplace_back(ep.key, std::move(ack));
    return UCS_OK;
  }
  if (kind == pb::KEEPALIVE_ACK) return UCS_OK;
  if (kind == pb::OPEN) {
    // The callee learns who calls from the connection, never from what the caller claims.
    frame.envelope.set_listen_addr(ep.outbound ? ep.key : ep.listen_addr);
    // A caller naming itself is one of several nodes behind the connection's gateway; on
    // an encrypted connection it must have proven that PeerID (an IDENTITY frame).
    const std::string& claimed = frame.envelope.peer_id();
    if (claimed.empty()) {
      frame.envelope.set_peer_id(ep.peer_id);
    } else if (secure && claimed != ep.peer_id && ep.proven.count(claimed) == 0) {
      auto id = messages::PeerId::from_bytes(claimed);
      self->replies_.emplace_back(
          ep.key, error_frame(frame.envelope.call_id(), false,
                              make_error(errc::crypto,
                                         "call to '{}' refused: its caller names PeerID {}, which the connection "
                                         "from {} ({}) has not proven",
                                         frame.envelope.handle(), id ? id->to_string() : std::string("(malformed)"),
                                         ep.key, ep.session->remote.to_string())));
      return UCS_OK;  // releases rendezvous data unread
    }
  }
  if (kind == pb::IDENTITY) {
    if (!secure || rndv || length > 4096 ||
        length != frame.envelope.payload_size()) {
      self->refuse(ep, make_error(errc::protocol, "{} sent an identity proof {}", ep.key,
                                  secure ? "of a wrong or more than 4096 bytes" : "on a plaintext connection"),
                   false);
      return UCS_OK;
    }
    Buffer proof = Buffer::allocate(length);
    if (length > 0) {
      auto st = ep.session->recv.open_at(payload_nonce, {}, static_cast<const std::byte*>(data), length, proof.data(),
                                         reinterpret_cast<const std::byte*>(payload_tag.data()));
      if (!st) {
        self->refuse(ep, make_error(errc::crypto, "an identity proof from {} failed authentication ({}); the "
                                    "connection is closed", ep.key, st.error().message),
                     false);
        return UCS_OK;
      }
    }
    self->on_identity(ep, proof);
    return UCS_OK;
  }
  if (frame.envelope.payload_size() != length) {
    ++self->counters_.malformed;
    frame.payload_error = make_error(errc::malformed,
                                     "frame payload of {} bytes from {} does not match the {} bytes its envelope "
                                     "announces; the frame was truncated or forged",
                                     length, ep.key, frame.envelope.payload_size());
    self->receive(ep, std::move(frame));
    return UCS_OK;  // releases rendezvous data unread
  }
  // A spliced message (head + data + tail) is joined here: the data lands in place
  // between its head and tail, so joining costs no extra copy of it.
  const std::size_t total =
      frame.envelope.payload_head().size() + length + frame.envelope.payload_tail().size();
  if (total > self->config_.max_frame_bytes) {
    ++self->counters_.oversized;
    frame.payload_error = make_error(errc::too_large,
                                     "frame payload of {} bytes exceeds the limit of {} bytes", total,
                                     self->config_.max_frame_bytes);
    self->receive(ep, std::move(frame));
    return UCS_OK;  // releases rendezvous data unread
  }
  // A body the handler posted memory for lands there, and the payload is head + tail.
  Buffer zone = posted_zone(*self->handler_, ep.key, frame.envelope, length);
  std::size_t body_at = 0;
  Buffer payload = spliced_buffer(frame.envelope, zone.empty() ? length : 0, body_at);
  if (!zone.empty()) {
    frame.landed = length;
    ++self->counters_.landed;
  }
  std::byte* const dest = zone.empty() ? payload.data() + body_at : zone.data();
  if (rndv) {
    auto pending = std::make_unique<PendingRndv>();
    pending->self = self;
    pending->from = ep.key;
    pending->slot = std::make_shared<RxSlot>();
    pending->slot->frame = std::move(frame);
    pending->slot->frame.payload = std::move(payload);
    pending->desc = data;
    pending->offset = body_at;
    pending->length = length;
    pending->zone = std::move(zone);
    if (secure) {
      pending->session = ep.session;
      pending->nonce = payload_nonce;
      pending->tag = std::move(payload_tag);
    }
    ep.rx_order.push_back(pending->slot);  // later frames of this peer wait behind it
    self->rndv_pending_.push_back(std::move(pending));
    ++ep.transfers;
    return UCS_INPROGRESS;  // fetched after progress returns
  }
  if (length > 0 && secure) {
    // Decrypting is the copy out of UCX's buffer.
    auto st = ep.session->recv.open_at(payload_nonce, {}, static_cast<const std::byte*>(data), length, dest,
                                       reinterpret_cast<const std::byte*>(payload_tag.data()));
    if (!st) {
      Error why = make_error(errc::crypto, "a frame's payload from {} failed authentication ({}); the connection is "
                             "closed", ep.key, st.error().message);
      self->refuse(ep, why, false);
      frame.landed = 0;
      frame.payload_error = std::move(why);
      self->receive(ep, std::move(frame));
      return UCS_OK;
    }
  } else if (length > 0) {
    std::memcpy(dest, data, length);
  }
  frame.payload = std::move(payload);
  self->receive(ep, std::move(frame));
  return UCS_OK;
}

void Transport::receive(Endpoint& ep, Frame frame) {
  if (ep.rx_order.empty()) {
    inbox_.emplace_back(ep.key, std::move(frame));
    return;
  }
  auto slot = std::make_shared<RxSlot>();
  slot->frame = std::move(frame);
  slot->ready = true;
  ep.rx_order.push_back(std::move(slot));
}

void Transport::flush_in_order(const PeerKey& from, const std::shared_ptr<RxSlot>& slot) {
  slot->ready = true;
  for (auto& [h, e] : endpoints_) {
    if (e->key != from) continue;
    auto& order = e->rx_order;
    if (std::find(order.begin(), order.end(), slot) == order.end()) continue;
    while (!order.empty() && order.front()->ready) {
      inbox_.emplace_back(from, std::move(order.front()->frame));
      order.pop_front();
    }
    return;
  }
  inbox_.emplace_back(from, std::move(slot->frame));  // the connection is gone: deliver as is
}

void Transport::start_rndv_receives() {
  auto pending = std::move(rndv_pending_);
  rndv_pending_.clear();
  for (auto& rp : pending) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = &on_rndv_done;
    p.user_data = rp.get();
    Frame& frame = rp->slot->frame;
    std::byte* dest = rp->zone.empty() ? frame.payload.data() + rp->offset : rp->zone.data();
    void* req = ucp_am_recv_data_nbx(worker_->get(), rp->desc, dest, rp->length, &p);
    if (req == nullptr) {
      rndv_complete(std::move(rp), UCS_OK);
    } else if (UCS_PTR_IS_ERR(req)) {
      rndv_complete(std::move(rp), UCS_PTR_STATUS(req));
    } else {
      rp.release();  // on_rndv_done owns it
    }
  }
}

void Transport::on_rndv_done(void* request, ucs_status_t status, size_t, void* user_data) {
  std::unique_ptr<PendingRndv> rp(static_cast<PendingRndv*>(user_data));
  Transport* self = rp->self;
  self->rndv_complete(std::move(rp), status);
  ucp_request_free(request);
}

void Transport::rndv_complete(std::unique_ptr<PendingRndv> rp, ucs_status_t status) {
  transfer_done(rp->from);
  Frame& frame = rp->slot->frame;
  if (status != UCS_OK) {
    frame.payload_error = make_error(errc::peer_down, "receiving a payload from {} failed: {}", rp->from,
                                     ucs_status_string(status));
    rndv_deliver(*rp);
    return;
  }
  if (!rp->session) {
    rndv_deliver(*rp);
    return;
  }
  // Fetched sealed; opened where it landed (a large payload on a crypto worker, while this
  // thread goes on receiving; the frames behind it wait in rx_order).
  auto open = [](PendingRndv& r, messages::noise::CipherState& cipher) {
    Frame& f = r.slot->frame;
    std::byte* at = r.zone.empty() ? f.payload.data() + r.offset : r.zone.data();
    auto st = cipher.open_at(r.nonce, {}, at, r.length, at, reinterpret_cast<const std::byte*>(r.tag.data()));
    if (!st) {
      f.payload_error = make_error(errc::crypto, "a frame's payload from {} failed authentication ({}); the "
                                   "connection is closed", r.from, st.error().message);
    }
  };
  if (crypto_ && rp->length >= k_offload_crypto_bytes) {
    auto job = std::shared_ptr<PendingRndv>(std::move(rp));
    auto cipher = std::make_shared<messages::noise::CipherState>(job->session->recv.fork());
    crypto_->submit([this, job, cipher, open] {
      open(*job, *cipher);
      post([this, job] { rndv_deliver(*job); });
    });
    return;
  }
  open(*rp, rp->session->recv);
  rndv_deliver(*rp);
}

void Transport::rndv_deliver(PendingRndv& rp) {
  Frame& frame = rp.slot->frame;
  if (frame.payload_error) {
    if (rp.session && frame.payload_error->code == errc::crypto) {
      for (auto& [h, e] : endpoints_) {
        if (e->session == rp.session) refuse(*e, *frame.payload_error, false);
      }
    }
    frame.landed = 0;
    frame.payload = Buffer{};
  }
  rp.zone = Buffer{};  // the handler's memory is released before its frame is delivered
  flush_in_order(rp.from, rp.slot);
}

void Transport::dispatch_inbox() {
  // Sends are made here, outside UCX callbacks: first each connection's own (handshake
  // messages, refusals, a responder's first encrypted frame), then held-back frames. A
  // relayed connection's frames arrive inside the batch and queue more of each, so this
  // goes on until all are empty.
  while (!control_out_.empty() || !unblocked_.empty() || !inbox_.empty() || !replies_.empty()) {
    auto control = std::move(control_out_);
    control_out_.clear();
    for (auto& c : control) transmit(*c.ep, std::move(c.frame), c.plain);
    auto unblocked = std::move(unblocked_);
    unblocked_.clear();
    for (Endpoint* ep : unblocked) {
      if (ep->ready || ep->failed) continue;
      ep->ready = true;
      if (ep->session && ep->outbound) send_proofs(*ep);  // before any call that names a proven PeerID
      auto backlog = std::move(ep->backlog);
      for (auto& f : backlog) send_on(*ep, std::move(f));
    }
    auto replies = std::move(replies_);
    replies_.clear();
    for (auto& [to, frame] : replies) {
      if (auto it = by_key_.find(to); it != by_key_.end()) send_on(*it->second, std::move(frame));
    }
    auto batch = std::move(inbox_);
    inbox_.clear();
    for (auto& [from, frame] : batch) {
      if (is_relay_frame(frame.envelope.kind())) {
        on_relay_frame(from, std::move(frame));
      } else {
        handler_->on_frame(from, std::move(frame));
      }
    }
  }
}

// ---- keepalives -------------------------------------------------------------------

void Transport::transfer_done(const PeerKey& key) {
  for (auto& [h, e] : endpoints_) {
    if (e->key == key && e->transfers > 0) {
      --e->transfers;
      e->last_rx = Clock::now();  // a finished transfer is a sign of life
      return;
    }
  }
}

void Transport::check_keepalives(Clock::time_point now) {
  tend_relays(now);
  for (auto& [h, e] : endpoints_) {
    if (e->failed) continue;
    // A large transfer can hold the connection (and the probes queued behind it) for
    // longer than the keepalive timeout on a slow or loaded link; while one is in
    // flight the call deadlines, not keepalives, bound the wait.
    if (e->transfers > 0) {
      e->last_rx = now;
      continue;
    }
    if (!e->via.empty()) {
      // A relayed connection's large frame holds its relay's connection the same way.
      auto r = by_key_.find(e->via);
      if (r != by_key_.end() && r->second->transfers > 0) {
        e->last_rx = now;
        continue;
      }
    }
    const auto silent = now - e->last_rx;
    if (silent > config_.keepalive_timeout) {
      mark_failed(*e, make_error(errc::peer_down, "{} silent for {} ms (keepalive timeout {} ms)", e->key,
                                 std::chrono::duration_cast<std::chrono::milliseconds>(silent).count(),
                                 config_.keepalive_timeout.count()));
    } else if (silent > config_.keepalive_interval && now - e->last_probe > config_.keepalive_interval) {
      e->last_probe = now;
      send_control(*e, pb::KEEPALIVE);
    }
  }
}

}  // namespace apiary::transport::ucx
