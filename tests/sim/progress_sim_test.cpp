// Collaborative trainers' progress trackers in the simulator: trainers of mixed speed,
// each a DHT node with a ProgressRole, move through epochs together while peers are
// replaced; every live peer keeps up, no epoch goes back, ETAs land near the epochs'
// ends, and a seed replays.
#include <catch2/catch.hpp>

#include <chrono>

#include "sim/scenarios/progress_scenario.hpp"
#include "tests/sim/scenario_report.hpp"

namespace {

using namespace std::chrono_literals;
namespace scenarios = apiary::sim::scenarios;

scenarios::ProgressScenarioReport run_or_fail(const scenarios::ProgressScenarioConfig& config, const char* name) {
  return apiary::testing::report_or_fail(scenarios::run_progress_scenario(config), name);
}

/// 60 trainers of 16-256 samples/s, 10 s epochs, 1-200 ms links of 12.5 MB/s, 10% of the
/// live peers replaced in every epoch.
scenarios::ProgressScenarioConfig small_config() {
  scenarios::ProgressScenarioConfig config;
  config.seed = 3;
  config.peers = 60;
  config.epoch_seconds = 10;
  config.epochs = 5;
  config.churn = 0.1;
  return config;
}

}  // namespace

TEST_CASE("60 trainers with 10% churn per epoch: every live peer keeps up and no epoch goes back") {
  const auto report = run_or_fail(small_config(), "60 trainers, churn 0.1");
  CHECK(report.finished);
  CHECK(report.anomalies == 0);
  CHECK(report.stalled == 0);
  CHECK(report.regressions == 0);
  CHECK(report.joined >= 20);  // 10% of 60 in each of 4 epochs (rounded), each replaced
  CHECK(report.joined == report.killed);
  CHECK(report.caught_up >= report.joined / 2);  // joiners take the swarm's epoch
  REQUIRE(report.epochs.size() == 6);
  for (std::size_t e = 1; e + 1 < report.epochs.size(); ++e) {
    const auto& epoch = report.epochs[e];
    INFO("epoch " << e);
    // The target is set for 10 s at the swarm's mean speed.
    CHECK(epoch.seconds > 7);
    CHECK(epoch.seconds < 14);
    CHECK(epoch.reached >= 55);
    // Once the speeds are learned, the ETAs of an epoch's second half land near its end.
    CHECK(epoch.eta_samples > 100);
    CHECK(epoch.eta_median_error < 0.25 * epoch.seconds);
  }
}

TEST_CASE("progress: the same seed gives the same trace hash, another seed another one") {
  auto config = small_config();
  config.epochs = 2;
  const auto a = run_or_fail(config, "progress replay a");
  const auto b = run_or_fail(config, "progress replay b");
  CHECK(a.trace_hash == b.trace_hash);
  config.seed += 1;
  CHECK(run_or_fail(config, "progress other seed").trace_hash != a.trace_hash);
}

TEST_CASE("progress: a bad config is refused with the field named") {
  auto config = small_config();
  config.churn = 1.0;
  auto report = scenarios::run_progress_scenario(config);
  REQUIRE_FALSE(report.ok());
  CHECK(report.error().what().find("churn") != std::string::npos);
  config = small_config();
  config.max_speed = 1;
  CHECK_FALSE(scenarios::run_progress_scenario(config).ok());
}
