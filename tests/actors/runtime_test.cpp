// apiary::Runtime over UCX in one process: what a process has once (actor system,
// gateway, identity, DHT epoch), shared by the facades on it; a second identity attached
// to the same gateway; bad options refused with the option named.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>

#include "api/dht.hpp"
#include "api/runtime.hpp"
#include "core/dht/msgpack_value.hpp"

using namespace apiary;
using namespace std::chrono_literals;

TEST_CASE("a runtime listens where it is told, as its own PeerID, on DHT time", "[runtime]") {
  auto rt = Runtime::start(RuntimeOptions{});
  REQUIRE(rt.ok());
  const Runtime& r = **rt;
  CHECK(r.address().host == "127.0.0.1");
  CHECK(r.address().port != 0);
  REQUIRE(r.address().peer.has_value());
  CHECK(*r.address().peer == r.peer_id());
  CHECK(!r.shares_gateway());
  const double unix_now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  CHECK(std::abs(r.dht_time() - unix_now) < 1.0);
  CHECK(std::abs(r.dht_time() - Dht::now()) < 1.0);
}

TEST_CASE("DHT nodes on runtimes, one of them attached to another's gateway, find each other's values",
          "[runtime]") {
  auto a = Runtime::start(RuntimeOptions{});
  auto b = Runtime::start(RuntimeOptions{});
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  // A second identity behind a's gateway: addressed by its own PeerID.
  auto c = Runtime::attach((*a)->system(), (*a)->gateway());
  REQUIRE(c.ok());
  CHECK((*c)->shares_gateway());
  CHECK((*c)->peer_id() != (*a)->peer_id());
  CHECK((*c)->address().port == (*a)->address().port);
  CHECK((*c)->dht_epoch() == Approx((*a)->dht_epoch()).margin(0.5));

  DhtOptions opts;
  opts.node.wait_timeout = 1s;
  auto da = Dht::start(**a, opts);
  REQUIRE(da.ok());
  CHECK((*da)->address() == (*a)->address());
  CHECK(&(*da)->runtime() == a->get());
  opts.initial_peers = (*da)->visible_addrs();
  auto db = Dht::start(**b, opts);
  REQUIRE(db.ok());
  auto dc = Dht::start(**c, opts);
  REQUIRE(dc.ok());

  const auto key = DhtKey::str("runtime-key");
  auto stored = (*db)->store(key, core::dht::pack_str("v"), Dht::now() + 60).get();
  REQUIRE(stored.ok());
  CHECK(*stored);
  for (Dht* reader : {da->get(), dc->get()}) {
    auto got = reader->get(key).get();
    REQUIRE(got.ok());
    REQUIRE(got->has_value());
    CHECK(std::get<std::string>((*got)->value) == core::dht::pack_str("v"));
  }
}

TEST_CASE("a runtime refuses a bad listen address, a missing identity file, a missing gateway and a zero relay limit",
          "[runtime]") {
  RuntimeOptions bad;
  bad.listen = "/ip4/127.0.0.1/udp/1";
  auto r = Runtime::start(bad);
  REQUIRE(!r.ok());
  CHECK(r.error().message.find("/ip4/127.0.0.1/udp/1") != std::string::npos);

  RuntimeOptions missing;
  missing.identity_file = "/nonexistent/apiary.key";
  r = Runtime::start(missing);
  REQUIRE(!r.ok());
  CHECK(r.error().code == errc::not_found);
  CHECK(r.error().message.find("apiary identity create") != std::string::npos);

  auto owner = Runtime::start(RuntimeOptions{});
  REQUIRE(owner.ok());
  auto none = Runtime::attach((*owner)->system(), nullptr);
  REQUIRE(!none.ok());
  CHECK(none.error().message.find("gateway") != std::string::npos);

  RuntimeOptions relay;
  relay.relay_service = true;
  relay.relay_limits.circuit_bytes = 0;
  r = Runtime::start(relay);
  REQUIRE(!r.ok());
  CHECK(r.error().code == errc::invalid_argument);
  CHECK(r.error().message.find("circuit_bytes must be positive") != std::string::npos);
  relay.relay_service = false;  // limits only matter to a relay
  CHECK(Runtime::start(relay).ok());
}
