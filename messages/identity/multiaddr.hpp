#pragma once
/// Multiaddr: a node's network address in libp2p's text form,
/// /ip4/127.0.0.1/tcp/4100/p2p/12D3KooW... or /ip6/::1/tcp/4100 (the /p2p part is optional).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "messages/identity/peer_id.hpp"
#include "messages/result.hpp"

namespace apiary {

/// How a transport names the other side of a connection: "host:port" ("[v6]:port") for
/// one it dialled (Multiaddr::host_port()), "host:port/p2p/RELAY/p2p-circuit/p2p/PEER" for
/// one it dialled through the relay at host:port, "inbound:N" for one a peer opened to it.
using PeerKey = std::string;

}  // namespace apiary

namespace apiary::messages {

/// A TCP address over IPv4 or IPv6, optionally naming the peer that listens there; or a
/// relayed address: the relay's TCP address and PeerID, then /p2p-circuit and the PeerID
/// of the peer reached through it (libp2p's circuit relay form).
struct Multiaddr {
  /// The IP address in canonical text form (inet_ntop): "127.0.0.1", "::1".
  std::string host;
  /// True when `host` is an IPv6 address.
  bool is_ip6 = false;
  /// TCP port (0 asks the system for any free port when listening).
  std::uint16_t port = 0;
  /// The peer listening there, from a trailing /p2p/<PeerID>; for a relayed address, the
  /// peer reached through the relay.
  std::optional<PeerId> peer;
  /// A relayed address (/p2p/RELAY/p2p-circuit[/p2p/PEER]): the relay's PeerID; host and
  /// port are the relay's.
  std::optional<PeerId> relay;

  /// Whether this is a relayed address.
  [[nodiscard]] bool relayed() const { return relay.has_value(); }

  /// Parses /ip4/A.B.C.D/tcp/PORT or /ip6/ADDR/tcp/PORT, optionally followed by
  /// /p2p/PEERID (or the older /ipfs/PEERID), which may be a relay's followed by
  /// /p2p-circuit and optionally /p2p/PEERID. One trailing '/' is accepted. The host is
  /// stored in canonical form. Errors: errc::invalid_argument whose message names the
  /// bad part (empty text, missing leading '/', unknown protocol, bad IP, bad port,
  /// missing /tcp part, bad PeerID, trailing components).
  static Result<Multiaddr> parse(std::string_view text);

  /// The address of `ip` (IPv4 or IPv6 text, canonicalised) and `port`.
  /// Errors: errc::invalid_argument when `ip` is not an IP address.
  static Result<Multiaddr> from_ip(std::string_view ip, std::uint16_t port,
                                   std::optional<PeerId> peer = std::nullopt);

  /// Parses "HOST:PORT" ("[V6]:PORT" for IPv6; an IPv6 address without brackets takes
  /// its last ':' as the port's), the form a transport's peer keys and listen addresses
  /// have, or a relayed key ("HOST:PORT/p2p/RELAY/p2p-circuit/p2p/PEER"; a relay's listen
  /// address "HOST:PORT/p2p/RELAY/p2p-circuit" with `peer` names that peer behind it). Errors: errc::invalid_argument naming `what` (a flag, a field) and the text:
  /// no port, a port that is not a number in 0..65535, a host that is not an IP address.
  static Result<Multiaddr> from_host_port(std::string_view text, const char* what = "address",
                                          std::optional<PeerId> peer = std::nullopt);

  /// The canonical text: "/ip4/127.0.0.1/tcp/4100/p2p/12D3KooW...".
  [[nodiscard]] std::string to_string() const;

  /// "HOST:PORT" ("[V6]:PORT" for IPv6): a transport's key of this address; for a relayed
  /// one "HOST:PORT/p2p/RELAY/p2p-circuit/p2p/PEER" (the relay's key, then the circuit).
  [[nodiscard]] std::string host_port() const;

  /// This address naming `id` as its peer.
  [[nodiscard]] Multiaddr with_peer(PeerId id) const;

  /// This address without a peer (a relayed one keeps its relay: /p2p/RELAY/p2p-circuit).
  [[nodiscard]] Multiaddr without_peer() const;

  friend bool operator==(const Multiaddr& a, const Multiaddr& b) {
    return a.host == b.host && a.is_ip6 == b.is_ip6 && a.port == b.port && a.peer == b.peer && a.relay == b.relay;
  }
  friend bool operator!=(const Multiaddr& a, const Multiaddr& b) { return !(a == b); }
};

}  // namespace apiary::messages
