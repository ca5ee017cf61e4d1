// Builder options: defaults, propagation to every node, and the inapplicable or invalid
// ones (ignored upstream) rejected; the control-flow and single-server rules.
#include <catch2/catch.hpp>

#include "core/strategy/builders.hpp"
#include "core/strategy/validate.hpp"
#include "support.hpp"

namespace {

using namespace apiary::core::strategy;
using Strategy = apiary::pb::autodist::Strategy;
using Catch::Matchers::Contains;

std::string build_error(BuilderKind kind, const BuilderOptions& o) {
  auto s = build_strategy(kind, o, strategy_test::golden_item(), strategy_test::golden_spec(), "id");
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().code == apiary::errc::invalid_argument);
  return s.error().message;
}

}  // namespace

TEST_CASE("builder names parse and print as AutoDist's class names") {
  for (BuilderKind kind : all_builder_kinds) CHECK(*parse_builder_kind(to_string(kind)) == kind);
  CHECK(to_string(BuilderKind::random_axis_partition_ar) == "RandomAxisPartitionAR");
  auto bad = parse_builder_kind("ps");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Contains("unknown strategy builder \"ps\"") && Contains("PSLoadBalancing"));
}

TEST_CASE("PS-family options reach every node and partition") {
  BuilderOptions o;
  o.local_proxy_variable = true;
  o.staleness = 3;
  for (BuilderKind kind : {BuilderKind::ps, BuilderKind::ps_load_balancing, BuilderKind::partitioned_ps,
                           BuilderKind::uneven_partitioned_ps}) {
    auto s = build_strategy(kind, o, strategy_test::golden_item(), strategy_test::golden_spec(), "id");
    REQUIRE(s.ok());
    for (const auto& n : s->node_config()) {
      std::vector<const Strategy::Node*> leaves;
      if (n.part_config_size() == 0) leaves.push_back(&n);
      for (const auto& p : n.part_config()) leaves.push_back(&p);
      for (const auto* leaf : leaves) {
        CHECK(leaf->pssynchronizer().local_replication());
        CHECK(leaf->pssynchronizer().sync());
        CHECK(leaf->pssynchronizer().staleness() == 3);
      }
    }
  }
  BuilderOptions async;
  async.sync = false;
  auto s = build_strategy(BuilderKind::parallax, async, strategy_test::golden_item(), strategy_test::golden_spec(), "id");
  REQUIRE(s.ok());
  CHECK_FALSE(s->node_config(0).pssynchronizer().sync());
}

TEST_CASE("invalid or inapplicable options are errors") {
  BuilderOptions o;
  o.chunk_size = 0;
  CHECK_THAT(build_error(BuilderKind::all_reduce, o), Contains("chunk_size is 0"));
  o = {};
  o.staleness = -1;
  CHECK_THAT(build_error(BuilderKind::ps, o), Contains("staleness is -1"));
  o = {};
  o.staleness = 2;
  o.sync = false;
  CHECK_THAT(build_error(BuilderKind::partitioned_ps, o), Contains("needs synchronous updates"));
  o = {};
  o.local_proxy_variable = true;
  CHECK_THAT(build_error(BuilderKind::parallax, o), Contains("would have no effect"));
  CHECK_THAT(build_error(BuilderKind::all_reduce, o), Contains("AllReduce does not take the option local_proxy_variable"));
  o = {};
  o.all_reduce_spec = apiary::pb::autodist::AllReduceSynchronizer::RING;
  CHECK_THAT(build_error(BuilderKind::partitioned_ar, o), Contains("does not take the option all_reduce_spec"));
  o = {};
  o.seed = 1;
  CHECK_THAT(build_error(BuilderKind::all_reduce, o), Contains("does not take the option seed"));
  o = {};
  o.chunk_size = 4;
  CHECK_THAT(build_error(BuilderKind::ps, o), Contains("does not take the option chunk_size"));
}

TEST_CASE("partitioning builders leave control-flow variables whole") {
  GraphItem item = strategy_test::golden_item();
  item.variables[1].control_flow = true;
  for (BuilderKind kind : {BuilderKind::partitioned_ps, BuilderKind::uneven_partitioned_ps, BuilderKind::partitioned_ar,
                           BuilderKind::random_axis_partition_ar}) {
    auto s = build_strategy(kind, {}, item, strategy_test::golden_spec(), "id");
    REQUIRE(s.ok());
    INFO(to_string(kind));
    CHECK(s->node_config(1).partitioner().empty());
    CHECK(s->node_config(1).part_config_size() == 0);
    CHECK_FALSE(s->node_config(0).partitioner().empty());
    CHECK(validate(*s, item).ok());
  }
}

TEST_CASE("PartitionedPS partitions with a single server, round-robin past the servers") {
  // Reference §3.8 quirk 4, kept for parity: one PS still gets every shard.
  const ResourceSpec one = strategy_test::spec_from(strategy_test::example("resource_spec_single.yml"));
  auto s = build_strategy(BuilderKind::partitioned_ps, {}, strategy_test::golden_item(), one, "id");
  REQUIRE(s.ok());
  CHECK(s->node_config(0).partitioner() == "2,1");
  for (const auto& p : s->node_config(0).part_config()) CHECK(p.pssynchronizer().reduction_destination() == "localhost:CPU:0");
  // A prime axis of 7 rows gives 7 shards over 2 servers: A B A B A B A.
  GraphItem prime;
  prime.variables.push_back(Variable{"p:0", {7, 3}, apiary::messages::dtype::float32});
  auto r = build_strategy(BuilderKind::partitioned_ps, {}, prime, strategy_test::golden_spec(), "id");
  REQUIRE(r.ok());
  REQUIRE(r->node_config(0).part_config_size() == 7);
  CHECK(r->node_config(0).partitioner() == "7,1");
  for (int i = 0; i < 7; ++i) {
    CHECK(r->node_config(0).part_config(i).pssynchronizer().reduction_destination() ==
          (i % 2 == 0 ? strategy_test::A : strategy_test::B));
  }
}

TEST_CASE("shard counts: smallest divisor and smallest non-divisor") {
  CHECK(smallest_divisor_shards(10000) == 2);
  CHECK(smallest_divisor_shards(16) == 2);
  CHECK(smallest_divisor_shards(3) == 3);
  CHECK(smallest_divisor_shards(7) == 7);
  CHECK(smallest_divisor_shards(9) == 3);
  CHECK(smallest_divisor_shards(1) == 1);
  CHECK(smallest_divisor_shards(0) == 1);
  CHECK(smallest_non_divisor_shards(10000) == 3);
  CHECK(smallest_non_divisor_shards(16) == 3);
  CHECK(smallest_non_divisor_shards(6) == 4);
  CHECK(smallest_non_divisor_shards(7) == 2);
  CHECK(smallest_non_divisor_shards(2) == 2);
  CHECK(smallest_non_divisor_shards(1) == 1);
}

TEST_CASE("non-trainable variables get no node") {
  GraphItem item = strategy_test::golden_item();
  item.variables[2].trainable = false;
  auto s = build_strategy(BuilderKind::all_reduce, {}, item, strategy_test::golden_spec(), "id");
  REQUIRE(s.ok());
  REQUIRE(s->node_config_size() == 4);
  CHECK(s->node_config(2).var_name() == "v3:0");
  CHECK(validate(*s, item).ok());
}
