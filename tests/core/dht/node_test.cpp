// The DHT node role (hivemind's test_dht_node checklist) over an in-memory network.
#include <catch2/catch.hpp>

#include <random>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/ownership_validator.hpp"
#include "core/dht/schema_validator.hpp"
#include "tests/core/dht/node_network.hpp"
#include "tests/core/dht/traverse_network.hpp"
#include "tests/support/peer_addr.hpp"

using apiary::test::operator""_addr;
using namespace apiary;
using namespace apiary::core::dht;
using apiary::core::dht::testing::NodeNetwork;

namespace {

NodeId random_id(std::mt19937_64& rng) {
  return NodeId::random([&] { return rng(); });
}

/// `n` nodes, each bootstrapped from a random earlier one.
std::vector<Node*> swarm(NodeNetwork& net, std::size_t n, std::mt19937_64& rng, NodeConfig config = {}) {
  std::vector<Node*> nodes;
  for (std::size_t i = 0; i < n; ++i) {
    Node& node = net.add(random_id(rng), config);
    std::vector<apiary::core::PeerAddr> peers;
    if (!nodes.empty()) peers.push_back(net.addr(*nodes[rng() % nodes.size()]));
    REQUIRE(net.start(node, peers).status);
    nodes.push_back(&node);
  }
  return nodes;
}

StoreItem regular(const std::string& key, const std::string& value, double expiration) {
  return StoreItem{NodeId::of_str_key(key), k_subkey_regular, value, expiration};
}

std::string regular_value(const std::optional<FoundValue>& f) {
  REQUIRE(f);
  REQUIRE(std::holds_alternative<std::string>(f->value));
  return std::get<std::string>(f->value);
}

/// A fresh Ed25519 key (fails the test when none could be made).
messages::Ed25519PrivateKey new_key() {
  auto key = messages::Ed25519PrivateKey::generate();
  REQUIRE(key);
  return *key;
}

/// Starts `node` bootstrapped from the first of `nodes` (alone when there is none) and
/// appends it to them.
void join_first(NodeNetwork& net, Node& node, std::vector<Node*>& nodes) {
  REQUIRE(net.start(node, nodes.empty() ? std::vector<apiary::core::PeerAddr>{} : std::vector<apiary::core::PeerAddr>{net.addr(*nodes[0])}).status);
  nodes.push_back(&node);
}

/// Copies of `key` held in storage by all nodes.
std::size_t copies(NodeNetwork& net, const NodeId& key) {
  std::size_t n = 0;
  for (const auto& addr : net.order()) n += net.node(addr).protocol().storage().contains(net.dht_now(), key) ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("find_nearest returns the exact k nearest nodes, this node included unless excluded") {
  std::mt19937_64 rng(7);
  NodeNetwork net;
  NodeConfig config;
  config.protocol.bucket_size = 5;
  config.protocol.num_replicas = 3;
  auto nodes = swarm(net, 20, rng, config);
  std::vector<NodeId> all;
  for (Node* n : nodes) all.push_back(n->id());
  Node& me = *nodes[3];
  std::size_t top1 = 0;
  for (int q = 0; q < 20; ++q) {
    const NodeId query = random_id(rng);
    const std::size_t k = 1 + rng() % 10;
    const bool exclude = q % 2 == 0;
    auto r = net.find(me, {query}, k, exclude);
    REQUIRE(r.nearest.size() == 1);
    REQUIRE(r.nearest[0].size() == k);
    std::set<NodeId> skip;
    if (exclude) skip.insert(me.id());
    auto truth = testing::brute_nearest(query, all, k, skip);
    for (std::size_t i = 1; i < k; ++i) {
      CHECK((r.nearest[0][i - 1].id ^ query) < (r.nearest[0][i].id ^ query));
    }
    top1 += r.nearest[0][0].id == truth[0] ? 1 : 0;
  }
  CHECK(top1 >= 16);
  // Asking for more than exist returns every node.
  auto everyone = net.find(me, {random_id(rng)}, 120);
  CHECK(everyone.nearest[0].size() == 20);
  // A node that knows nobody finds only itself.
  Node& alone = net.add(random_id(rng), config);
  REQUIRE(net.start(alone, {}).status);
  auto lonely = net.find(alone, {random_id(rng)}, 5);
  REQUIRE(lonely.nearest[0].size() == 1);
  CHECK(lonely.nearest[0][0].id == alone.id());
}

TEST_CASE("a value stored from one node is found from another with its exact expiration") {
  std::mt19937_64 rng(11);
  NodeNetwork net;
  auto nodes = swarm(net, 12, rng);
  const double exp = net.dht_now() + 100;
  auto stored = net.store(*nodes[0], {regular("mykey", pack_str("Value"), exp)});
  REQUIRE(stored.stored == std::vector<bool>{true});
  auto found = net.get(*nodes[7], {NodeId::of_str_key("mykey")});
  REQUIRE(found.found.size() == 1);
  CHECK(regular_value(found.found[0]) == pack_str("Value"));
  CHECK(found.found[0]->expiration == exp);
  auto missing = net.get(*nodes[5], {NodeId::of_str_key("no such key")});
  CHECK_FALSE(missing.found[0]);

  // store_many / get_many of four keys at once.
  std::vector<StoreItem> items;
  std::vector<NodeId> keys;
  for (int i = 0; i < 4; ++i) {
    items.push_back(regular(fmt::format("k{}", i), pack_str(fmt::format("v{}", i)), exp));
    keys.push_back(NodeId::of_str_key(fmt::format("k{}", i)));
  }
  auto many = net.store(*nodes[2], items);
  CHECK(many.stored == std::vector<bool>(4, true));
  auto got = net.get(*nodes[9], keys);
  for (int i = 0; i < 4; ++i) CHECK(regular_value(got.found[static_cast<std::size_t>(i)]) == pack_str(fmt::format("v{}", i)));
}

TEST_CASE("dictionary subkeys: older writes rejected, newer accepted, latest get merges every subkey") {
  std::mt19937_64 rng(13);
  NodeNetwork net;
  auto nodes = swarm(net, 10, rng);
  const NodeId key = NodeId::of_str_key("dict");
  const double now = net.dht_now();
  auto sub = [&](const char* subkey, const char* value, double exp) {
    return StoreItem{key, pack_str(subkey), pack_str(value), exp};
  };
  CHECK(net.store(*nodes[0], {sub("k1", "v1", now + 10)}).stored[0]);
  CHECK(net.store(*nodes[1], {sub("k2", "v2", now + 20)}).stored[0]);
  CHECK_FALSE(net.store(*nodes[2], {sub("k2", "v3", now + 10)}).stored[0]);
  CHECK(net.store(*nodes[3], {sub("k2", "v4", now + 30)}).stored[0]);
  CHECK(net.store(*nodes[4], {sub("k3", "v5", now + 50)}).stored[0]);
  auto found = net.get(*nodes[8], {key}, true);
  REQUIRE(found.found[0]);
  auto& dict = std::get<FoundValue::Dictionary>(found.found[0]->value);
  REQUIRE(dict.size() == 3);
  CHECK(dict.at(pack_str("k1")).value == pack_str("v1"));
  CHECK(dict.at(pack_str("k2")).value == pack_str("v4"));
  CHECK(dict.at(pack_str("k2")).expiration_time == now + 30);
  CHECK(found.found[0]->expiration == now + 50);
}

TEST_CASE("a store keeps exactly num_replicas copies, also when overwritten") {
  for (std::size_t replicas : {1u, 3u, 5u, 12u}) {
    std::mt19937_64 rng(17 + replicas);
    NodeNetwork net;
    NodeConfig config;
    config.protocol.num_replicas = replicas;
    config.cache_on_store = false;
    auto nodes = swarm(net, 16, rng, config);
    const double exp = net.dht_now() + 60;
    auto r = net.store(*nodes[0], {regular("key1", pack_str("a"), exp), regular("key2", pack_str("b"), exp)});
    CHECK(r.replicas == std::vector<std::size_t>{replicas, replicas});
    CHECK(copies(net, NodeId::of_str_key("key1")) == replicas);
    CHECK(copies(net, NodeId::of_str_key("key2")) == replicas);
    net.store(*nodes[5], {regular("key2", pack_str("c"), exp + 1)});
    CHECK(copies(net, NodeId::of_str_key("key2")) == replicas);
  }
}

TEST_CASE("a dead replica is replaced by the next nearest node, and dead peers get blacklisted") {
  std::mt19937_64 rng(19);
  NodeNetwork net;
  NodeConfig config;
  config.protocol.num_replicas = 3;
  config.blacklist_time = 999;
  auto nodes = swarm(net, 14, rng, config);
  const NodeId key = NodeId::of_str_key("precious");
  auto nearest = net.find(*nodes[0], {key}, 3, true).nearest[0];
  REQUIRE(nearest.size() == 3);
  net.kill(nearest[0].peer);
  net.kill(nearest[1].peer);
  Node* storer = nodes[0];
  auto r = net.store(*storer, {regular("precious", pack_str("x"), net.dht_now() + 60)}, true);
  CHECK(r.replicas[0] == 3);
  // The getter asks the dead nodes, fails, and bans them; live peers stay clear.
  Node* getter = nodes[13];
  auto g = net.get(*getter, {key});
  CHECK(regular_value(g.found[0]) == pack_str("x"));
  auto h = net.get(*getter, {NodeId::of_str_key("other key")});
  CHECK_FALSE(h.found[0]);
  CHECK(getter->blacklist().is_banned(net.dht_now(), nearest[0].peer));
  CHECK(getter->blacklist().is_banned(net.dht_now(), nearest[1].peer));
  CHECK_FALSE(getter->blacklist().is_banned(net.dht_now(), nearest[2].peer));
  CHECK(getter->blacklist().size() == 2);
}

TEST_CASE("bootstrap fails with an error naming the peers when none answers") {
  NodeNetwork net;
  std::mt19937_64 rng(23);
  Node& node = net.add(random_id(rng));
  auto r = net.start(node, {"/ip4/10.9.9.9/tcp/1"_addr, "/ip4/10.9.9.8/tcp/2"_addr});
  REQUIRE_FALSE(r.status);
  CHECK(r.status.error().message.find("none of the 2 initial peers") != std::string::npos);
  CHECK(r.status.error().message.find("/ip4/10.9.9.8/tcp/2") != std::string::npos);
}

TEST_CASE("a client-mode node is in nobody's routing table yet stores and gets") {
  std::mt19937_64 rng(29);
  NodeNetwork net;
  auto nodes = swarm(net, 8, rng);
  NodeConfig cc;
  cc.protocol.client_mode = true;
  Node& client = net.add(random_id(rng), cc);
  REQUIRE(net.start(client, {net.addr(*nodes[0])}).status);
  CHECK(client.routing_table().size() > 0);
  for (Node* n : nodes) CHECK_FALSE(n->routing_table().contains(client.id()));
  auto r = net.store(client, {regular("from client", pack_str("hi"), net.dht_now() + 30)});
  CHECK(r.stored[0]);
  CHECK(copies(net, NodeId::of_str_key("from client")) == 5);
  CHECK_FALSE(client.protocol().storage().contains(net.dht_now(), NodeId::of_str_key("from client")));
  CHECK(regular_value(net.get(*nodes[3], {NodeId::of_str_key("from client")}).found[0]) == pack_str("hi"));
}

TEST_CASE("edge-case keys, subkeys and values round-trip through a latest get") {
  std::mt19937_64 rng(31);
  NodeNetwork net;
  auto nodes = swarm(net, 10, rng);
  const std::vector<std::string> objects = {std::string(1, '\0'), pack_str(""), "\xc2", "\xc3", pack_str("abyrvalg"),
                                            std::string("\xcd\x11\xcb", 3)};
  std::vector<std::string> keys = objects;
  keys.push_back(pack_tuple({}));
  std::vector<std::string> values = objects;
  values.push_back("\x90");
  double exp = net.dht_now() + 100;
  for (const auto& key : keys) {
    for (const auto& subkey : objects) {
      for (const auto& value : values) {
        const NodeId id = NodeId::of_packed_key(key);
        exp += 0.5;  // each write is newer than the last, as with hivemind's get_dht_time() + 999
        REQUIRE(net.store(*nodes[rng() % nodes.size()], {StoreItem{id, subkey, value, exp}}).stored[0]);
        auto got = net.get(*nodes[rng() % nodes.size()], {id}, true);
        REQUIRE(got.found[0]);
        auto& dict = std::get<FoundValue::Dictionary>(got.found[0]->value);
        REQUIRE(dict.count(subkey) == 1);
        CHECK(dict.at(subkey).value == value);
      }
    }
  }
}

TEST_CASE("concurrent gets of one key share one search") {
  std::mt19937_64 rng(37);
  NodeNetwork net;
  auto nodes = swarm(net, 10, rng);
  const double exp = net.dht_now() + 60;
  net.store(*nodes[0], {regular("k1", pack_str("123"), exp), regular("k2", pack_str("567"), exp)});
  Node& reader = *nodes[9];
  const NodeId k1 = NodeId::of_str_key("k1"), k2 = NodeId::of_str_key("k2"), k3 = NodeId::of_str_key("k3");
  reader.protocol().cache() = LocalStorage{};
  reader.protocol().storage().erase(k1);
  reader.protocol().storage().erase(k2);
  net.submit(reader, reader.get(net.now(), 1001, {k1, k2}));
  CHECK(reader.shared_searches() == 2);
  net.submit(reader, reader.get(net.now(), 1002, {k1, k3}));
  CHECK(reader.shared_searches() == 3);  // k1 joined the first search; k3 has its own
  net.run();
  auto& done = net.spare(reader);
  for (auto& r : reader.take_completed()) done.push_back(std::move(r));
  REQUIRE(done.size() == 2);
  CHECK(reader.shared_searches() == 0);
  for (auto& r : done) {
    if (r.op == 1001) {
      CHECK(regular_value(r.found[0]) == pack_str("123"));
      CHECK(regular_value(r.found[1]) == pack_str("567"));
    } else {
      CHECK(regular_value(r.found[0]) == pack_str("123"));
      CHECK_FALSE(r.found[1]);
    }
  }
}

TEST_CASE("a get caches the value locally and on the nearest node that lacked it, cached keys refresh") {
  std::mt19937_64 rng(41);
  NodeNetwork net;
  NodeConfig config;
  config.protocol.num_replicas = 2;
  auto nodes = swarm(net, 12, rng, config);
  const NodeId key = NodeId::of_str_key("cached");
  const double exp = net.dht_now() + 30;
  net.store(*nodes[0], {regular("cached", pack_str("v"), exp)}, true);
  Node* reader = nullptr;
  for (Node* n : nodes) {
    if (n != nodes[0] && !n->protocol().storage().contains(net.dht_now(), key)) reader = n;
  }
  REQUIRE(reader != nullptr);
  const auto before = net.calls();
  CHECK(regular_value(net.get(*reader, {key}).found[0]) == pack_str("v"));
  CHECK(reader->protocol().cache().contains(net.dht_now(), key));
  std::size_t cached_elsewhere = 0;
  for (Node* n : nodes) cached_elsewhere += n != reader && n->protocol().cache().contains(net.dht_now(), key) ? 1 : 0;
  CHECK(cached_elsewhere >= 1);
  // A second get is served from the cache (no calls) and queues a refresh before expiry.
  const auto between = net.calls();
  CHECK(between > before);
  CHECK(regular_value(net.get(*reader, {key}).found[0]) == pack_str("v"));
  CHECK(net.calls() == between);
  CHECK(reader->refresh_queue_size() == 1);
  net.advance(std::chrono::seconds(26));
  CHECK(reader->refresh_queue_size() == 0);
  CHECK(reader->stats().cache_refreshes == 1);
}

TEST_CASE("a cached value expiring past the clock's range is refreshed at the end of time, not at once") {
  std::mt19937_64 rng(47);
  NodeNetwork net;
  NodeConfig config;
  config.protocol.num_replicas = 1;
  auto nodes = swarm(net, 6, rng, config);
  const NodeId key = NodeId::of_str_key("far");
  // Any expiration may come from a peer; 1e12 s is past what a TimePoint holds (9.2e9 s).
  REQUIRE(net.store(*nodes[0], {regular("far", pack_str("v"), 1e12)}, true).stored[0]);
  Node* reader = nullptr;
  for (Node* n : nodes) {
    if (!n->protocol().storage().contains(net.dht_now(), key)) reader = n;
  }
  REQUIRE(reader != nullptr);
  CHECK(regular_value(net.get(*reader, {key}).found[0]) == pack_str("v"));  // now cached
  // Served from the cache, the get arms the refresh timer: not due now (a timer due at
  // once found nothing to refresh and re-armed itself at once, forever).
  const apiary::core::OpId op = 1000;
  auto fx = reader->get(net.now(), op, {key});
  bool armed = false;
  for (const auto& effect : fx) {
    if (const auto* t = std::get_if<apiary::core::SetTimer>(&effect)) {
      armed = true;
      CHECK(t->at > net.now() + std::chrono::hours(24 * 365));
    }
  }
  CHECK(armed);
  CHECK(regular_value(net.finish(*reader, op, std::move(fx)).found[0]) == pack_str("v"));
  CHECK(reader->refresh_queue_size() == 1);
  net.advance(std::chrono::seconds(60));
  CHECK(reader->refresh_queue_size() == 1);
  CHECK(reader->stats().cache_refreshes == 0);
}

TEST_CASE("a newly joined node nearer to a stored key receives it") {
  std::mt19937_64 rng(43);
  NodeNetwork net;
  NodeConfig config;
  config.protocol.num_replicas = 1;
  config.cache_on_store = false;
  auto nodes = swarm(net, 6, rng, config);
  const NodeId key = NodeId::of_str_key("moving");
  net.store(*nodes[0], {regular("moving", pack_str("m"), net.dht_now() + 60)});
  REQUIRE(copies(net, key) == 1);
  // A newcomer whose id is the key itself is nearer than anyone.
  std::string near = key.to_bytes();
  near.back() = static_cast<char>(near.back() ^ 1);
  Node& newcomer = net.add(*NodeId::from_bytes(near), config);
  REQUIRE(net.start(newcomer, {net.addr(*nodes[1])}).status);
  CHECK(newcomer.protocol().storage().contains(net.dht_now(), key));
}

TEST_CASE("ownership: mallory cannot overwrite bob's subkey, bob can update it") {
  std::mt19937_64 rng(47);
  const auto bob_key = new_key();
  const auto mallory_key = new_key();
  NodeNetwork net;
  std::vector<Node*> nodes;
  for (int i = 0; i < 6; ++i) {
    join_first(net, net.add(random_id(rng), {}, std::make_shared<OwnershipValidator>(*messages::Ed25519PrivateKey::generate())), nodes);
  }
  auto bob_validator = std::make_shared<OwnershipValidator>(bob_key);
  Node& bob = net.add(random_id(rng), {}, bob_validator);
  Node& mallory = net.add(random_id(rng), {}, std::make_shared<OwnershipValidator>(mallory_key));
  REQUIRE(net.start(bob, {net.addr(*nodes[0])}).status);
  REQUIRE(net.start(mallory, {net.addr(*nodes[0])}).status);
  const NodeId key = NodeId::of_str_key("protected");
  const std::string subkey = pack_str(bob_validator->own_marker());
  const double now = net.dht_now();
  CHECK(net.store(bob, {StoreItem{key, subkey, pack_str("true"), now + 10}}).stored[0]);
  CHECK_FALSE(net.store(mallory, {StoreItem{key, subkey, pack_str("fake"), now + 20}}).stored[0]);
  CHECK(net.store(bob, {StoreItem{key, subkey, pack_str("updated"), now + 30}}).stored[0]);
  auto got = net.get(*nodes[3], {key}, true);
  REQUIRE(got.found[0]);
  CHECK(std::get<FoundValue::Dictionary>(got.found[0]->value).at(subkey).value == pack_str("updated"));
}

TEST_CASE("with refresh_timeout, buckets not updated for that long are looked up again") {
  std::mt19937_64 rng(59);
  NodeNetwork net;
  auto nodes = swarm(net, 8, rng);  // these never refresh, so every call below is the watcher's
  NodeConfig config;
  config.refresh_timeout = std::chrono::seconds(10);
  Node& watcher = net.add(random_id(rng), config);
  REQUIRE(net.start(watcher, {net.addr(*nodes[0])}).status);
  net.advance(std::chrono::seconds(5));
  const auto early = watcher.stats().calls;
  net.advance(std::chrono::seconds(16));  // the second round (t = 20 s) finds them stale
  CHECK(watcher.stats().calls > early);
  CHECK(net.spare(watcher).empty());  // refreshes are the node's own: never reported as ops
}

TEST_CASE("validators added to a running node merge with its own (hivemind's add_validators)") {
  std::mt19937_64 rng(61);
  NodeNetwork net;
  auto schema = [](const char* field, schema_type type, bool extra) {
    SchemaOptions options;
    options.allow_extra_keys = extra;
    return std::make_unique<SchemaValidator>(std::vector<SchemaField>{SchemaField::regular(field, type)}, options);
  };
  // One node starts with a composite, another with a plain validator, a third with none.
  auto composite = std::make_shared<CompositeValidator>();
  composite->extend(schema("a", schema_type::bytes, false));
  Node& with_composite = net.add(random_id(rng), {}, composite);
  Node& with_plain = net.add(random_id(rng), {}, std::shared_ptr<RecordValidator>(schema("a", schema_type::bytes, false)));
  Node& without = net.add(random_id(rng), {}, nullptr);
  REQUIRE(net.start(with_composite, {}).status);
  REQUIRE(net.start(with_plain, {}).status);
  REQUIRE(net.start(without, {}).status);
  const double now = net.dht_now();
  auto stores = [&](Node& n, const char* key, const std::string& value, double exp) -> bool {
    return net.store(n, {StoreItem{NodeId::of_str_key(key), std::string(k_subkey_regular), value, exp}}).stored[0];
  };
  CHECK(stores(with_composite, "a", pack_bin("x"), now + 10));
  CHECK_FALSE(stores(with_composite, "b", pack_str("x"), now + 10));  // no extra keys
  CHECK(stores(without, "b", pack_bin("anything"), now + 10));

  // Merged into the composite's schema: "b" becomes a field of the same schema, so a
  // record of either field passes; a wrong type is refused.
  with_composite.add_validator(schema("b", schema_type::str, false));
  CHECK(composite->size() == 1);
  CHECK(stores(with_composite, "b", pack_str("y"), now + 11));
  CHECK_FALSE(stores(with_composite, "b", pack_bin("y"), now + 12));
  CHECK(stores(with_composite, "a", pack_bin("z"), now + 13));

  // A plain validator is kept as it is and the new one checked beside it.
  with_plain.add_validator(schema("b", schema_type::str, true));
  CHECK_FALSE(stores(with_plain, "b", pack_str("y"), now + 10));  // the first still allows no extra keys
  CHECK(stores(with_plain, "a", pack_bin("y"), now + 10));

  // A node without validators gets the one added.
  without.add_validator(schema("b", schema_type::str, true));
  CHECK_FALSE(stores(without, "b", pack_bin("bytes now refused"), now + 20));
  CHECK(stores(without, "b", pack_str("a str"), now + 21));
  without.add_validator(nullptr);  // nothing to add
  CHECK(stores(without, "c", pack_bin("extra keys pass"), now + 10));
}
