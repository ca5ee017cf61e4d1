// validate(): every rule, each broken once on an otherwise valid strategy, gives an
// error naming the node and the rule.
#include <catch2/catch.hpp>

#include <functional>

#include "core/strategy/builders.hpp"
#include "core/strategy/validate.hpp"
#include "support.hpp"

namespace {

using namespace apiary::core::strategy;
using Strategy = apiary::pb::autodist::Strategy;
using Catch::Matchers::Contains;

Strategy built(BuilderKind kind) {
  BuilderOptions o;
  if (kind == BuilderKind::partitioned_ar) o.chunk_size = 1;
  auto s = build_strategy(kind, o, strategy_test::golden_item(), strategy_test::golden_spec(), "id");
  REQUIRE(s.ok());
  return *s;
}

/// The error after `mutate` changes a valid strategy of `kind`.
std::string broken(BuilderKind kind, const std::function<void(Strategy&)>& mutate, bool with_spec = false) {
  Strategy s = built(kind);
  const GraphItem item = strategy_test::golden_item();
  REQUIRE(validate(s, item).ok());
  mutate(s);
  auto status = with_spec ? validate(s, item, strategy_test::golden_spec()) : validate(s, item);
  REQUIRE_FALSE(status.ok());
  CHECK(status.error().code == apiary::errc::invalid_argument);
  return status.error().message;
}

}  // namespace

TEST_CASE("validate: coverage of variables") {
  CHECK_THAT(broken(BuilderKind::ps, [](Strategy& s) { s.mutable_node_config()->RemoveLast(); }),
             Contains("\"v4:0\" has no node"));
  CHECK_THAT(broken(BuilderKind::ps, [](Strategy& s) { s.mutable_node_config(1)->set_var_name("v9:0"); }),
             Contains("node_config[1] (\"v9:0\"): names no trainable variable"));
  CHECK_THAT(broken(BuilderKind::ps, [](Strategy& s) { *s.add_node_config() = s.node_config(0); }),
             Contains("node_config[5] (\"v0:0\"): the variable already has a node"));
}

TEST_CASE("validate: synchronizers") {
  CHECK_THAT(broken(BuilderKind::ps, [](Strategy& s) { s.mutable_node_config(2)->clear_synchronizer(); }),
             Contains("node_config[2] (\"v2:0\"): no synchronizer"));
  CHECK_THAT(broken(BuilderKind::ps,
                    [](Strategy& s) { s.mutable_node_config(0)->mutable_pssynchronizer()->set_staleness(-1); }),
             Contains("staleness is -1"));
  CHECK_THAT(broken(BuilderKind::ps,
                    [](Strategy& s) {
                      s.mutable_node_config(0)->mutable_pssynchronizer()->set_staleness(2);
                      s.mutable_node_config(0)->mutable_pssynchronizer()->set_sync(false);
                    }),
             Contains("needs sync: true"));
  CHECK_THAT(broken(BuilderKind::ps,
                    [](Strategy& s) {
                      s.mutable_node_config(0)->mutable_pssynchronizer()->set_reduction_destination("nowhere");
                    }),
             Contains("reduction_destination: device name \"nowhere\""));
  CHECK_THAT(broken(
                 BuilderKind::ps,
                 [](Strategy& s) {
                   s.mutable_node_config(0)->mutable_pssynchronizer()->set_reduction_destination("10.9.9.9:CPU:0");
                 },
                 true),
             Contains("10.9.9.9:CPU:0 is not in the resource spec"));
  CHECK_THAT(broken(BuilderKind::all_reduce,
                    [](Strategy& s) { s.mutable_node_config(3)->mutable_allreducesynchronizer()->set_group(5); }),
             Contains("node_config[3] (\"v3:0\"): AllReduceSynchronizer.group is 5; expected 0 <= group < 5"));
  CHECK_THAT(broken(BuilderKind::all_reduce,
                    [](Strategy& s) { s.mutable_node_config(3)->mutable_allreducesynchronizer()->set_group(-1); }),
             Contains("group is -1"));
}

TEST_CASE("validate: the group bound counts partitions") {
  // PartitionedAR(chunk_size=1) over the golden model: 9 units, groups 0..8.
  Strategy s = built(BuilderKind::partitioned_ar);
  CHECK(s.node_config(4).allreducesynchronizer().group() == 8);
  CHECK(validate(s, strategy_test::golden_item()).ok());
  CHECK_THAT(broken(BuilderKind::partitioned_ar,
                    [](Strategy& t) { t.mutable_node_config(4)->mutable_allreducesynchronizer()->set_group(9); }),
             Contains("expected 0 <= group < 9"));
}

TEST_CASE("validate: partitions") {
  CHECK_THAT(broken(BuilderKind::partitioned_ps, [](Strategy& s) { s.mutable_node_config(1)->set_partitioner("3,1"); }),
             Contains("node_config[1] (\"v1:0\"): partitioner \"3,1\" makes 3 partitions but part_config has 2"));
  CHECK_THAT(broken(BuilderKind::partitioned_ps, [](Strategy& s) { s.mutable_node_config(1)->set_partitioner("2"); }),
             Contains("has 1 axes but the variable has rank 2"));
  CHECK_THAT(broken(BuilderKind::partitioned_ps, [](Strategy& s) { s.mutable_node_config(3)->set_partitioner("1,2"); }),
             Contains("cuts axis 1 of 1 rows into 2 pieces"));
  CHECK_THAT(broken(BuilderKind::partitioned_ps, [](Strategy& s) { s.mutable_node_config(0)->set_partitioner("1,2"); }),
             Contains("splits axis 1 of a sparse variable"));
  CHECK_THAT(broken(BuilderKind::partitioned_ps, [](Strategy& s) { s.mutable_node_config(1)->set_partitioner("0,1"); }),
             Contains("0 pieces"));
  CHECK_THAT(broken(BuilderKind::partitioned_ps,
                    [](Strategy& s) { s.mutable_node_config(1)->mutable_part_config(1)->set_var_name("v1/part_0:0"); }),
             Contains("node_config[1] (\"v1:0\").part_config[1]: var_name \"v1/part_0:0\" is empty or used twice"));
  CHECK_THAT(broken(BuilderKind::partitioned_ps,
                    [](Strategy& s) { s.mutable_node_config(1)->mutable_part_config(0)->clear_synchronizer(); }),
             Contains("part_config[0]: no synchronizer"));
  CHECK_THAT(broken(BuilderKind::partitioned_ps,
                    [](Strategy& s) { s.mutable_node_config(1)->mutable_part_config(0)->set_partitioner("2,1"); }),
             Contains("cannot be partitioned again"));
  CHECK_THAT(broken(BuilderKind::partitioned_ps, [](Strategy& s) { s.mutable_node_config(1)->clear_partitioner(); }),
             Contains("has 2 part_config entries but no partitioner"));
}

TEST_CASE("validate: replicas") {
  CHECK_THAT(broken(BuilderKind::ps, [](Strategy& s) { s.mutable_graph_config()->clear_replicas(); }),
             Contains("graph_config.replicas is empty"));
  CHECK_THAT(broken(BuilderKind::ps, [](Strategy& s) { s.mutable_graph_config()->add_replicas("192.168.0.1:GPU:0"); }),
             Contains("graph_config.replicas[4]: 192.168.0.1:GPU:0 is listed twice"));
  CHECK_THAT(broken(BuilderKind::ps, [](Strategy& s) { s.mutable_graph_config()->set_replicas(0, "gpu0"); }),
             Contains("graph_config.replicas[0]: device name \"gpu0\""));
  CHECK_THAT(broken(
                 BuilderKind::ps, [](Strategy& s) { s.mutable_graph_config()->set_replicas(0, "192.168.0.1:GPU:7"); },
                 true),
             Contains("192.168.0.1:GPU:7 is not in the resource spec"));
}
