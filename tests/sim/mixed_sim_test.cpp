// Mixed strategies on the simulated network (sim/scenarios/ps_scenario.hpp, reached
// through run_ps_scenario): Parallax (the sparse w on a PS device, the dense b
// all-reduced) and a hand-written mix (w all-reduced, b on a PS) equal single-process
// SGD on the concatenated batch; a seed replays its trace hash; a killed PS device or
// replica ends the other replicas with an error naming it (never a hang).
#include <catch2/catch.hpp>
#include <string>

#include "core/ps/logistic_regression.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/resource_spec.hpp"
#include "sim/scenarios/ps_scenario.hpp"
#include "tests/sim/ps_job_config.hpp"

using namespace apiary;
using namespace apiary::testing::sim_ps;

namespace {

/// A 12-step Parallax job over a model whose w has sparse gradients.
PsScenarioConfig parallax_config() {
  auto item = cps::logistic_graph_item(PsScenarioConfig{}.features);
  REQUIRE(item.variables[0].name == cps::k_logreg_weights);
  item.variables[0].sparse = true;
  // A sparse gradient comes as indices, values and dense shape (AutoDist's ';'-joined key).
  item.grad_target_pairs = {{"g/w/indices:0;g/w/values:0;g/w/shape:0", cps::k_logreg_weights},
                            {"gradients/logreg/b_grad:0", cps::k_logreg_bias}};
  auto c = make_config(item, cs::BuilderKind::parallax);
  c.sparse_variables = {cps::k_logreg_weights};
  return c;
}

void check_sgd(const PsScenarioReport& report, const PsScenarioConfig& c) {
  check_close(report, reference_sgd(c), 1e-5);
  for (const auto& r : report.replicas) CHECK(r.final_version == c.steps);
  check_bsp(report);
}

}  // namespace

TEST_CASE("simulated Parallax (sparse w on a PS, b all-reduced) equals single-process SGD", "[sim][mixed]") {
  const auto c = parallax_config();
  const auto report = run_checked(c);
  INFO(sim::scenarios::format_report(report));
  REQUIRE(report.servers.size() == 1);
  CHECK(report.mode.find("mixed: PS [logreg/w:0 (sparse)] BSP") != std::string::npos);
  CHECK(report.mode.find("group 0 [logreg/b:0]") != std::string::npos);
  check_sgd(report, c);
  // Every PS pull of every step (and the final one) was answered.
  CHECK(report.ps_pulls == static_cast<std::uint64_t>(k_replicas * (c.steps + 1)));
}

TEST_CASE("a simulated Parallax job replays its trace hash from its seed", "[sim][mixed]") {
  auto c = parallax_config();
  const auto other = check_replays(c);
  c.seed = 8;
  check_sgd(other, c);  // the latencies differ, the arithmetic does not
}

TEST_CASE("a simulated hand-written mix (w all-reduced, b on a PS) equals single-process SGD", "[sim][mixed]") {
  auto c = make_config(cs::BuilderKind::all_reduce);
  bool moved = false;
  for (auto& node : *c.strategy.mutable_node_config()) {
    if (node.var_name() != cps::k_logreg_bias) continue;
    node.clear_allreducesynchronizer();
    node.mutable_pssynchronizer()->set_reduction_destination("localhost:CPU:2");
    node.mutable_pssynchronizer()->set_sync(true);
    moved = true;
  }
  REQUIRE(moved);
  const auto report = run_checked(c);
  INFO(sim::scenarios::format_report(report));
  REQUIRE(report.servers == std::vector<std::string>{"localhost:CPU:2"});
  CHECK(report.mode.find("mixed: PS [logreg/b:0] BSP") != std::string::npos);
  check_sgd(report, c);
}

TEST_CASE("a killed PS device or replica ends a simulated mixed job with errors naming it", "[sim][mixed]") {
  auto c = parallax_config();
  c.steps = 30;
  SECTION("PS device") {
    c.kill_ps_at = 4;
    const auto report = run_checked(c);
    INFO(sim::scenarios::format_report(report));
    for (const auto& r : report.replicas) {
      INFO("replica " << r.replica);
      CHECK_FALSE(r.finished);
      CHECK(r.steps < c.steps);
      CHECK_FALSE(r.error.empty());
    }
    // The replicas waiting on the PS name it; the others name a replica that left.
    bool named = false;
    for (const auto& r : report.replicas) {
      named = named || r.error.find("on PS " + report.servers.front()) != std::string::npos;
    }
    CHECK(named);
  }
  SECTION("replica") {
    c.kill_replica_at = 4;
    const auto report = run_checked(c);
    INFO(sim::scenarios::format_report(report));
    CHECK(report.replicas.back().killed);
    for (const auto* o : others_failed(report, {})) {
      INFO("replica " << o->replica << ": " << o->error);
      CHECK((o->error.find("rank 3") != std::string::npos || o->error.find("replica 3") != std::string::npos));
    }
  }
}
