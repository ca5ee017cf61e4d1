// Laying out a PS job from a strategy (core/ps/plan.hpp).
#include "core/ps/plan.hpp"

#include <catch2/catch.hpp>

#include "core/ps/logistic_regression.hpp"
#include "core/strategy/builders.hpp"

using namespace apiary;
using namespace apiary::core::ps;
namespace cs = apiary::core::strategy;

namespace {

pb::autodist::Strategy build(cs::BuilderKind kind) {
  auto spec = cs::parse_resource_spec("nodes:\n  - address: localhost\n    cpus: [0, 1, 2, 3]\n", "spec");
  REQUIRE(spec.ok());
  auto s = cs::build_strategy(kind, {}, logistic_graph_item(16), *spec, "id");
  REQUIRE(s.ok());
  return *s;
}

}  // namespace

TEST_CASE("plan of a load-balanced PS strategy: one shard per variable on two PS devices") {
  auto plan = plan_training(build(cs::BuilderKind::ps_load_balancing), logistic_graph_item(16), {});
  REQUIRE(plan.ok());
  CHECK(plan->replicas.size() == 4);
  REQUIRE(plan->shards.size() == 2);
  CHECK(plan->servers.size() == 2);
  CHECK(plan->shards[0].config.variable == k_logreg_weights);
  CHECK(plan->shards[0].config.replica_hosts == std::vector<std::int32_t>{0, 0, 0, 0});
  CHECK(plan->shards_on(plan->servers[0]).size() == 1);
  auto pieces = initial_pieces(*plan, logistic_initial(16));
  REQUIRE(pieces.ok());
  CHECK((*pieces)[0].size() == 16);
  CHECK((*pieces)[1].size() == 1);
}

TEST_CASE("plan of a partitioned PS strategy: one shard per partition") {
  auto plan = plan_training(build(cs::BuilderKind::partitioned_ps), logistic_graph_item(16), {});
  REQUIRE(plan.ok());
  REQUIRE(plan->variables.size() == 2);
  CHECK(plan->variables[0].shards.size() == 2);
  CHECK(plan->shards[plan->variables[0].shards[1]].config.layout.offset == 8);
}

TEST_CASE("plan refuses an all-reduce strategy and an unknown variable") {
  auto ar = plan_training(build(cs::BuilderKind::all_reduce), logistic_graph_item(16), {});
  REQUIRE_FALSE(ar.ok());
  CHECK(ar.error().message.find("expected a PSSynchronizer") != std::string::npos);
  auto s = build(cs::BuilderKind::ps);
  s.mutable_node_config(0)->set_var_name("other:0");
  auto unknown = plan_training(s, logistic_graph_item(16), {});
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message.find("other:0") != std::string::npos);
}
