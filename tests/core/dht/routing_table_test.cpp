// core::dht::RoutingTable: bucket splitting, LRU order, replacement cache, eviction
// pings, and exact k-nearest search checked against brute force.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/dht/routing_table.hpp"
#include "tests/support/peer_addr.hpp"

namespace {

using apiary::core::TimePoint;
using apiary::test::test_peer;
using apiary::core::dht::Contact;
using apiary::core::dht::NodeId;
using apiary::core::dht::RoutingConfig;
using apiary::core::dht::RoutingTable;

apiary::core::dht::PeerId peer_name(const NodeId& id) { return test_peer("peer-" + id.to_hex().substr(0, 12)); }

/// An id whose first byte is `top` and the rest drawn from `gen`.
NodeId id_with_top_byte(std::mt19937_64& gen, std::uint8_t top) {
  NodeId::Bytes b = NodeId::random(gen).bytes();
  b[0] = top;
  return NodeId(b);
}

std::vector<Contact> brute_force(const std::vector<Contact>& all, const NodeId& q,
                                 std::size_t k, const NodeId* exclude) {
  std::vector<Contact> c;
  for (const auto& x : all) {
    if (exclude == nullptr || x.id != *exclude) c.push_back(x);
  }
  std::sort(c.begin(), c.end(),
            [&](const Contact& a, const Contact& b) { return (a.id ^ q) < (b.id ^ q); });
  if (c.size() > k) c.resize(k);
  return c;
}

/// Every table invariant: buckets tile the space in order, nodes sit in their bucket,
/// replacements only in full buckets, maps agree with buckets.
void check_invariants(const RoutingTable& table) {
  const auto& buckets = table.buckets();
  REQUIRE_FALSE(buckets.empty());
  CHECK(buckets.front().lower() == NodeId::min());
  CHECK(buckets.back().upper() == NodeId::max());
  std::size_t active = 0;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const auto& b = buckets[i];
    if (i + 1 < buckets.size()) CHECK(b.upper() < buckets[i + 1].lower());
    CHECK(b.nodes().size() <= table.config().bucket_size);
    if (!b.replacements().empty()) CHECK(b.nodes().size() == table.config().bucket_size);
    for (const auto& c : b.nodes()) {
      CHECK(b.contains(c.id));
      CHECK(table.bucket_index(c.id) == i);
      CHECK(table.peer_of(c.id) == c.peer);
      CHECK(table.node_of(c.peer) == c.id);
    }
    for (const auto& c : b.replacements()) CHECK_FALSE(table.contains(c.id));
    active += b.nodes().size();
  }
  CHECK(active == table.size());
}

}  // namespace

TEST_CASE("basic table: lookups both ways, bucket bounds, few buckets", "[dht][routing]") {
  std::mt19937_64 gen(3);
  const NodeId self = NodeId::random(gen);
  RoutingTable table(self, RoutingConfig{});
  std::vector<Contact> added;
  for (int i = 0; i < 100; ++i) {
    const NodeId id = NodeId::random(gen);
    CHECK_FALSE(table.add_or_update(TimePoint{i}, id, peer_name(id)).has_value());
    added.push_back({id, peer_name(id)});
  }
  for (const auto& c : added) {
    CHECK(table.peer_of(c.id) == c.peer);
    CHECK(table.node_of(c.peer) == c.id);
  }
  CHECK(table.size() == 100);
  CHECK(table.buckets().size() >= 3);
  CHECK(table.buckets().size() <= 10);
  for (const auto& b : table.buckets()) CHECK(b.replacements().empty());
  // bucket_index agrees with a linear scan over ranges.
  for (int i = 0; i < 200; ++i) {
    const NodeId q = NodeId::random(gen);
    std::size_t linear = 0;
    while (!table.buckets()[linear].contains(q)) ++linear;
    CHECK(table.bucket_index(q) == linear);
  }
  check_invariants(table);
}

TEST_CASE("own id is never stored", "[dht][routing]") {
  const NodeId self = NodeId::of_str_key("me");
  RoutingTable table(self, RoutingConfig{});
  CHECK_FALSE(table.add_or_update(TimePoint{}, self, test_peer("me")).has_value());
  CHECK(table.size() == 0);
  CHECK(table.nearest(self, 5).empty());
}

TEST_CASE("bucket counts after 10000 inserts follow bucket_size and depth_modulo",
          "[dht][routing]") {
  struct Case {
    std::size_t k, b, lo, hi;
  };
  const Case cases[] = {{20, 5, 45, 65}, {50, 5, 35, 45}, {20, 10, 650, 800}, {20, 1, 7, 15}};
  for (const auto& tc : cases) {
    std::mt19937_64 gen(1000 + tc.k * 100 + tc.b);
    RoutingConfig config;
    config.bucket_size = tc.k;
    config.depth_modulo = tc.b;
    RoutingTable table(NodeId::random(gen), config);
    for (int i = 0; i < 10000; ++i) {
      const NodeId id = NodeId::random(gen);
      (void)table.add_or_update(TimePoint{i}, id, peer_name(id));
    }
    INFO("k=" << tc.k << " b=" << tc.b << " buckets=" << table.buckets().size());
    CHECK(table.buckets().size() >= tc.lo);
    CHECK(table.buckets().size() <= tc.hi);
    check_invariants(table);
  }
}

TEST_CASE("k-nearest equals brute force on small and large tables", "[dht][routing]") {
  for (const int table_size : {10, 10000}) {
    std::mt19937_64 gen(static_cast<std::uint64_t>(table_size));
    RoutingTable table(NodeId::random(gen), RoutingConfig{});
    for (int i = 0; i < table_size; ++i) {
      const NodeId id = NodeId::random(gen);
      (void)table.add_or_update(TimePoint{}, id, peer_name(id));
    }
    std::vector<Contact> active;
    for (const auto& b : table.buckets()) {
      active.insert(active.end(), b.nodes().begin(), b.nodes().end());
    }
    INFO("table size " << table_size << ", active " << active.size());
    if (table_size == 10) CHECK(active.size() == 10);
    if (table_size == 10000) CHECK((active.size() >= 800 && active.size() <= 1100));
    for (int i = 0; i < 1000; ++i) {
      const NodeId q = NodeId::random(gen);
      const std::size_t k = 1 + gen() % 100;
      const bool use_exclude = gen() % 2 == 0;
      const NodeId excluded = active[gen() % active.size()].id;
      const NodeId* ex = use_exclude ? &excluded : nullptr;
      const auto got = use_exclude ? table.nearest(q, k, excluded) : table.nearest(q, k);
      REQUIRE(got == brute_force(active, q, k, ex));
    }
    // Queries at ids in the table, excluding the query itself.
    for (int i = 0; i < 1000; ++i) {
      const NodeId q = active[gen() % active.size()].id;
      const std::size_t k = 1 + gen() % 100;
      const auto got = table.nearest(q, k, q);
      REQUIRE(got == brute_force(active, q, k, &q));
      for (const auto& c : got) CHECK(c.id != q);
    }
  }
}

TEST_CASE("k-nearest equals brute force when ids share more than 64 leading bits",
          "[dht][routing]") {
  // Chosen ids (a DHT cannot stop a peer from choosing one) can crowd next to ours, so
  // buckets get deeper than 64 bits and distances tie in their first 64 bits: the
  // ordering must then look at every bit.
  std::mt19937_64 gen(64);
  const NodeId self = NodeId::random(gen);
  RoutingTable table(self, RoutingConfig{});
  const auto near_self = [&](std::size_t shared_bits) {
    const NodeId r = NodeId::random(gen);
    return self.prefix(shared_bits) ^ (r ^ r.prefix(shared_bits));
  };
  for (int i = 0; i < 3000; ++i) {
    const std::size_t shared = i % 3 == 0 ? static_cast<std::size_t>(gen() % 64) : 64 + gen() % 40;
    const NodeId id = near_self(shared);
    // Named by the whole id: peer_name's first 48 bits are shared here.
    (void)table.add_or_update(TimePoint{}, id, test_peer("peer-" + id.to_hex()));
  }
  std::size_t deepest = 0;
  std::vector<Contact> active;
  for (const auto& b : table.buckets()) {
    deepest = std::max(deepest, b.depth());
    active.insert(active.end(), b.nodes().begin(), b.nodes().end());
  }
  INFO("buckets " << table.buckets().size() << ", deepest " << deepest << ", active " << active.size());
  REQUIRE(deepest > 64);
  for (int i = 0; i < 1000; ++i) {
    const NodeId q = i % 2 == 0 ? near_self(64 + gen() % 40) : active[gen() % active.size()].id;
    const std::size_t k = 1 + gen() % 60;
    REQUIRE(table.nearest(q, k, q) == brute_force(active, q, k, &q));
    REQUIRE(table.nearest(q, k) == brute_force(active, q, k, nullptr));
  }
}

TEST_CASE("full unsplittable bucket: replacement cache and least-recently-seen ping",
          "[dht][routing]") {
  std::mt19937_64 gen(11);
  RoutingConfig config;
  config.bucket_size = 4;
  config.depth_modulo = 1;
  // Self in the lower half, so the upper half (depth 1) never splits with modulo 1.
  const NodeId self = id_with_top_byte(gen, 0x10);
  RoutingTable table(self, config);
  std::vector<NodeId> far;
  for (int i = 0; i < 4; ++i) {
    far.push_back(id_with_top_byte(gen, 0x80 + i));
    CHECK_FALSE(table.add_or_update(TimePoint{i}, far.back(), peer_name(far.back())));
  }
  CHECK(table.buckets().size() == 1);
  // Seeing far[0] again moves it to the most-recent end.
  CHECK_FALSE(table.add_or_update(TimePoint{10}, far[0], peer_name(far[0])));
  // A fifth far node splits the root once (it holds self), then its half is full.
  const NodeId extra1 = id_with_top_byte(gen, 0xc0);
  auto ping = table.add_or_update(TimePoint{11}, extra1, peer_name(extra1));
  CHECK(table.buckets().size() == 2);
  REQUIRE(ping.has_value());
  CHECK(ping->id == far[1]);  // least recently seen, since far[0] was refreshed
  CHECK_FALSE(table.contains(extra1));
  const auto& upper = table.buckets()[1];
  REQUIRE(upper.replacements().size() == 1);
  CHECK(upper.replacements()[0].id == extra1);
  // A second newcomer asks for the next stalest node, not the one already pinged.
  const NodeId extra2 = id_with_top_byte(gen, 0xc1);
  ping = table.add_or_update(TimePoint{12}, extra2, peer_name(extra2));
  REQUIRE(ping.has_value());
  CHECK(ping->id == far[2]);
  // far[1] did not answer: removing it promotes the most recently added replacement.
  CHECK(table.remove(far[1]));
  CHECK_FALSE(table.contains(far[1]));
  CHECK(table.contains(extra2));
  CHECK_FALSE(table.contains(extra1));
  CHECK(table.buckets()[1].nodes().back().id == extra2);
  // far[2] answered: it becomes most recent and may be asked about again later.
  CHECK_FALSE(table.add_or_update(TimePoint{13}, far[2], peer_name(far[2])));
  CHECK(table.buckets()[1].nodes().back().id == far[2]);
  CHECK(table.buckets()[1].last_updated() == TimePoint{13});
  check_invariants(table);
  // Removing an unknown node reports it; removing a replacement drops it silently.
  CHECK_FALSE(table.remove(NodeId::of_str_key("nobody")));
  CHECK(table.remove(extra1));
  CHECK(table.buckets()[1].replacements().empty());
}

TEST_CASE("a peer seen under a new id loses its old id, a node may change peer",
          "[dht][routing]") {
  RoutingTable table(NodeId::of_str_key("self"), RoutingConfig{});
  const NodeId a = NodeId::of_str_key("a");
  const NodeId b = NodeId::of_str_key("b");
  (void)table.add_or_update(TimePoint{}, a, test_peer("peer-x"));
  (void)table.add_or_update(TimePoint{}, b, test_peer("peer-x"));
  CHECK_FALSE(table.contains(a));
  CHECK(table.node_of(test_peer("peer-x")) == b);
  (void)table.add_or_update(TimePoint{}, b, test_peer("peer-y"));
  CHECK(table.peer_of(b) == test_peer("peer-y"));
  CHECK_FALSE(table.node_of(test_peer("peer-x")).has_value());
  CHECK(table.size() == 1);
  check_invariants(table);
}

TEST_CASE("bucket refresh helpers: stale buckets and random ids in range", "[dht][routing]") {
  std::mt19937_64 gen(5);
  RoutingTable table(NodeId::random(gen), RoutingConfig{});
  for (int i = 0; i < 200; ++i) {
    const NodeId id = NodeId::random(gen);
    (void)table.add_or_update(TimePoint{i}, id, peer_name(id));
  }
  const auto stale = table.buckets_updated_before(TimePoint{150});
  for (std::size_t i = 0; i < table.buckets().size(); ++i) {
    const bool is_stale = std::count(stale.begin(), stale.end(), i) != 0;
    CHECK(is_stale == (table.buckets()[i].last_updated() < TimePoint{150}));
    const auto& bucket = table.buckets()[i];
    for (int j = 0; j < 20; ++j) CHECK(bucket.contains(bucket.random_id(gen)));
  }
}

TEST_CASE("routing config is validated", "[dht][routing]") {
  RoutingConfig c;
  CHECK(validate(c).ok());
  c.bucket_size = 0;
  CHECK_FALSE(validate(c).ok());
  c = RoutingConfig{};
  c.depth_modulo = 0;
  CHECK_FALSE(validate(c).ok());
}
