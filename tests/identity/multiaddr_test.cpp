#include "messages/identity/multiaddr.hpp"

#include <catch2/catch.hpp>

using apiary::errc;
using apiary::messages::Multiaddr;
using apiary::messages::PeerId;

namespace {

constexpr const char* peer_text = "12D3KooWQK1wnefoLrcVHbbnf5tLzbopUd3K3bFAoJpA7YJgL5pV";

}  // namespace

TEST_CASE("multiaddr: canonical texts round-trip", "[identity][multiaddr]") {
  const std::string texts[] = {
      "/ip4/127.0.0.1/tcp/4100",
      "/ip4/0.0.0.0/tcp/0",
      "/ip4/255.255.255.255/tcp/65535",
      std::string("/ip4/10.1.2.3/tcp/31337/p2p/") + peer_text,
      "/ip6/::1/tcp/4100",
      "/ip6/2001:db8::8a2e:370:7334/tcp/443",
      std::string("/ip6/fe80::1/tcp/9/p2p/") + peer_text,
      "/ip4/192.168.0.7/tcp/8080/p2p/QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N",
  };
  for (const auto& text : texts) {
    CAPTURE(text);
    auto addr = Multiaddr::parse(text);
    REQUIRE(addr.ok());
    CHECK(addr->to_string() == text);
    auto again = Multiaddr::parse(addr->to_string());
    REQUIRE(again.ok());
    CHECK(*again == *addr);
  }
}

TEST_CASE("multiaddr: fields of a parsed address", "[identity][multiaddr]") {
  auto addr = Multiaddr::parse(std::string("/ip4/127.0.0.1/tcp/4100/p2p/") + peer_text);
  REQUIRE(addr.ok());
  CHECK(addr->host == "127.0.0.1");
  CHECK_FALSE(addr->is_ip6);
  CHECK(addr->port == 4100);
  REQUIRE(addr->peer.has_value());
  CHECK(addr->peer->to_string() == peer_text);

  auto v6 = Multiaddr::parse("/ip6/::1/tcp/65535");
  REQUIRE(v6.ok());
  CHECK(v6->host == "::1");
  CHECK(v6->is_ip6);
  CHECK(v6->port == 65535);
  CHECK_FALSE(v6->peer.has_value());
}

TEST_CASE("multiaddr: non-canonical input prints canonically", "[identity][multiaddr]") {
  struct pair {
    std::string in;
    std::string out;
  };
  const pair pairs[] = {
      {"/ip6/0:0:0:0:0:0:0:1/tcp/4100", "/ip6/::1/tcp/4100"},
      {"/ip6/2001:DB8:0:0:0:0:0:1/tcp/1", "/ip6/2001:db8::1/tcp/1"},
      {"/ip4/127.0.0.1/tcp/080", "/ip4/127.0.0.1/tcp/80"},
      {"/ip4/127.0.0.1/tcp/4100/", "/ip4/127.0.0.1/tcp/4100"},
      {std::string("/ip4/1.2.3.4/tcp/5/ipfs/") + peer_text,
       std::string("/ip4/1.2.3.4/tcp/5/p2p/") + peer_text},
  };
  for (const auto& p : pairs) {
    CAPTURE(p.in);
    auto addr = Multiaddr::parse(p.in);
    REQUIRE(addr.ok());
    CHECK(addr->to_string() == p.out);
  }
}

TEST_CASE("multiaddr: each malformed text names its bad part", "[identity][multiaddr]") {
  struct bad {
    std::string text;
    std::string mentions;
  };
  const bad cases[] = {
      {"", "empty"},
      {"ip4/127.0.0.1/tcp/4100", "must start with '/'"},
      {"/", "component 1 is empty"},
      {"/ip4//tcp/4100", "component 2 is empty"},
      {"/dns4/example.com/tcp/80", "unknown protocol 'dns4'"},
      {"/ip4", "address after /ip4 is missing"},
      {"/ip4/300.1.2.3/tcp/4100", "bad ip4 address '300.1.2.3'"},
      {"/ip4/::1/tcp/4100", "bad ip4 address '::1'"},
      {"/ip6/127.0.0.1/tcp/4100", "bad ip6 address '127.0.0.1'"},
      {"/ip6/12345::1/tcp/4100", "bad ip6 address '12345::1'"},
      {"/ip4/127.0.0.1", "/tcp/PORT part after /ip4/127.0.0.1 is missing"},
      {"/ip4/127.0.0.1/udp/4100", "unknown protocol 'udp'"},
      {"/ip4/127.0.0.1/tcp", "port after /tcp is missing"},
      {"/ip4/127.0.0.1/tcp/http", "bad port 'http'"},
      {"/ip4/127.0.0.1/tcp/-1", "bad port '-1'"},
      {"/ip4/127.0.0.1/tcp/65536", "bad port '65536'"},
      {"/ip4/127.0.0.1/tcp/99999999999", "bad port '99999999999'"},
      {"/ip4/127.0.0.1/tcp/4100/quic", "unexpected 'quic' after the port"},
      {"/ip4/127.0.0.1/tcp/4100/p2p", "peer id after /p2p is missing"},
      {"/ip4/127.0.0.1/tcp/4100/p2p/12D3KooW0bad", "bad peer id '12D3KooW0bad'"},
      {"/ip4/127.0.0.1/tcp/4100/p2p/abc", "bad peer id 'abc'"},
      {std::string("/ip4/127.0.0.1/tcp/4100/p2p/") + peer_text + "/ws/x",
       "unexpected trailing '/ws/x'"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    auto r = Multiaddr::parse(c.text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::invalid_argument);
    CHECK_THAT(r.error().message, Catch::Contains(c.mentions));
    CHECK_THAT(r.error().message, Catch::Contains("expected /ip4/A.B.C.D/tcp/PORT"));
  }
}

TEST_CASE("multiaddr: with_peer, without_peer and from_ip", "[identity][multiaddr]") {
  auto peer = PeerId::from_string(peer_text);
  REQUIRE(peer.ok());
  auto addr = Multiaddr::parse("/ip4/127.0.0.1/tcp/4100");
  REQUIRE(addr.ok());

  Multiaddr named = addr->with_peer(*peer);
  CHECK(named.to_string() == std::string("/ip4/127.0.0.1/tcp/4100/p2p/") + peer_text);
  CHECK_FALSE(addr->peer.has_value());  // the original is unchanged
  CHECK(named.without_peer() == *addr);
  CHECK(named != *addr);

  auto v4 = Multiaddr::from_ip("127.0.0.1", 4100, *peer);
  REQUIRE(v4.ok());
  CHECK(*v4 == named);
  auto v6 = Multiaddr::from_ip("0::1", 7);
  REQUIRE(v6.ok());
  CHECK(v6->is_ip6);
  CHECK(v6->to_string() == "/ip6/::1/tcp/7");
  auto name = Multiaddr::from_ip("localhost", 7);
  REQUIRE_FALSE(name.ok());
  CHECK(name.error().code == errc::invalid_argument);
  CHECK_THAT(name.error().message, Catch::Contains("'localhost'"));
}

TEST_CASE("HOST:PORT parses once into a multiaddr and back with IPv6 in brackets and bad forms named", "[identity]") {
  auto v4 = Multiaddr::from_host_port("127.0.0.1:4100");
  REQUIRE(v4.ok());
  CHECK(v4->to_string() == "/ip4/127.0.0.1/tcp/4100");
  CHECK(v4->host_port() == "127.0.0.1:4100");
  auto v6 = Multiaddr::from_host_port("[::1]:7");
  REQUIRE(v6.ok());
  CHECK(v6->is_ip6);
  CHECK(v6->to_string() == "/ip6/::1/tcp/7");
  CHECK(v6->host_port() == "[::1]:7");
  CHECK(Multiaddr::parse("/ip6/::1/tcp/7")->host_port() == "[::1]:7");
  for (const char* bad : {"", "127.0.0.1", ":4100", "127.0.0.1:", "127.0.0.1:x1", "127.0.0.1:70000", "host:4100"}) {
    auto r = Multiaddr::from_host_port(bad, "--peers");
    INFO(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::invalid_argument);
    CHECK_THAT(r.error().message, Catch::StartsWith("--peers: "));
  }
}

TEST_CASE("relayed multiaddrs name the relay and the peer behind it and round-trip as text and transport keys",
          "[identity][multiaddr]") {
  constexpr const char* relay_text = "12D3KooWHNRZX52bPKCkbKQVVT5iibYhkbamMy7hT9Vmoy34762t";
  const std::string text =
      std::string("/ip4/10.9.0.1/tcp/4400/p2p/") + relay_text + "/p2p-circuit/p2p/" + peer_text;
  auto addr = Multiaddr::parse(text);
  REQUIRE(addr.ok());
  CHECK(addr->relayed());
  CHECK(addr->host == "10.9.0.1");
  CHECK(addr->port == 4400);
  REQUIRE(addr->relay);
  CHECK(addr->relay->to_string() == relay_text);
  REQUIRE(addr->peer);
  CHECK(addr->peer->to_string() == peer_text);
  CHECK(addr->to_string() == text);
  const std::string key = addr->host_port();
  CHECK(key == std::string("10.9.0.1:4400/p2p/") + relay_text + "/p2p-circuit/p2p/" + peer_text);
  auto back = Multiaddr::from_host_port(key, "key");
  REQUIRE(back.ok());
  CHECK(*back == *addr);

  // Without the peer: the address a peer listens on through the relay.
  const Multiaddr listening = addr->without_peer();
  CHECK(listening.relayed());
  CHECK(listening.to_string() == std::string("/ip4/10.9.0.1/tcp/4400/p2p/") + relay_text + "/p2p-circuit");
  auto parsed = Multiaddr::parse(listening.to_string());
  REQUIRE(parsed.ok());
  CHECK(*parsed == listening);
  CHECK(listening.with_peer(*addr->peer) == *addr);

  // A plain address is not relayed, and its key has no circuit.
  auto plain = Multiaddr::parse(std::string("/ip4/10.9.0.1/tcp/4400/p2p/") + relay_text);
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->relayed());
  CHECK(plain->host_port() == "10.9.0.1:4400");
}

TEST_CASE("malformed relayed multiaddrs and keys name their bad part", "[identity][multiaddr]") {
  const std::string relay = std::string("/ip4/10.9.0.1/tcp/4400/p2p/") + peer_text;
  struct bad {
    std::string text;
    std::string mentions;
  };
  const bad cases[] = {
      {"/ip4/10.9.0.1/tcp/4400/p2p-circuit/p2p/" + std::string(peer_text), "names its relay's PeerID before"},
      {relay + "/p2p-circuit/p2p", "peer id after /p2p is missing"},
      {relay + "/p2p-circuit/p2p/abc", "bad peer id 'abc'"},
      {relay + "/p2p-circuit/tcp/5", "unexpected 'tcp' after /p2p-circuit"},
      {relay + "/p2p-circuit/p2p/" + peer_text + "/x", "unexpected trailing '/x'"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    auto r = Multiaddr::parse(c.text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::invalid_argument);
    CHECK_THAT(r.error().message, Catch::Contains(c.mentions));
  }
  auto key = Multiaddr::from_host_port("10.9.0.1:4400/p2p/" + std::string(peer_text), "the key");
  REQUIRE_FALSE(key.ok());
  CHECK_THAT(key.error().message, Catch::Contains("the key: expected HOST:PORT or HOST:PORT/p2p/RELAY"));
  auto garbage = Multiaddr::from_host_port("10.9.0.1:4400/zzz", "the key");
  REQUIRE_FALSE(garbage.ok());
  CHECK_THAT(garbage.error().message, Catch::Contains("unexpected 'zzz'"));
}
