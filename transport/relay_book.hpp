#pragma once
/// A relay's bookkeeping (transport/README.md "Relays"): the slots peers reserved, the
/// relayed connections (circuits) between a dialler and a reserved peer, and their limits
/// in time and bytes. Pure: it takes the time and answers with what to send; the
/// transport owns the connections. A circuit has an id on each hop, chosen by whoever
/// sent that hop's CIRCUIT_OPEN (the dialler on its hop, the relay on the reserved peer's).
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "messages/identity/multiaddr.hpp"
#include "messages/result.hpp"

namespace apiary::transport {

/// What a relay grants. Durations and byte counts bound what one peer can make it carry.
struct RelayLimits {
  /// How long a reservation lasts unless the peer renews it (it renews at half).
  std::chrono::milliseconds reservation{std::chrono::minutes(10)};
  /// Bytes the relay carries to and from one reserved peer until its reservation is renewed.
  std::uint64_t reservation_bytes = std::uint64_t{16} << 30;
  /// Peers holding a reservation at once.
  std::size_t max_reservations = 128;
  /// Relayed connections to one reserved peer at once.
  std::size_t max_circuits_per_peer = 16;
  /// How long one relayed connection may last.
  std::chrono::milliseconds circuit{std::chrono::hours(1)};
  /// Bytes one relayed connection may carry, both directions together.
  std::uint64_t circuit_bytes = std::uint64_t{4} << 30;
};

/// One end of a circuit: the connection it travels on, its id there, and whether the
/// other side of that connection opened it (ids are the opener's, as call ids are the
/// caller's: each side numbers the circuits it opens).
struct CircuitEnd {
  PeerKey conn;
  std::uint64_t circuit = 0;
  bool remote_opened = false;
  friend bool operator<(const CircuitEnd& a, const CircuitEnd& b) {
    return std::tie(a.conn, a.circuit, a.remote_opened) < std::tie(b.conn, b.circuit, b.remote_opened);
  }
  friend bool operator==(const CircuitEnd& a, const CircuitEnd& b) {
    return a.conn == b.conn && a.circuit == b.circuit && a.remote_opened == b.remote_opened;
  }
};

/// A circuit to close at one end, and why.
struct CircuitClosing {
  CircuitEnd end;
  Error why;
};

class RelayBook {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RelayBook(RelayLimits limits = {}) : limits_(limits) {}

  [[nodiscard]] const RelayLimits& limits() const { return limits_; }

  /// `peer` (PeerID bytes, proven by connection `conn`) asks for a slot, or renews its own.
  /// Refused (errc::unavailable) when the relay is full; a renewal from another connection
  /// moves the slot there.
  Status reserve(const std::string& peer, const PeerKey& conn, Clock::time_point now);

  /// The peer at `conn` opens its circuit `from_circuit` to PeerID `target`: the reserved
  /// peer's end, numbered `to_circuit` (the relay's id, unused on that connection). Refused
  /// (errc::not_found) without a reservation for `target`, errc::unavailable over the
  /// circuit limit (circuits that outlived an earlier reservation of `target` count), and
  /// errc::protocol for an id already open on either connection.
  Result<CircuitEnd> open(const PeerKey& conn, std::uint64_t from_circuit, const std::string& target,
                          std::uint64_t to_circuit, Clock::time_point now);

  /// A CIRCUIT_DATA of `bytes` (envelope and payload) arrived at end `from`: the end it goes
  /// to. Past a limit, the circuit is closed and both ends are returned to be told why
  /// (errc::too_large); an unknown circuit is errc::not_found.
  struct Forward {
    std::optional<CircuitEnd> to;         ///< pass the frame on to this end
    std::vector<CircuitClosing> closing;  ///< or: close these
  };
  Forward forward(const CircuitEnd& from, std::uint64_t bytes);

  /// End `from` closed its circuit: the other end, to be told (nothing for an unknown one).
  std::optional<CircuitEnd> close(const CircuitEnd& from);

  /// Connection `conn` is gone: its reservation ends, and the other end of every circuit on
  /// it is returned to be told.
  std::vector<CircuitClosing> drop_connection(const PeerKey& conn);

  /// Ends the reservations and circuits whose time is up: the circuits' ends to tell.
  std::vector<CircuitClosing> expire(Clock::time_point now);

  [[nodiscard]] std::size_t reservations() const { return slots_.size(); }
  [[nodiscard]] std::size_t circuits() const { return circuits_.size() / 2; }
  /// Whether `peer` holds a slot.
  [[nodiscard]] bool reserved(const std::string& peer) const { return slots_.count(peer) != 0; }

 private:
  struct Slot {
    PeerKey conn;
    Clock::time_point expires;
    std::uint64_t bytes = 0;  ///< carried for this peer since its reservation (or renewal)
    std::size_t open = 0;     ///< circuits to it
  };
  struct Circuit {
    CircuitEnd other;
    std::string reserved_peer;  ///< whose slot it counts against
    Clock::time_point ends;
    std::shared_ptr<std::uint64_t> bytes;  ///< shared by both ends' entries
  };
  /// Removes the circuit at `end` (both entries); the other end.
  std::optional<CircuitEnd> remove(const CircuitEnd& end);

  RelayLimits limits_;
  std::map<std::string, Slot> slots_;          ///< by reserved PeerID
  std::map<CircuitEnd, Circuit> circuits_;     ///< each circuit twice, once per end
};

}  // namespace apiary::transport
