// The DHT node core (core/dht/node.hpp) running under real actors and the real gateway:
// several nodes in one process store and get through each other, over the in-process
// transport (actors directly) and over UCX (through apiary::Dht).
#include <catch2/catch.hpp>

#include <random>

#include <caf/all.hpp>

#include "actors/dht/dht_actor.hpp"
#include "actors/type_ids.hpp"
#include "api/dht.hpp"
#include "core/dht/msgpack_value.hpp"
#include "core/dht/ownership_validator.hpp"
#include "tests/support/test_system.hpp"
#include "tests/support/peer_addr.hpp"
#include "tests/support/authority_file.hpp"

using apiary::test::operator""_addr;
using namespace apiary;
using namespace std::chrono_literals;
using core::dht::FoundValue;
using core::dht::Node;
using core::dht::OpId;
using core::dht::OpResult;

namespace {

/// Waits for an operation's result (the node bounds every operation by its deadlines).
OpResult wait(std::future<OpResult> f) {
  REQUIRE(f.wait_for(30s) == std::future_status::ready);
  return f.get();
}

/// The value of an API call's result (fails the test on an error).
template <class T>
T value_of(std::future<Result<T>> f) {
  auto r = f.get();
  REQUIRE(r.ok());
  return std::move(*r);
}

/// The value a get found (fails the test on an error or when it found none).
FoundValue found(std::future<Result<std::optional<FoundValue>>> f) {
  auto got = value_of(std::move(f));
  REQUIRE(got.has_value());
  return std::move(*got);
}

/// `n` DHT nodes on in-process gateways, each bootstrapped from the first, on hosts of `kind`.
struct LocalSwarm {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::vector<std::shared_ptr<actors::Gateway>> gws;
  std::vector<actors::RoleHost> nodes;
  std::vector<core::PeerAddr> addrs;

  LocalSwarm(int n, core::dht::NodeConfig config, actors::HostKind kind = actors::HostKind::actor) {
    sys = std::make_unique<caf::actor_system>(testing::no_poll_sleeps(cfg));
    std::mt19937_64 rng(42);
    for (int i = 0; i < n; ++i) {
      gws.push_back(testing::start_local_gateway(*sys));
      const auto& a = gws.back()->address();
      // The in-process transport names callers by listen address alone (no PeerID).
      addrs.push_back(actors::peer_addr_of(a, ""));
      REQUIRE(!addrs.back().empty());
      actors::DhtActorConfig ac;
      ac.id = core::dht::NodeId::random(rng);
      ac.self_addr = addrs.back();
      ac.node = config;
      ac.host = kind;
      nodes.push_back(actors::spawn_dht_actor(*sys, gws.back(), ac));
      std::vector<core::PeerAddr> initial;
      if (i > 0) initial.push_back(addrs[0]);
      auto boot = wait(actors::submit_dht_op(
          nodes.back(), [initial](Node& node, core::TimePoint now, OpId op) { return node.start(now, op, initial); }));
      REQUIRE(boot.status.ok());
    }
  }
  ~LocalSwarm() {
    for (std::size_t i = 0; i < nodes.size(); ++i) actors::stop_dht_actor(*gws[i], nodes[i], {}, false);
    for (auto& g : gws) g->stop();
  }

  OpResult store(int at, std::vector<core::dht::StoreItem> items) {
    return wait(actors::submit_dht_op(
        nodes[at], [items](Node& node, core::TimePoint now, OpId op) { return node.store(now, op, items); }));
  }
  OpResult get(int at, const core::dht::NodeId& key, bool latest) {
    return wait(actors::submit_dht_op(nodes[at], [key, latest](Node& node, core::TimePoint now, OpId op) {
      return node.get(now, op, {key}, latest);
    }));
  }
  /// Nodes whose main storage holds `key`.
  int copies(const core::dht::NodeId& key) {
    int n = 0;
    for (auto& a : nodes) {
      auto has = actors::look_at_dht<bool>(
          a, [key](Node& node, core::TimePoint now) { return node.protocol().storage().contains(node.dht_time(now), key); });
      REQUIRE(has.ok());
      n += *has ? 1 : 0;
    }
    return n;
  }
};

double unix_now() { return Dht::now(); }

/// A fresh Ed25519 key; fails the test when none can be made.
messages::Ed25519PrivateKey new_key() {
  auto key = messages::Ed25519PrivateKey::generate();
  REQUIRE(key.ok());
  return *key;
}

}  // namespace

TEST_CASE("peer_addr_of names a caller by its listen address and PeerID", "[actor]") {
  CHECK(actors::peer_addr_of("", "").empty());
  CHECK(actors::peer_addr_of("127.0.0.1:4100", "") == "/ip4/127.0.0.1/tcp/4100"_addr);
  CHECK(actors::peer_addr_of("[::1]:4100", "") == "/ip6/::1/tcp/4100"_addr);
  CHECK(actors::peer_addr_of("127.0.0.1:notaport", "").empty());
  const auto id = messages::PeerId::from_public_key(new_key().public_key());
  CHECK(actors::peer_addr_of("127.0.0.1:4100", id.bytes()) == "/ip4/127.0.0.1/tcp/4100/p2p/" + id.to_string());
  CHECK(actors::peer_addr_of("127.0.0.1:4100", "garbage") == "/ip4/127.0.0.1/tcp/4100"_addr);
}

TEST_CASE("DHT actors over the in-process transport store, get and merge subkeys", "[actor]") {
  core::dht::NodeConfig config;
  config.protocol.num_replicas = 3;
  config.cache_locally = false;
  const auto kind = GENERATE(actors::HostKind::actor, actors::HostKind::transport_thread);
  INFO("host " << actors::host_kind_name(kind));
  LocalSwarm swarm(5, config, kind);
  const double expiration = unix_now() + 60;

  SECTION("a value stored from one node is found from another, on num_replicas nodes") {
    const auto key = core::dht::NodeId::of_str_key("key");
    auto stored = swarm.store(1, {{key, core::dht::k_subkey_regular, core::dht::pack_str("value"), expiration}});
    REQUIRE(stored.status.ok());
    REQUIRE(stored.stored.size() == 1);
    CHECK(stored.stored[0]);
    CHECK(stored.replicas[0] == 3);
    CHECK(swarm.copies(key) == 3);
    for (int at : {0, 4}) {
      auto got = swarm.get(at, key, false);
      REQUIRE(got.status.ok());
      REQUIRE(got.found.size() == 1);
      REQUIRE(got.found[0].has_value());
      CHECK(std::get<std::string>(got.found[0]->value) == core::dht::pack_str("value"));
      CHECK(got.found[0]->expiration == Approx(expiration));
    }
  }

  SECTION("a missing key is not found") {
    auto got = swarm.get(2, core::dht::NodeId::of_str_key("nobody stored this"), true);
    REQUIRE(got.status.ok());
    REQUIRE(got.found.size() == 1);
    CHECK_FALSE(got.found[0].has_value());
  }

  SECTION("subkeys stored from two nodes are merged by a latest get") {
    const auto key = core::dht::NodeId::of_str_key("dictionary");
    auto a = swarm.store(1, {{key, core::dht::pack_str("a"), core::dht::pack_str("from 1"), expiration}});
    auto b = swarm.store(3, {{key, core::dht::pack_str("b"), core::dht::pack_str("from 3"), expiration + 1}});
    REQUIRE(a.status.ok());
    REQUIRE(b.status.ok());
    CHECK(a.stored[0]);
    CHECK(b.stored[0]);
    auto got = swarm.get(4, key, true);
    REQUIRE(got.status.ok());
    REQUIRE(got.found[0].has_value());
    const auto* dict = std::get_if<FoundValue::Dictionary>(&got.found[0]->value);
    REQUIRE(dict != nullptr);
    REQUIRE(dict->size() == 2);
    CHECK(dict->at(core::dht::pack_str("a")).value == core::dht::pack_str("from 1"));
    CHECK(dict->at(core::dht::pack_str("b")).value == core::dht::pack_str("from 3"));
    CHECK(got.found[0]->expiration == Approx(expiration + 1));
  }

  SECTION("an older value does not replace a newer one") {
    const auto key = core::dht::NodeId::of_str_key("newest wins");
    auto newer = swarm.store(0, {{key, core::dht::k_subkey_regular, core::dht::pack_str("new"), expiration + 10}});
    auto older = swarm.store(2, {{key, core::dht::k_subkey_regular, core::dht::pack_str("old"), expiration}});
    CHECK(newer.stored[0]);
    CHECK_FALSE(older.stored[0]);
    auto got = swarm.get(4, key, true);
    REQUIRE(got.found[0].has_value());
    CHECK(std::get<std::string>(got.found[0]->value) == core::dht::pack_str("new"));
  }
}

TEST_CASE("Dht nodes over UCX share one actor system, and a missing initial peer is a clear error", "[actor]") {
  testing::TestSystem t;
  auto& sys = t.sys;
  DhtOptions first;
  first.system = &sys;
  first.node.wait_timeout = 1s;
  auto a = Dht::start(first);
  REQUIRE(a.ok());
  REQUIRE((*a)->visible_addrs().size() == 1);
  CHECK((*a)->visible_addrs()[0].find("/p2p/" + (*a)->peer_id().to_string()) != std::string::npos);
  DhtOptions rest = first;
  rest.initial_peers = (*a)->visible_addrs();
  auto b = Dht::start(rest);
  REQUIRE(b.ok());
  rest.client_mode = true;
  auto client = Dht::start(rest);
  REQUIRE(client.ok());
  CHECK((*client)->visible_addrs().empty());

  const double expiration = Dht::now() + 30;
  CHECK(value_of((*client)->store(DhtKey::str("mykey"), core::dht::pack_str("hello"), expiration)));
  CHECK(std::get<std::string>(found((*b)->get(DhtKey::str("mykey"))).value) == core::dht::pack_str("hello"));
  auto missing = (*a)->get(DhtKey::bytes("key"), true).get();
  REQUIRE(missing.ok());
  CHECK_FALSE(missing->has_value());

  // The client is never in a routing table; a and b know each other.
  auto sa = (*a)->stats();
  REQUIRE(sa.ok());
  CHECK(sa->routing_table == 1);
  CHECK(sa->node.requests_served > 0);

  // A peer that is not there: the error names it, and comes back after the deadline.
  DhtOptions lonely = first;
  const std::string gone = "/ip4/127.0.0.1/tcp/1/p2p/" + (*a)->peer_id().to_string();
  lonely.initial_peers = {gone};
  auto failed = Dht::start(lonely);
  REQUIRE_FALSE(failed.ok());
  INFO(failed.error().what());
  CHECK_THAT(failed.error().message, Catch::Contains("/ip4/127.0.0.1/tcp/1"));

  (*client)->stop();
  (*client)->stop();  // idempotent
  auto after = (*client)->get(DhtKey::str("mykey")).get();
  CHECK_FALSE(after.ok());
}

TEST_CASE("many Dht share one gateway: each is reached by its own PeerID, also from other gateways", "[actor]") {
  testing::TestSystem t;
  auto& sys = t.sys;
  actors::GatewayConfig gc;
  const auto gateway_key = new_key();
  gc.transport.identity = gateway_key;  // proves the gateway's PeerID; the nodes behind it name their own
  gc.transport.peer_id = messages::PeerId::from_public_key(gateway_key.public_key()).bytes();
  auto gw = actors::Gateway::start(sys, gc);
  REQUIRE(gw.ok());
  DhtOptions shared;
  shared.system = &sys;
  shared.gateway = *gw;
  shared.node.wait_timeout = 2s;
  std::vector<std::unique_ptr<Dht>> nodes;
  for (int i = 0; i < 6; ++i) {
    if (!nodes.empty()) shared.initial_peers = nodes[0]->visible_addrs();
    auto d = Dht::start(shared);
    REQUIRE(d.ok());
    nodes.push_back(std::move(*d));
  }
  // Same host:port, distinct PeerIDs; every node knows the others by their own address.
  CHECK(nodes[1]->address().port == nodes[2]->address().port);
  CHECK(nodes[1]->peer_id() != nodes[2]->peer_id());
  auto s3 = nodes[3]->stats();
  REQUIRE(s3.ok());
  CHECK(s3->routing_table == 5);
  // A node on a gateway of its own joins them and reads what they stored.
  DhtOptions own;
  own.system = &sys;
  own.initial_peers = nodes[4]->visible_addrs();
  auto outsider = Dht::start(own);
  REQUIRE(outsider.ok());
  CHECK(value_of(nodes[2]->store(DhtKey::str("shared"), core::dht::pack_str("gateway"), Dht::now() + 30)));
  CHECK(std::get<std::string>(found((*outsider)->get(DhtKey::str("shared"), true)).value) == core::dht::pack_str("gateway"));
  std::size_t replicas = 0;
  for (auto& n : nodes) replicas += *n->stores_locally(DhtKey::str("shared")) ? 1 : 0;
  replicas += *(*outsider)->stores_locally(DhtKey::str("shared")) ? 1 : 0;
  CHECK(replicas == 5);
  (*outsider)->stop();
  for (auto& n : nodes) n->stop();
  (*gw)->stop();
}

TEST_CASE("DhtKey names keys as hivemind does", "[actor]") {
  CHECK(DhtKey::str("key").id().to_hex() == "88c6f489594d5d9a9d57d93567bfb6ee377abd24");
  CHECK(DhtKey::bytes("key").id().to_hex() == "a62f2225bf70bfaccbc7f1ef2a397836717377de");
  auto packed = DhtKey::packed(core::dht::pack_str("mykey"));
  REQUIRE(packed.ok());
  CHECK(packed->id().to_hex() == "6a9a82708532eead9c87b7c2aa81916d0a0c4619");
  CHECK_FALSE(DhtKey::packed("\x92\x01").ok());  // an array missing an element
}

TEST_CASE("an owner's subkey cannot be overwritten by another key's holder", "[actor]") {
  testing::TestSystem t;
  auto& sys = t.sys;
  auto validator = [] { return std::make_shared<core::dht::OwnershipValidator>(new_key()); };
  DhtOptions base;
  base.system = &sys;
  base.node.wait_timeout = 2s;
  std::vector<std::unique_ptr<Dht>> servers;
  for (int i = 0; i < 3; ++i) {
    DhtOptions o = base;
    o.validator = validator();
    if (i > 0) o.initial_peers = servers[0]->visible_addrs();
    auto d = Dht::start(o);
    REQUIRE(d.ok());
    servers.push_back(std::move(*d));
  }
  auto bob_validator = validator();
  auto mallory_validator = validator();
  DhtOptions bob_opts = base;
  bob_opts.initial_peers = servers[0]->visible_addrs();
  bob_opts.validator = bob_validator;
  auto bob = Dht::start(bob_opts);
  REQUIRE(bob.ok());
  DhtOptions mallory_opts = bob_opts;
  mallory_opts.validator = mallory_validator;
  auto mallory = Dht::start(mallory_opts);
  REQUIRE(mallory.ok());

  const auto key = DhtKey::str("experts");
  const auto bob_subkey = DhtKey::str(bob_validator->own_marker());
  const double expiration = Dht::now() + 30;
  CHECK(value_of((*bob)->store(key, core::dht::pack_str("bob's"), expiration, bob_subkey)));
  CHECK_FALSE(value_of((*mallory)->store(key, core::dht::pack_str("mallory's"), expiration + 10, bob_subkey)));
  // Mallory can write under her own subkey of the same key.
  const auto mallory_subkey = DhtKey::str(mallory_validator->own_marker());
  CHECK(value_of((*mallory)->store(key, core::dht::pack_str("mallory's"), expiration, mallory_subkey)));

  const FoundValue got = found(servers[2]->get(key, true));
  const auto& dict = std::get<FoundValue::Dictionary>(got.value);
  REQUIRE(dict.count(bob_subkey.packed()) == 1);
  CHECK(dict.at(bob_subkey.packed()).value == core::dht::pack_str("bob's"));  // signature stripped
  CHECK(dict.count(mallory_subkey.packed()) == 1);
}

TEST_CASE("with authorization on, nodes holding the authority's tokens talk and others are refused", "[actor]") {
  testing::TestSystem t;
  auto& sys = t.sys;
  const testing::AuthorityFile authority;
  const testing::AuthorityFile other_authority;
  DhtOptions base;
  base.system = &sys;
  base.node.wait_timeout = 1s;
  DhtOptions o1 = base;
  o1.authorization = authority.member();
  auto alice = Dht::start(o1);
  REQUIRE(alice.ok());
  DhtOptions o2 = base;
  o2.authorization = authority.member();
  o2.initial_peers = (*alice)->visible_addrs();
  auto bob = Dht::start(o2);
  REQUIRE(bob.ok());
  CHECK(value_of((*bob)->store(DhtKey::str("authorized"), core::dht::pack_str("yes"), Dht::now() + 30)));
  CHECK(std::get<std::string>(found((*alice)->get(DhtKey::str("authorized"), true)).value) == core::dht::pack_str("yes"));

  // No token at all, or a token of another authority: no initial peer answers.
  DhtOptions anonymous = base;
  anonymous.initial_peers = (*alice)->visible_addrs();
  auto a = Dht::start(anonymous);
  REQUIRE_FALSE(a.ok());
  INFO(a.error().what());
  CHECK_THAT(a.error().message, Catch::Contains((*alice)->visible_addrs()[0]));
  CHECK_THAT(a.error().message, Catch::Contains("auth"));
  DhtOptions stranger = anonymous;
  stranger.authorization = other_authority.member();
  auto c = Dht::start(stranger);
  REQUIRE_FALSE(c.ok());
  INFO(c.error().what());
  CHECK_THAT(c.error().message, Catch::Contains("token"));
}
