#pragma once
/// What the simulated PS and all-reduce tests share: a job on one node of four CPU
/// devices (four replicas) and the single-process SGD it must match.
#include <catch2/catch.hpp>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "core/ps/logistic_regression.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/resource_spec.hpp"
#include "tests/support/ar_options.hpp"
#include "sim/scenarios/ps_scenario.hpp"

namespace apiary::testing::sim_ps {

namespace cs = core::strategy;
namespace cps = core::ps;
using testing::Sync;

using sim::scenarios::PsScenarioConfig;
using sim::scenarios::PsScenarioReport;

inline constexpr std::size_t k_replicas = 4;

/// One node with four CPU devices: four replicas, four candidate PS devices.
inline constexpr const char* k_spec = "nodes:\n  - address: localhost\n    cpus: [0, 1, 2, 3]\n";

/// A 12-step job of the strategy `kind` builds with `options` for the model `item` and
/// the resource spec `spec_text`, the scenario's defaults otherwise.
inline PsScenarioConfig make_config(const core::strategy::GraphItem& item, core::strategy::BuilderKind kind,
                                    const core::strategy::BuilderOptions& options = {},
                                    const char* spec_text = k_spec) {
  auto spec = core::strategy::parse_resource_spec(spec_text, "spec");
  REQUIRE(spec.ok());
  PsScenarioConfig c;
  auto strategy = core::strategy::build_strategy(kind, options, item, *spec, "20260101T000000M000000");
  REQUIRE(strategy.ok());
  c.strategy = std::move(*strategy);
  c.steps = 12;
  return c;
}

/// make_config() for the logistic-regression model of the scenario's defaults.
inline PsScenarioConfig make_config(core::strategy::BuilderKind kind,
                                    const core::strategy::BuilderOptions& options = {},
                                    const char* spec_text = k_spec) {
  return make_config(core::ps::logistic_graph_item(PsScenarioConfig{}.features), kind, options, spec_text);
}

/// Runs `c`, which must succeed with one report per replica, no anomaly and no hang.
inline sim::scenarios::PsScenarioReport run_checked(const sim::scenarios::PsScenarioConfig& c) {
  auto report = sim::scenarios::run_ps_scenario(c);
  if (!report.ok()) FAIL(report.error().what());
  INFO(sim::scenarios::format_report(*report));
  CHECK(report->anomalies == 0);
  CHECK_FALSE(report->hung);
  REQUIRE(report->replicas.size() == k_replicas);
  return std::move(*report);
}

/// Runs `c` twice at seed 7 (the same trace, events and report) and once at seed 8 (another
/// trace); returns the seed-8 report.
inline sim::scenarios::PsScenarioReport check_replays(sim::scenarios::PsScenarioConfig c) {
  c.seed = 7;
  const auto a = run_checked(c);
  const auto b = run_checked(c);
  CHECK(a.trace_hash == b.trace_hash);
  CHECK(a.world.events == b.world.events);
  CHECK(sim::scenarios::format_report(a) == sim::scenarios::format_report(b));
  c.seed = 8;  // other link latencies, another trace
  auto d = run_checked(c);
  CHECK(d.trace_hash != a.trace_hash);
  return d;
}

/// Every replica of `report` finished, with final parameters within `margin` of `expected`.
inline void check_close(const PsScenarioReport& report, const std::map<std::string, std::vector<float>>& expected,
                        double margin) {
  for (const auto& r : report.replicas) {
    INFO("replica " << r.replica << ": " << r.error);
    REQUIRE(r.finished);
    for (const auto& [name, values] : expected) {
      const auto& got = r.final_parameters.at(name);
      REQUIRE(got.size() == values.size());
      for (std::size_t i = 0; i < values.size(); ++i) CHECK(got[i] == Approx(values[i]).margin(margin));
    }
  }
}

/// Bulk-synchronous: step s of every replica ran on the parameters of exactly s steps.
inline void check_bsp(const PsScenarioReport& report) {
  for (const auto& s : report.steps) {
    for (auto v : s.versions) CHECK(v == s.step);
  }
}

/// What run_killing() kills: the first PS device, or the last replica.
enum class Kill { ps, replica };

/// `c` run (run_checked()) for up to 1000 steps with `what` killed at step `step`.
inline PsScenarioReport run_killing(PsScenarioConfig c, Kill what, std::int64_t step) {
  c.steps = 1000;
  (what == Kill::ps ? c.kill_ps_at : c.kill_replica_at) = step;
  return run_checked(c);
}

/// The replicas of `report` but the last (the one killed), each checked to have stopped
/// unfinished with an error holding every one of `needles`.
inline std::vector<const sim::scenarios::PsReplicaOutcome*> others_failed(const PsScenarioReport& report,
                                                                          std::initializer_list<const char*> needles) {
  std::vector<const sim::scenarios::PsReplicaOutcome*> others;
  for (std::size_t r = 0; r + 1 < report.replicas.size(); ++r) {
    const auto& o = report.replicas[r];
    INFO("replica " << r << ": " << o.error);
    CHECK_FALSE(o.finished);
    for (const char* needle : needles) CHECK(o.error.find(needle) != std::string::npos);
    others.push_back(&o);
  }
  return others;
}

/// Single-process SGD on the concatenated batch of all replicas, c.steps steps.
inline std::map<std::string, std::vector<float>> reference_sgd(const sim::scenarios::PsScenarioConfig& c) {
  const auto data = cps::make_logistic_data(c.samples, c.features, c.data_seed);
  auto params = cps::logistic_initial(c.features);
  for (std::int64_t s = 0; s < c.steps; ++s) {
    std::map<std::string, std::vector<float>> grads;
    (void)cps::logistic_loss(data, cps::logistic_batch(data, 1, 0, s, k_replicas * c.batch), params, &grads);
    for (auto& [name, values] : params) {
      for (std::size_t i = 0; i < values.size(); ++i) values[i] -= c.optimizer.learning_rate * grads[name][i];
    }
  }
  return params;
}

}  // namespace apiary::testing::sim_ps
