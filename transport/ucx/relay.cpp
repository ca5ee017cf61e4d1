// Relays (transport/README.md "Relays"): reservations, relayed connections (circuits)
// carried inside connections to a relay, and serving as a relay (RelayBook).
#include "transport/ucx/control_frames.hpp"
#include "transport/ucx/transport.hpp"

namespace apiary::transport::ucx {
namespace {

/// How long after losing its relay a reservation is asked for again.
constexpr auto k_reserve_retry = std::chrono::seconds(1);

Frame close_frame(const CircuitEnd& end, const Error& why) {
  Frame f = relay_frame(pb::CIRCUIT_CLOSE, end.circuit, !end.remote_opened);
  f.envelope.set_error_code(static_cast<std::uint32_t>(why.code));
  f.envelope.set_error_message(messages::valid_utf8(why.message, 1024));
  return f;
}

Error error_of(const pb::Envelope& env, errc otherwise) {
  errc code = static_cast<errc>(env.error_code());
  if (env.error_code() == 0 || env.error_code() > static_cast<std::uint32_t>(errc::unauthorized)) code = otherwise;
  return Error{code, messages::valid_utf8(env.error_message(), 1024)};
}

}  // namespace

// ---- the ends of a relayed connection ---------------------------------------------

Endpoint* Transport::adopt_relayed(PeerKey key, const PeerKey& via, std::uint64_t circuit, bool outbound) {
  auto e = std::make_unique<Endpoint>();
  e->key = std::move(key);
  e->via = via;
  e->circuit = circuit;
  e->outbound = outbound;
  e->ready = false;
  e->last_rx = e->last_probe = Clock::now();
  Endpoint* raw = e.get();
  endpoints_[raw] = std::move(e);
  if (by_key_.count(raw->key) == 0) by_key_[raw->key] = raw;
  circuits_[CircuitEnd{via, circuit, !outbound}] = raw;
  ++counters_.circuits;
  return raw;
}

Endpoint* Transport::connect_relayed(const PeerKey& key) {
  auto addr = messages::Multiaddr::from_host_port(key, "relayed address");
  if (addr && (!addr->relayed() || !addr->peer)) {
    addr = make_error(errc::invalid_argument, "relayed address '{}' names no peer to reach through the relay", key);
  }
  if (!addr) {
    handler_->on_peer_down(key, addr.error());
    return nullptr;
  }
  if (*addr->peer == *addr->relay || addr->peer->bytes() == config_.peer_id) {
    handler_->on_peer_down(key, make_error(errc::invalid_argument,
                                           "relayed address '{}' leads to the relay itself or to this node", key));
    return nullptr;
  }
  messages::Multiaddr relay_addr = *addr;
  relay_addr.relay.reset();
  relay_addr.peer.reset();
  const PeerKey relay_key = relay_addr.host_port();
  Endpoint* relay = find_or_connect(relay_key);
  if (relay == nullptr) {
    handler_->on_peer_down(key, make_error(errc::unavailable, "cannot reach the relay at {} for {}", relay_key, key));
    return nullptr;
  }
  Endpoint* e = adopt_relayed(key, relay_key, ++next_circuit_, true);
  Frame open = relay_frame(pb::CIRCUIT_OPEN, e->circuit, true);
  open.envelope.set_peer_id(addr->peer->bytes());
  open.expect_peer = addr->relay->bytes();
  send_on(*relay, std::move(open));
  // Then the connection starts as a dialled one does; its first frames follow the
  // CIRCUIT_OPEN on the relay's connection.
  if (config_.insecure) {
    transmit(*e, hello_frame(), false);
  } else if (auto st = begin_handshake(*e); !st) {
    refuse(*e, st.error(), false);
  }
  return e;
}

void Transport::relay_out(Endpoint& ep, std::string header, Buffer payload) {
  auto it = by_key_.find(ep.via);
  if (it == by_key_.end() || it->second->failed) {
    mark_failed(ep, make_error(errc::peer_down, "{}: the connection to its relay {} is gone", ep.key, ep.via));
    return;
  }
  Frame f = relay_frame(pb::CIRCUIT_DATA, ep.circuit, ep.outbound);
  f.envelope.mutable_relay()->set_header(std::move(header));
  f.payload = std::move(payload);
  send_on(*it->second, std::move(f));
}

void Transport::on_relay_frame(const PeerKey& from, Frame frame) {
  if (auto it = by_key_.find(from); it != by_key_.end() && !it->second->via.empty()) {
    // One relay hop only, as libp2p's circuit relay v2 allows.
    refuse(*it->second, make_error(errc::protocol, "{} sent relay frames on a relayed connection", from), true);
    return;
  }
  switch (frame.envelope.kind()) {
    case pb::RELAY_RESERVE:
      on_reserve(from, frame.envelope);
      return;
    case pb::RELAY_RESERVED:
      on_reserved(from, frame.envelope);
      return;
    case pb::CIRCUIT_OPEN:
      on_circuit_open(from, frame.envelope);
      return;
    case pb::CIRCUIT_DATA:
      on_circuit_data(from, std::move(frame));
      return;
    case pb::CIRCUIT_CLOSE:
      on_circuit_close(from, frame.envelope);
      return;
    default:
      return;
  }
}

void Transport::on_circuit_open(const PeerKey& from, const pb::Envelope& env) {
  auto conn = by_key_.find(from);
  if (conn == by_key_.end()) return;
  const std::uint64_t circuit = env.relay().circuit();
  if (reserved_at(from)) {
    // The relay we reserved at opens a relayed connection to us: accepted as a peer's
    // connection is (the dialler speaks first).
    if (circuits_.count(CircuitEnd{from, circuit, true}) != 0) return;
    Endpoint* e = adopt_relayed(fmt::format("inbound:{}", ++inbound_counter_), from, circuit, false);
    if (config_.insecure) {
      e->ready = true;
      send_on(*e, hello_frame());
    } else if (auto st = begin_handshake(*e); !st) {
      refuse(*e, st.error(), false);
    }
    return;
  }
  const CircuitEnd end{from, circuit, true};
  if (!relay_book_) {
    close_circuit(end, make_error(errc::unsupported, "the node at {} is not a relay (it was not started as one)",
                                  bound_));
    return;
  }
  const std::uint64_t to_circuit = ++next_circuit_;
  auto to = relay_book_->open(from, circuit, env.peer_id(), to_circuit, Clock::now());
  if (!to) {
    close_circuit(end, to.error());
    return;
  }
  auto target = by_key_.find(to->conn);
  if (target == by_key_.end() || target->second->failed) {
    relay_book_->close(end);
    close_circuit(end, make_error(errc::peer_down, "the relay lost its connection to PeerID {}",
                                  peer_text(env.peer_id())));
    return;
  }
  Frame open = relay_frame(pb::CIRCUIT_OPEN, to->circuit, true);
  open.envelope.set_peer_id(conn->second->peer_id);  // the dialler, as its connection to the relay proved
  send_on(*target->second, std::move(open));
}

void Transport::on_circuit_data(const PeerKey& from, Frame frame) {
  const CircuitEnd end{from, frame.envelope.relay().circuit(), frame.envelope.relay().from_opener()};
  if (auto it = circuits_.find(end); it != circuits_.end()) {
    Endpoint& ep = *it->second;
    if (ep.failed) return;
    if (frame.payload_error) {
      mark_failed(ep, make_error(frame.payload_error->code, "a frame relayed from {}: {}", ep.key,
                                 frame.payload_error->message));
      return;
    }
    const std::string& header = frame.envelope.relay().header();
    // The relayed frame, as it would have arrived on a connection of its own (eager).
    (void)on_wire(ep, header.data(), header.size(), frame.payload.data(), frame.payload.size(), false);
    return;
  }
  if (!relay_book_) {
    close_circuit(end, make_error(errc::not_found, "no relayed connection {} here", end.circuit));
    return;
  }
  if (frame.payload_error) {
    const Error why = *frame.payload_error;
    auto other = relay_book_->close(end);
    close_circuit(end, why);
    if (other) close_circuit(*other, why);
    return;
  }
  const std::uint64_t bytes = frame.envelope.relay().header().size() + frame.payload.size();
  auto fwd = relay_book_->forward(end, bytes);
  for (const auto& c : fwd.closing) close_circuit(c.end, c.why);
  if (!fwd.to) return;
  auto target = by_key_.find(fwd.to->conn);
  if (target == by_key_.end() || target->second->failed) return;  // its loss closes the circuit
  Frame out = relay_frame(pb::CIRCUIT_DATA, fwd.to->circuit, !fwd.to->remote_opened);
  out.envelope.mutable_relay()->set_header(std::move(*frame.envelope.mutable_relay()->mutable_header()));
  out.payload = std::move(frame.payload);
  ++counters_.relayed;
  send_on(*target->second, std::move(out));
}

void Transport::on_circuit_close(const PeerKey& from, const pb::Envelope& env) {
  const CircuitEnd end{from, env.relay().circuit(), env.relay().from_opener()};
  if (auto it = circuits_.find(end); it != circuits_.end()) {
    Endpoint& ep = *it->second;
    ep.circuit_closed = true;
    mark_failed(ep, make_error(error_of(env, errc::peer_down).code, "the relayed connection {} through {} was closed: {}",
                               ep.key, from, messages::valid_utf8(env.error_message(), 1024)));
    return;
  }
  if (!relay_book_) return;
  if (auto other = relay_book_->close(end)) close_circuit(*other, error_of(env, errc::peer_down));
}

void Transport::close_circuit(const CircuitEnd& end, const Error& why) {
  auto it = by_key_.find(end.conn);
  if (it == by_key_.end() || it->second->failed) return;
  send_on(*it->second, close_frame(end, why));
}

void Transport::relay_link_down(const PeerKey& key, const Error& why) {
  for (auto it = circuits_.lower_bound(CircuitEnd{key, 0, false}); it != circuits_.end() && it->first.conn == key;
       ++it) {
    it->second->circuit_closed = true;
    mark_failed(*it->second, make_error(errc::peer_down, "{}: the connection to its relay {} failed: {}",
                                        it->second->key, key, why.message));
  }
  if (relay_book_) {
    for (const auto& c : relay_book_->drop_connection(key)) close_circuit(c.end, c.why);
  }
  std::vector<std::function<void(Result<RelayGrant>)>> refused;
  for (auto r = reservations_.lower_bound({key, std::string()}); r != reservations_.end() && r->first.first == key;) {
    if (!r->second.keep) {
      // Never granted: the caller hears why, and nothing is asked again.
      for (auto& done : r->second.waiting) refused.push_back(std::move(done));
      r = reservations_.erase(r);
      continue;
    }
    r->second.grant.reset();
    r->second.asked = false;
    r->second.ask_at = Clock::now() + k_reserve_retry;
    ++r;
  }
  for (auto& done : refused) done(make_error(errc::unavailable, "cannot reserve at the relay {}: {}", key, why.message));
}

bool Transport::reserved_at(const PeerKey& relay) const {
  auto r = reservations_.lower_bound({relay, std::string()});
  return r != reservations_.end() && r->first.first == relay;
}

// ---- reservations -----------------------------------------------------------------

void Transport::reserve(const PeerKey& relay, const std::string& peer_id,
                        std::function<void(Result<RelayGrant>)> done) {
  if (relay.find('/') != PeerKey::npos) {
    done(make_error(errc::invalid_argument, "reserve at a relay's own address (HOST:PORT), not '{}'", relay));
    return;
  }
  const std::pair<PeerKey, std::string> slot{relay, peer_id.empty() ? config_.peer_id : peer_id};
  Reservation& r = reservations_[slot];
  if (r.grant) {
    done(*r.grant);
    return;
  }
  r.waiting.push_back(std::move(done));
  if (!r.asked) ask_reservation(slot);
}

void Transport::ask_reservation(const std::pair<PeerKey, std::string>& slot) {
  if (reservations_.count(slot) == 0) return;  // refused meanwhile
  Endpoint* e = find_or_connect(slot.first);
  if (e == nullptr) {
    relay_link_down(slot.first, make_error(errc::unavailable, "cannot connect to {}", slot.first));
    return;
  }
  reservations_[slot].asked = true;
  Frame f;
  f.envelope.set_kind(pb::RELAY_RESERVE);
  f.envelope.set_peer_id(slot.second);
  send_on(*e, std::move(f));  // a relay that cannot be reached comes back through relay_link_down
}

void Transport::on_reserve(const PeerKey& from, const pb::Envelope& env) {
  auto conn = by_key_.find(from);
  if (conn == by_key_.end()) return;
  const Endpoint& ep = *conn->second;
  // The slot is for the connection's PeerID or one a node behind its gateway proved.
  const std::string peer = env.peer_id().empty() ? ep.peer_id : env.peer_id().substr(0, 256);
  Frame answer;
  answer.envelope.set_kind(pb::RELAY_RESERVED);
  answer.envelope.set_peer_id(peer);
  Status st = ok_status();
  if (!relay_book_) {
    st = make_error(errc::unsupported, "the node at {} is not a relay (it was not started as one)", bound_);
  } else if (peer.empty()) {
    st = make_error(errc::protocol, "a reservation needs the peer's PeerID, which {} did not give", from);
  } else if (peer != ep.peer_id && ep.proven.count(peer) == 0) {
    st = make_error(errc::crypto, "a reservation for PeerID {}, which the connection from {} ({}) has not proven",
                    peer_text(peer), from, peer_text(ep.peer_id));
  } else {
    st = relay_book_->reserve(peer, from, Clock::now());
  }
  if (st) {
    const RelayLimits& l = relay_book_->limits();
    auto* info = answer.envelope.mutable_relay();
    info->set_reservation_ms(static_cast<std::uint64_t>(l.reservation.count()));
    info->set_circuit_ms(static_cast<std::uint64_t>(l.circuit.count()));
    info->set_circuit_bytes(l.circuit_bytes);
  } else {
    answer.envelope.set_error_code(static_cast<std::uint32_t>(st.error().code));
    answer.envelope.set_error_message(messages::valid_utf8(st.error().message, 1024));
  }
  send_on(*conn->second, std::move(answer));
}

void Transport::on_reserved(const PeerKey& from, const pb::Envelope& env) {
  auto it = reservations_.find({from, env.peer_id()});
  if (it == reservations_.end() || !it->second.asked) return;
  Reservation& r = it->second;
  r.asked = false;
  auto waiting = std::move(r.waiting);
  r.waiting.clear();
  if (env.error_code() != 0 || env.relay().reservation_ms() == 0) {
    const Error why = make_error(error_of(env, errc::unavailable).code, "the relay at {} refused a reservation: {}",
                                 from, messages::valid_utf8(env.error_message(), 1024));
    reservations_.erase(it);
    for (auto& done : waiting) done(why);
    return;
  }
  RelayGrant g;
  g.reservation = std::chrono::milliseconds(env.relay().reservation_ms());
  g.circuit = std::chrono::milliseconds(env.relay().circuit_ms());
  g.circuit_bytes = env.relay().circuit_bytes();
  r.grant = g;
  r.keep = true;
  r.ask_at = Clock::now() + g.reservation / 2;
  for (auto& done : waiting) done(g);
}

void Transport::tend_relays(Clock::time_point now) {
  std::vector<std::pair<PeerKey, std::string>> due;
  for (const auto& [slot, r] : reservations_) {
    if (!r.asked && now >= r.ask_at) due.push_back(slot);
  }
  for (const auto& slot : due) ask_reservation(slot);
  if (relay_book_) {
    for (const auto& c : relay_book_->expire(now)) close_circuit(c.end, c.why);
  }
}

}  // namespace apiary::transport::ucx
