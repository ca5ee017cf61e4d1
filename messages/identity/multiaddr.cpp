#include "messages/identity/multiaddr.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <vector>

namespace apiary::messages {
namespace {

/// The shape every parse error reminds the reader of.
constexpr const char* expected_form =
    "expected /ip4/A.B.C.D/tcp/PORT or /ip6/ADDR/tcp/PORT, optionally followed by /p2p/PEERID, or a relay's "
    "address followed by /p2p-circuit/p2p/PEERID";

Error parse_error(std::string_view text, const std::string& problem) {
  return make_error(errc::invalid_argument, "multiaddr \"{}\": {}; {}", text.substr(0, 200),
                    problem, expected_form);
}

/// The canonical text of an IPv4 (`ip6` false) or IPv6 address, or nullopt if invalid.
std::optional<std::string> canonical_ip(std::string_view ip, bool ip6) {
  std::string input(ip);  // inet_pton needs a terminated string
  unsigned char binary[sizeof(in6_addr)];
  int family = ip6 ? AF_INET6 : AF_INET;
  if (::inet_pton(family, input.c_str(), binary) != 1) return std::nullopt;
  char text[INET6_ADDRSTRLEN];
  if (::inet_ntop(family, binary, text, sizeof text) == nullptr) return std::nullopt;
  return std::string(text);
}

/// A decimal port of 1-5 digits, at most 65535; nullopt otherwise.
std::optional<std::uint16_t> parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  std::uint32_t value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<std::uint32_t>(c - '0');
  }
  if (value > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

/// Splits "/a/b/c" into {"a", "b", "c"}; the leading '/' is already checked.
std::vector<std::string_view> split_components(std::string_view text) {
  std::vector<std::string_view> parts;
  std::size_t start = 1;
  while (start <= text.size()) {
    std::size_t end = text.find('/', start);
    if (end == std::string_view::npos) end = text.size();
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

}  // namespace

Result<Multiaddr> Multiaddr::parse(std::string_view text) {
  if (text.empty()) return parse_error(text, "the text is empty");
  if (text[0] != '/')
    return parse_error(text, fmt::format("it must start with '/', got '{}'", text[0]));
  auto parts = split_components(text);
  if (parts.size() > 1 && parts.back().empty()) parts.pop_back();  // one trailing '/'
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty())
      return parse_error(text,
                         fmt::format("component {} is empty (\"//\" or a lone \"/\")", i + 1));
  }

  // /ip4/ADDR or /ip6/ADDR
  Multiaddr addr;
  if (parts[0] != "ip4" && parts[0] != "ip6") {
    return parse_error(text, fmt::format("unknown protocol '{}' (apiary supports ip4 and ip6; "
                                         "resolve DNS names first)",
                                         parts[0]));
  }
  addr.is_ip6 = parts[0] == "ip6";
  if (parts.size() < 2)
    return parse_error(text, fmt::format("the address after /{} is missing", parts[0]));
  auto host = canonical_ip(parts[1], addr.is_ip6);
  if (!host) return parse_error(text, fmt::format("bad {} address '{}'", parts[0], parts[1]));
  addr.host = std::move(*host);

  // /tcp/PORT
  if (parts.size() < 3)
    return parse_error(
        text, fmt::format("the /tcp/PORT part after /{}/{} is missing", parts[0], parts[1]));
  if (parts[2] != "tcp")
    return parse_error(text, fmt::format("unknown protocol '{}' after the address (apiary supports "
                                         "tcp only)",
                                         parts[2]));
  if (parts.size() < 4) return parse_error(text, "the port after /tcp is missing");
  auto port = parse_port(parts[3]);
  if (!port)
    return parse_error(text,
                       fmt::format("bad port '{}' (expected a number from 0 to 65535)", parts[3]));
  addr.port = *port;

  // optional /p2p/PEERID, which may be a relay's: /p2p/RELAY/p2p-circuit[/p2p/PEERID]
  auto peer_at = [&](std::size_t i) -> Result<PeerId> {
    if (parts[i] != "p2p" && parts[i] != "ipfs")
      return parse_error(text, fmt::format("unexpected '{}' after {} (only /p2p/PEERID may follow)", parts[i],
                                           i == 4 ? "the port" : "/p2p-circuit"));
    if (parts.size() < i + 2)
      return parse_error(text, fmt::format("the peer id after /{} is missing", parts[i]));
    auto id = PeerId::from_string(parts[i + 1]);
    if (!id)
      return parse_error(text, fmt::format("bad peer id '{}' ({})", parts[i + 1], id.error().message));
    return id;
  };
  std::size_t used = 4;
  if (parts.size() > 4) {
    if (parts[4] == "p2p-circuit")
      return parse_error(text, "a relayed address names its relay's PeerID before /p2p-circuit "
                               "(/p2p/RELAY/p2p-circuit/p2p/PEERID)");
    auto id = peer_at(4);
    if (!id) return id.error();
    addr.peer = std::move(*id);
    used = 6;
  }
  if (parts.size() > 6 && parts[6] == "p2p-circuit") {
    addr.relay = std::move(addr.peer);
    addr.peer.reset();
    used = 7;
    if (parts.size() > 7) {
      auto id = peer_at(7);
      if (!id) return id.error();
      addr.peer = std::move(*id);
      used = 9;
    }
  }
  if (parts.size() > used) {
    std::string_view rest =
        text.substr(static_cast<std::size_t>(parts[used].data() - text.data()) - 1);
    return parse_error(text, fmt::format("unexpected trailing '{}' after the peer id", rest));
  }
  return addr;
}

Result<Multiaddr> Multiaddr::from_ip(std::string_view ip, std::uint16_t port,
                                     std::optional<PeerId> peer) {
  bool ip6 = false;
  auto host = canonical_ip(ip, false);
  if (!host) {
    host = canonical_ip(ip, true);
    ip6 = true;
  }
  if (!host) {
    return make_error(errc::invalid_argument,
                      "multiaddr: expected an IPv4 or IPv6 address such as 127.0.0.1 or ::1, got "
                      "'{}'; resolve host names first",
                      ip.substr(0, 200));
  }
  return Multiaddr{std::move(*host), ip6, port, std::move(peer), std::nullopt};
}

Result<Multiaddr> Multiaddr::from_host_port(std::string_view text, const char* what, std::optional<PeerId> peer) {
  if (const auto slash = text.find('/'); slash != std::string_view::npos) {
    // A relayed key: the relay's HOST:PORT, then /p2p/RELAY/p2p-circuit/p2p/PEER.
    auto relay = from_host_port(text.substr(0, slash), what);
    if (!relay) return relay.error();
    auto whole = parse(relay->without_peer().to_string() + std::string(text.substr(slash)));
    if (!whole) return make_error(whole.error().code, "{}: {}", what, whole.error().message);
    if (!whole->relayed()) {
      return make_error(errc::invalid_argument, "{}: expected HOST:PORT or HOST:PORT/p2p/RELAY/p2p-circuit/p2p/PEER, "
                        "got '{}'", what, text.substr(0, 200));
    }
    if (peer && !whole->peer) {
      whole->peer = std::move(peer);  // a relay's listen address: the peer behind it is the one named
    } else if (peer && whole->peer != peer) {
      return make_error(errc::invalid_argument, "{}: the relayed address '{}' names another peer than {}", what,
                        text.substr(0, 200), peer->to_string());
    }
    return whole;
  }
  const auto colon = text.rfind(':');
  const std::string_view port = colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
  if (colon == std::string_view::npos || colon == 0 || port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string_view::npos || std::stoul(std::string(port)) > 65535) {
    return make_error(errc::invalid_argument, "{}: expected HOST:PORT such as 127.0.0.1:7000, got '{}'", what,
                      text.substr(0, 200));
  }
  std::string_view host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  auto m = from_ip(host, static_cast<std::uint16_t>(std::stoul(std::string(port))), std::move(peer));
  if (!m) return make_error(m.error().code, "{}: {}", what, m.error().message);
  return m;
}

std::string Multiaddr::host_port() const {
  std::string key = is_ip6 ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
  if (relay) {
    key += "/p2p/" + relay->to_string() + "/p2p-circuit";
    if (peer) key += "/p2p/" + peer->to_string();
  }
  return key;
}

std::string Multiaddr::to_string() const {
  std::string text = fmt::format("/{}/{}/tcp/{}", is_ip6 ? "ip6" : "ip4", host, port);
  if (relay) text += "/p2p/" + relay->to_string() + "/p2p-circuit";
  if (peer) text += "/p2p/" + peer->to_string();
  return text;
}

Multiaddr Multiaddr::with_peer(PeerId id) const {
  Multiaddr copy = *this;
  copy.peer = std::move(id);
  return copy;
}

Multiaddr Multiaddr::without_peer() const {
  Multiaddr copy = *this;
  copy.peer.reset();
  return copy;
}

}  // namespace apiary::messages
