// A relay's reservations and circuits (relay_book.hpp).
#include "transport/relay_book.hpp"

#include <fmt/format.h>

#include "messages/identity/peer_id.hpp"

namespace apiary::transport {
namespace {

std::string named(const std::string& peer) {
  auto id = messages::PeerId::from_bytes(peer);
  return id ? id->to_string() : fmt::format("(a malformed PeerID of {} bytes)", peer.size());
}

}  // namespace

Status RelayBook::reserve(const std::string& peer, const PeerKey& conn, Clock::time_point now) {
  auto it = slots_.find(peer);
  if (it == slots_.end()) {
    if (slots_.size() >= limits_.max_reservations) {
      return make_error(errc::unavailable, "the relay holds its limit of {} reservations; try another relay",
                        limits_.max_reservations);
    }
    it = slots_.emplace(peer, Slot{}).first;
    // Circuits to it may outlive an earlier reservation: they count against this one.
    for (const auto& [end, c] : circuits_) {
      if (c.reserved_peer == peer && end < c.other) ++it->second.open;
    }
  }
  it->second.conn = conn;
  it->second.expires = now + limits_.reservation;
  it->second.bytes = 0;
  return ok_status();
}

Result<CircuitEnd> RelayBook::open(const PeerKey& conn, std::uint64_t from_circuit, const std::string& target,
                                   std::uint64_t to_circuit, Clock::time_point now) {
  const CircuitEnd from{conn, from_circuit, true};
  if (circuits_.count(from) != 0) {
    return make_error(errc::protocol, "circuit {} is already open on this connection", from_circuit);
  }
  auto slot = slots_.find(target);
  if (slot == slots_.end() || slot->second.expires <= now) {
    return make_error(errc::not_found, "the relay holds no reservation for PeerID {}; that peer is not reachable "
                      "through this relay", named(target));
  }
  if (slot->second.open >= limits_.max_circuits_per_peer) {
    return make_error(errc::unavailable, "PeerID {} already has {} relayed connections, the relay's limit",
                      named(target), limits_.max_circuits_per_peer);
  }
  const CircuitEnd to{slot->second.conn, to_circuit, false};
  if (circuits_.count(to) != 0) {
    return make_error(errc::protocol, "circuit {} is already open on the connection of PeerID {}", to_circuit,
                      named(target));
  }
  auto bytes = std::make_shared<std::uint64_t>(0);
  const auto ends = now + limits_.circuit;
  circuits_[from] = Circuit{to, target, ends, bytes};
  circuits_[to] = Circuit{from, target, ends, bytes};
  ++slot->second.open;
  return to;
}

RelayBook::Forward RelayBook::forward(const CircuitEnd& from, std::uint64_t bytes) {
  Forward out;
  auto it = circuits_.find(from);
  if (it == circuits_.end()) {
    out.closing.push_back({from, make_error(errc::not_found, "the relay knows no circuit {} on this connection",
                                            from.circuit)});
    return out;
  }
  Circuit& c = it->second;
  *c.bytes += bytes;
  Slot* slot = nullptr;
  if (auto s = slots_.find(c.reserved_peer); s != slots_.end()) {
    s->second.bytes += bytes;
    slot = &s->second;
  }
  std::optional<Error> over;
  if (*c.bytes > limits_.circuit_bytes) {
    over = make_error(errc::too_large, "the relayed connection carried more than the relay's limit of {} bytes",
                      limits_.circuit_bytes);
  } else if (slot != nullptr && slot->bytes > limits_.reservation_bytes) {
    over = make_error(errc::too_large, "the relay carried more than {} bytes for PeerID {} in one reservation",
                      limits_.reservation_bytes, named(c.reserved_peer));
  }
  if (!over) {
    out.to = c.other;
    return out;
  }
  const CircuitEnd other = c.other;
  remove(from);
  out.closing.push_back({from, *over});
  out.closing.push_back({other, *over});
  return out;
}

std::optional<CircuitEnd> RelayBook::remove(const CircuitEnd& end) {
  auto it = circuits_.find(end);
  if (it == circuits_.end()) return std::nullopt;
  const CircuitEnd other = it->second.other;
  if (auto s = slots_.find(it->second.reserved_peer); s != slots_.end() && s->second.open > 0) --s->second.open;
  circuits_.erase(it);
  circuits_.erase(other);
  return other;
}

std::optional<CircuitEnd> RelayBook::close(const CircuitEnd& from) { return remove(from); }

std::vector<CircuitClosing> RelayBook::drop_connection(const PeerKey& conn) {
  for (auto it = slots_.begin(); it != slots_.end();) {
    it = it->second.conn == conn ? slots_.erase(it) : std::next(it);
  }
  std::vector<CircuitEnd> mine;
  for (auto it = circuits_.lower_bound(CircuitEnd{conn, 0, false}); it != circuits_.end() && it->first.conn == conn; ++it) {
    mine.push_back(it->first);
  }
  std::vector<CircuitClosing> out;
  for (const auto& end : mine) {
    if (auto other = remove(end)) {
      out.push_back({*other, make_error(errc::peer_down, "the other end of the relayed connection went away")});
    }
  }
  return out;
}

std::vector<CircuitClosing> RelayBook::expire(Clock::time_point now) {
  for (auto it = slots_.begin(); it != slots_.end();) {
    it = it->second.expires <= now ? slots_.erase(it) : std::next(it);
  }
  std::vector<CircuitEnd> over;
  for (const auto& [end, c] : circuits_) {
    if (c.ends <= now && end < c.other) over.push_back(end);
  }
  std::vector<CircuitClosing> out;
  for (const auto& end : over) {
    auto other = remove(end);
    const Error why = make_error(errc::deadline_exceeded, "the relayed connection reached the relay's limit of {} ms",
                                 limits_.circuit.count());
    out.push_back({end, why});
    if (other) out.push_back({*other, why});
  }
  return out;
}

}  // namespace apiary::transport
