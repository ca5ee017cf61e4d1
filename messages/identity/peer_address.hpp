#pragma once
/// PeerAddress: where a peer is reached (host, port, optionally its PeerID), parsed once
/// where it enters (a flag, a config file, a DHT record, a caller's listen address) and
/// then carried as a value through core effects, deliveries and the transport. Copies
/// share one immutable representation, so passing an address costs a reference count,
/// and its transport key, multiaddr text and handle suffix are computed once.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <deque>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "messages/identity/multiaddr.hpp"
#include "messages/identity/peer_id.hpp"
#include "messages/result.hpp"

namespace apiary::messages {

class PeerAddress {
 public:
  /// No address: a caller that cannot be reached back, a placeholder (check empty()).
  PeerAddress() = default;

  /// The address `addr` names.
  explicit PeerAddress(Multiaddr addr);

  /// Parses a multiaddr ("/ip4/127.0.0.1/tcp/4100/p2p/12D3KooW..."); the errors of
  /// Multiaddr::parse.
  static Result<PeerAddress> parse(std::string_view multiaddr);

  /// Parses "HOST:PORT" ("[V6]:PORT"), naming `what` in its errors, with an optional peer.
  static Result<PeerAddress> from_host_port(std::string_view text, const char* what = "address",
                                            std::optional<PeerId> peer = std::nullopt);

  /// True for the default-constructed address.
  [[nodiscard]] bool empty() const { return rep_ == nullptr; }

  /// "HOST:PORT" ("[V6]:PORT"): how the transport names a connection to this address
  /// ("" when empty).
  [[nodiscard]] const std::string& key() const;

  /// The canonical multiaddr text ("" when empty): what the DHT stores and hands out.
  [[nodiscard]] const std::string& multiaddr() const;

  /// `handle` addressed to this peer: "<handle>@<PeerID>", or `handle` itself when the
  /// address names no peer (a role alone on its transport serves the plain handle).
  [[nodiscard]] std::string addressed(std::string_view handle) const;

  /// std::hash of the multiaddr text, computed once (0 when empty).
  [[nodiscard]] std::size_t hash() const { return rep_ ? rep_->hash : 0; }

  /// The parts: host, port, the optional PeerID (an empty Multiaddr when empty).
  [[nodiscard]] const Multiaddr& parts() const;
  [[nodiscard]] const std::string& host() const { return parts().host; }
  [[nodiscard]] std::uint16_t port() const { return parts().port; }
  [[nodiscard]] const std::optional<PeerId>& peer() const { return parts().peer; }

  /// This address naming `id` as its peer / naming none.
  [[nodiscard]] PeerAddress with_peer(PeerId id) const;
  [[nodiscard]] PeerAddress without_peer() const;

  /// Ordered and compared by the multiaddr text (the empty address first).
  friend bool operator==(const PeerAddress& a, const PeerAddress& b) {
    return a.rep_ == b.rep_ || a.multiaddr() == b.multiaddr();
  }
  friend bool operator!=(const PeerAddress& a, const PeerAddress& b) { return !(a == b); }
  friend bool operator<(const PeerAddress& a, const PeerAddress& b) { return a.multiaddr() < b.multiaddr(); }
  friend bool operator>(const PeerAddress& a, const PeerAddress& b) { return b < a; }
  friend bool operator<=(const PeerAddress& a, const PeerAddress& b) { return !(b < a); }
  friend bool operator>=(const PeerAddress& a, const PeerAddress& b) { return !(a < b); }
  /// An address equals its canonical multiaddr text.
  friend bool operator==(const PeerAddress& a, std::string_view text) { return a.multiaddr() == text; }
  friend bool operator==(std::string_view text, const PeerAddress& a) { return a.multiaddr() == text; }
  friend bool operator!=(const PeerAddress& a, std::string_view text) { return a.multiaddr() != text; }
  friend bool operator!=(std::string_view text, const PeerAddress& a) { return a.multiaddr() != text; }

 private:
  struct Rep {
    Multiaddr parts;
    std::string multiaddr;
    std::string key;
    std::size_t id_at = std::string::npos;  ///< where the PeerID's text starts in `multiaddr`
    std::size_t hash = 0;                   ///< std::hash of `multiaddr`
  };
  /// `addr` with its canonical text; `id_text`, when given, is the PeerID's base58 text
  /// as parsed (canonical already: spares encoding it again).
  PeerAddress(Multiaddr addr, std::string_view id_text);
  std::shared_ptr<const Rep> rep_;
};

/// The multiaddr texts of `addrs`, in order (for an API that hands out text).
[[nodiscard]] std::vector<std::string> multiaddrs_of(const std::vector<PeerAddress>& addrs);

/// Addresses as they arrive in text (a DHT find result, a gossip message), each distinct
/// text parsed once: a role that meets the same peers again and again looks them up.
/// Bounded: emptied when it outgrows `capacity` entries.
class AddressBook {
 public:
  explicit AddressBook(std::size_t capacity = std::size_t{1} << 14) : capacity_(capacity) {}
  /// The address `text` names; the empty address when it does not parse. The reference
  /// holds until the next call.
  const PeerAddress& parse(std::string_view text);
  /// Knows `address` by its text from now on (one already parsed is not parsed again,
  /// and the address found is this very one).
  void add(const PeerAddress& address);

 private:
  std::size_t capacity_;
  /// By the text they were met as (a view into the address's own text when canonical,
  /// else into `aliases_`), found without building a string.
  std::unordered_map<std::string_view, PeerAddress> known_;
  std::deque<std::string> aliases_;  ///< texts met that are not canonical
};

/// Prints the multiaddr text (tests, logs).
std::ostream& operator<<(std::ostream& os, const PeerAddress& addr);

}  // namespace apiary::messages

template <>
struct std::hash<apiary::messages::PeerAddress> {
  std::size_t operator()(const apiary::messages::PeerAddress& a) const noexcept {
    return a.hash();
  }
};

/// Formats as the multiaddr text.
template <>
struct fmt::formatter<apiary::messages::PeerAddress> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(const apiary::messages::PeerAddress& a, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(a.multiaddr(), ctx);
  }
};
