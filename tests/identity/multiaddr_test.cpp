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
