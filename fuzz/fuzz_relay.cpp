// libFuzzer target: a relay's bookkeeping (transport/relay_book.hpp) driven by a script of
// what relayed peers may send it: reservations from three connections for four PeerIDs
// (one a malformed PeerID), circuits opened with any ids, CIRCUIT_DATA of any size on
// known and unknown circuits, closes, lost connections and the clock moving on, under
// small limits so that every limit is reached. A model of the open circuits checks every
// answer: a frame goes to its circuit's other end or closes both ends, a circuit id is
// never open twice on a connection, the circuits to one peer stay within the limit, and
// the book counts what the model holds.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <set>
#include <string>

#include "fuzz/fuzz_input.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/identity/peer_id.hpp"
#include "transport/relay_book.hpp"

namespace {

using apiary::fuzz::FuzzInput;
using apiary::transport::CircuitEnd;
using apiary::transport::RelayBook;
using apiary::transport::RelayLimits;

const std::string k_conns[3] = {"127.0.0.1:4001", "127.0.0.1:4002", "127.0.0.1:4003"};

/// PeerID bytes of a key of 32 bytes `b`.
std::string peer_id(char b) {
  auto key = apiary::messages::Ed25519PublicKey::from_bytes(std::string(32, b));
  return key.ok() ? apiary::messages::PeerId::from_public_key(*key).bytes() : std::string(1, b);
}

const std::string& peer(std::size_t i) {
  static const std::string peers[4] = {peer_id('\1'), peer_id('\2'), peer_id('\3'), "not a PeerID"};
  return peers[i];
}

RelayLimits small_limits() {
  RelayLimits l;
  l.reservation = std::chrono::milliseconds(1000);
  l.reservation_bytes = 100000;
  l.max_reservations = 3;
  l.max_circuits_per_peer = 3;
  l.circuit = std::chrono::milliseconds(3000);
  l.circuit_bytes = 20000;
  return l;
}

/// The open circuits as the relay's peers were told: each end to its other end and target.
struct Model {
  std::map<CircuitEnd, CircuitEnd> other;
  std::map<CircuitEnd, std::string> target;

  void add(const CircuitEnd& a, const CircuitEnd& b, const std::string& to) {
    other[a] = b;
    other[b] = a;
    target[a] = to;
    target[b] = to;
  }
  /// Removes the circuit at `end`; false when the model had none there.
  bool remove(const CircuitEnd& end) {
    auto it = other.find(end);
    if (it == other.end()) return false;
    const CircuitEnd b = it->second;
    other.erase(it);
    other.erase(b);
    target.erase(end);
    target.erase(b);
    return true;
  }
  [[nodiscard]] std::size_t to(const std::string& p) const {
    std::size_t n = 0;
    for (const auto& [end, t] : target) n += t == p ? 1 : 0;
    return n / 2;
  }
};

CircuitEnd any_end(FuzzInput& in, const Model& model) {
  if (!model.other.empty() && in.flag()) {
    auto it = model.other.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(in.pick(model.other.size())));
    return it->first;
  }
  return CircuitEnd{k_conns[in.pick(3)], in.number(1), in.flag()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  const RelayLimits limits = small_limits();
  RelayBook book(limits);
  Model model;
  auto now = RelayBook::Clock::time_point{} + std::chrono::hours(1);
  for (int step = 0; step < 256 && !in.empty(); ++step) {
    switch (in.pick(6)) {
      case 0: {
        const std::string& p = peer(in.pick(4));
        const bool renewal = book.reserved(p);
        const std::size_t before = book.reservations();
        auto st = book.reserve(p, k_conns[in.pick(3)], now);
        if (!st.ok() && (renewal || before < limits.max_reservations)) __builtin_trap();  // refused with room left
        if (st.ok() && !book.reserved(p)) __builtin_trap();
        break;
      }
      case 1: {
        const std::string& conn = k_conns[in.pick(3)];
        const std::uint64_t from_id = in.number(1);
        const std::string& to_peer = peer(in.pick(4));
        const std::uint64_t to_id = in.number(1);
        auto to = book.open(conn, from_id, to_peer, to_id, now);
        if (!to.ok()) break;
        const CircuitEnd from{conn, from_id, true};
        if (model.other.count(from) != 0 || model.other.count(*to) != 0) __builtin_trap();  // an id open twice
        if (to->circuit != to_id || to->remote_opened) __builtin_trap();
        model.add(from, *to, to_peer);
        if (model.to(to_peer) > limits.max_circuits_per_peer) __builtin_trap();
        break;
      }
      case 2: {
        const CircuitEnd from = any_end(in, model);
        const auto forward = book.forward(from, in.number(2));
        auto known = model.other.find(from);
        if (known == model.other.end()) {
          if (forward.to || forward.closing.size() != 1 || !(forward.closing[0].end == from)) __builtin_trap();
        } else if (forward.to) {
          if (!(*forward.to == known->second) || !forward.closing.empty()) __builtin_trap();
        } else {
          if (forward.closing.size() != 2 || !(forward.closing[0].end == from) ||
              !(forward.closing[1].end == known->second)) {
            __builtin_trap();
          }
          model.remove(from);
        }
        break;
      }
      case 3: {
        const CircuitEnd from = any_end(in, model);
        const auto other = book.close(from);
        auto known = model.other.find(from);
        if (other.has_value() != (known != model.other.end())) __builtin_trap();
        if (other && !(*other == known->second)) __builtin_trap();
        model.remove(from);
        break;
      }
      case 4: {
        const std::string& conn = k_conns[in.pick(3)];
        for (const auto& closing : book.drop_connection(conn)) {
          auto known = model.other.find(closing.end);
          if (known == model.other.end() || known->second.conn != conn) __builtin_trap();  // told of a stranger
          model.remove(closing.end);
        }
        for (const auto& [end, other] : model.other) {
          if (end.conn == conn) __builtin_trap();  // a circuit left on the lost connection
        }
        break;
      }
      default: {
        now += std::chrono::milliseconds(in.number(2));
        std::set<CircuitEnd> told;  // both ends of an expired circuit are told
        for (const auto& closing : book.expire(now)) {
          if (told.count(closing.end) != 0) continue;
          auto known = model.other.find(closing.end);
          if (known == model.other.end()) __builtin_trap();  // told of a circuit never open
          told.insert(known->second);
          model.remove(closing.end);
        }
        break;
      }
    }
    if (book.circuits() != model.other.size() / 2 || book.reservations() > limits.max_reservations) __builtin_trap();
  }
  return 0;
}
