// Every builder's golden placements (reference autodist.md §2: hosts A and B with two
// GPUs each; v0 [10000,16], v1 [16,16], v2 [16], v3 [16,1], v4 [1], float32; v0 has a
// sparse gradient).
#include <catch2/catch.hpp>

#include "core/strategy/builders.hpp"
#include "core/strategy/validate.hpp"
#include "support.hpp"

namespace {

using namespace apiary::core::strategy;
using strategy_test::A;
using strategy_test::B;
using Strategy = apiary::pb::autodist::Strategy;
using AR = apiary::pb::autodist::AllReduceSynchronizer;
using Strings = std::vector<std::string>;

Strategy build(BuilderKind kind, const BuilderOptions& options = {}) {
  const GraphItem item = strategy_test::golden_item();
  const ResourceSpec spec = strategy_test::golden_spec();
  auto s = build_strategy(kind, options, item, spec, "20200101T000000M000000");
  INFO((s.ok() ? std::string() : s.error().what()));
  REQUIRE(s.ok());
  auto valid = validate(*s, item, spec);
  INFO((valid.ok() ? std::string() : valid.error().what()));
  REQUIRE(valid.ok());
  REQUIRE(s->node_config_size() == 5);
  return *s;
}

/// The PS destination of each node (unpartitioned nodes only).
Strings destinations(const Strategy& s) {
  Strings out;
  for (const auto& n : s.node_config()) out.push_back(n.pssynchronizer().reduction_destination());
  return out;
}

/// The PS destinations of a node's parts, or its own when unpartitioned.
Strings shard_destinations(const Strategy::Node& n) {
  if (n.part_config_size() == 0) return {n.pssynchronizer().reduction_destination()};
  Strings out;
  for (const auto& p : n.part_config()) out.push_back(p.pssynchronizer().reduction_destination());
  return out;
}

/// The AR groups of a node's parts, or its own group when unpartitioned.
std::vector<int> groups(const Strategy::Node& n) {
  if (n.part_config_size() == 0) return {n.allreducesynchronizer().group()};
  std::vector<int> out;
  for (const auto& p : n.part_config()) out.push_back(p.allreducesynchronizer().group());
  return out;
}

}  // namespace

TEST_CASE("builders: replicas, id and creation order") {
  const Strategy s = build(BuilderKind::ps);
  CHECK(s.id() == "20200101T000000M000000");
  CHECK(s.path().empty());
  CHECK(Strings(s.graph_config().replicas().begin(), s.graph_config().replicas().end()) ==
        Strings{"192.168.0.1:GPU:0", "192.168.0.1:GPU:1", "192.168.0.2:GPU:0", "192.168.0.2:GPU:1"});
  for (int i = 0; i < 5; ++i) CHECK(s.node_config(i).var_name() == "v" + std::to_string(i) + ":0");
}

TEST_CASE("PS: every variable on the first CPU") {
  const Strategy s = build(BuilderKind::ps);
  CHECK(destinations(s) == Strings{A, A, A, A, A});
  for (const auto& n : s.node_config()) {
    CHECK(n.pssynchronizer().sync());
    CHECK_FALSE(n.pssynchronizer().local_replication());
    CHECK(n.pssynchronizer().staleness() == 0);
    CHECK(n.partitioner().empty());
  }
}

TEST_CASE("PSLoadBalancing: greedy by bytes in creation order") {
  CHECK(destinations(build(BuilderKind::ps_load_balancing)) == Strings{A, B, B, B, B});
}

TEST_CASE("PartitionedPS: smallest divisor of axis 0, shards on the least-loaded servers") {
  const Strategy s = build(BuilderKind::partitioned_ps);
  const Strings partitioners = {"2,1", "2,1", "2", "2,1", ""};
  for (int i = 0; i < 4; ++i) {
    INFO("v" << i);
    CHECK(s.node_config(i).partitioner() == partitioners[static_cast<std::size_t>(i)]);
    CHECK(shard_destinations(s.node_config(i)) == Strings{A, B});
  }
  CHECK(s.node_config(4).partitioner().empty());
  CHECK(shard_destinations(s.node_config(4)) == Strings{A});
  CHECK(s.node_config(0).part_config(0).var_name() == "v0/part_0:0");
  CHECK(s.node_config(0).part_config(1).var_name() == "v0/part_1:0");
}

TEST_CASE("UnevenPartitionedPS: smallest non-divisor of axis 0") {
  const Strategy s = build(BuilderKind::uneven_partitioned_ps);
  CHECK(s.node_config(0).partitioner() == "3,1");
  CHECK(shard_destinations(s.node_config(0)) == Strings{A, B, A});
  CHECK(s.node_config(1).partitioner() == "3,1");
  CHECK(shard_destinations(s.node_config(1)) == Strings{B, A, B});
  CHECK(s.node_config(2).partitioner() == "3");
  CHECK(shard_destinations(s.node_config(2)) == Strings{B, A, B});
  CHECK(s.node_config(3).partitioner() == "3,1");
  CHECK(shard_destinations(s.node_config(3)) == Strings{B, A, B});
  CHECK(s.node_config(4).partitioner().empty());
  CHECK(shard_destinations(s.node_config(4)) == Strings{B});
}

TEST_CASE("AllReduce(chunk_size=2): groups by index") {
  BuilderOptions o;
  o.chunk_size = 2;
  const Strategy s = build(BuilderKind::all_reduce, o);
  const std::vector<int> expected = {0, 0, 1, 1, 2};
  for (int i = 0; i < 5; ++i) {
    const auto& ar = s.node_config(i).allreducesynchronizer();
    CHECK(ar.group() == expected[static_cast<std::size_t>(i)]);
    CHECK(ar.spec() == AR::NCCL);
    CHECK(ar.compressor() == AR::NoneCompressor);
  }
  o.all_reduce_spec = AR::RING;
  o.compressor = AR::HorovodCompressorEF;
  const Strategy ring = build(BuilderKind::all_reduce, o);
  CHECK(ring.node_config(3).allreducesynchronizer().spec() == AR::RING);
  CHECK(ring.node_config(3).allreducesynchronizer().compressor() == AR::HorovodCompressorEF);
  CHECK(build(BuilderKind::all_reduce).node_config(4).allreducesynchronizer().group() == 0);  // default 128
}

TEST_CASE("PartitionedAR(chunk_size=2): groups over shards, AUTO and no compression") {
  BuilderOptions o;
  o.chunk_size = 2;
  const Strategy s = build(BuilderKind::partitioned_ar, o);
  CHECK(groups(s.node_config(0)) == std::vector<int>{0, 0});
  CHECK(groups(s.node_config(1)) == std::vector<int>{1, 1});
  CHECK(groups(s.node_config(2)) == std::vector<int>{2, 2});
  CHECK(groups(s.node_config(3)) == std::vector<int>{3, 3});
  CHECK(groups(s.node_config(4)) == std::vector<int>{4});
  CHECK(s.node_config(4).partitioner().empty());
  CHECK(s.node_config(0).partitioner() == "2,1");
  for (const auto& p : s.node_config(1).part_config()) {
    CHECK(p.allreducesynchronizer().spec() == AR::AUTO);
    CHECK(p.allreducesynchronizer().compressor() == AR::NoneCompressor);
  }
}

TEST_CASE("Parallax(chunk_size=2): sparse to PS without proxy, dense to AR") {
  BuilderOptions o;
  o.chunk_size = 2;
  const Strategy s = build(BuilderKind::parallax, o);
  REQUIRE(s.node_config(0).has_pssynchronizer());
  CHECK(s.node_config(0).pssynchronizer().reduction_destination() == A);
  CHECK_FALSE(s.node_config(0).pssynchronizer().local_replication());
  CHECK(s.node_config(0).pssynchronizer().sync());
  const std::vector<int> expected = {0, 1, 1, 2};
  for (int i = 1; i < 5; ++i) {
    REQUIRE(s.node_config(i).has_allreducesynchronizer());
    CHECK(s.node_config(i).allreducesynchronizer().group() == expected[static_cast<std::size_t>(i - 1)]);
    CHECK(s.node_config(i).allreducesynchronizer().spec() == AR::NCCL);
  }
}

TEST_CASE("RandomAxisPartitionAR: a seeded, reproducible axis choice") {
  BuilderOptions o;
  o.chunk_size = 4;
  const Strategy first = build(BuilderKind::random_axis_partition_ar, o);
  const Strategy again = build(BuilderKind::random_axis_partition_ar, o);
  CHECK(first.SerializeAsString() == again.SerializeAsString());
  // v0 is sparse: always axis 0 in 2. v1 [16,16]: axis 0 or 1 in 2. v2 [16]: axis 0 in 2.
  // v3 [16,1]: only axis 0 is longer than 1. v4 [1]: not split.
  CHECK(first.node_config(0).partitioner() == "2,1");
  CHECK((first.node_config(1).partitioner() == "2,1" || first.node_config(1).partitioner() == "1,2"));
  CHECK(first.node_config(2).partitioner() == "2");
  CHECK(first.node_config(3).partitioner() == "2,1");
  CHECK(first.node_config(4).partitioner().empty());
  CHECK(groups(first.node_config(1)) == std::vector<int>{0, 0});
  CHECK(groups(first.node_config(2)) == std::vector<int>{1, 1});
  CHECK(groups(first.node_config(4)) == std::vector<int>{2});
  // Over many seeds both axes of v1 come up.
  bool axis0 = false, axis1 = false;
  for (std::uint64_t seed = 0; seed < 32; ++seed) {
    o.seed = seed;
    const std::string p = build(BuilderKind::random_axis_partition_ar, o).node_config(1).partitioner();
    axis0 = axis0 || p == "2,1";
    axis1 = axis1 || p == "1,2";
  }
  CHECK(axis0);
  CHECK(axis1);
}
