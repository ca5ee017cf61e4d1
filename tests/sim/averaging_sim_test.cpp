// Decentralized averaging in the simulator: averagers that are at once DHT nodes find
// groups through their own DHT, run the butterfly all-reduce and apply the deltas, round
// after round, with and without peers dying; and replay by seed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

#include "core/averaging/powersgd.hpp"
#include "sim/scenarios/averaging_scenario.hpp"
#include "tests/sim/scenario_report.hpp"

namespace {

using namespace std::chrono_literals;
using apiary::sim::scenarios::AveragingScenarioConfig;
using apiary::sim::scenarios::AveragingScenarioReport;
namespace scenarios = apiary::sim::scenarios;

AveragingScenarioReport run_or_fail(const AveragingScenarioConfig& config, const char* name) {
  return apiary::testing::report_or_fail(scenarios::run_averaging_scenario(config), name);
}

/// `peers` averagers in groups of `group` over 1-100 ms links, `fail_rate` of them dying
/// per round.
AveragingScenarioConfig config_of(std::uint64_t seed, std::size_t peers, std::size_t group, std::size_t rounds,
                                  double fail_rate) {
  AveragingScenarioConfig config;
  config.seed = seed;
  config.peers = peers;
  config.group = group;
  config.rounds = rounds;
  config.fail_rate = fail_rate;
  config.min_latency = 1ms;
  config.max_latency = 100ms;
  return config;
}

/// 16 averagers in groups of 4 averaging 1,000 values for 3 rounds, none dying.
AveragingScenarioConfig small_config() {
  AveragingScenarioConfig config = config_of(11, 16, 4, 3, 0.0);
  config.values = 1000;
  return config;
}

}  // namespace

TEST_CASE("16 averagers in groups of 4: every peer completes every round and the spread shrinks") {
  const AveragingScenarioConfig config = small_config();
  const auto report = run_or_fail(config, "16 peers, group 4, 3 rounds");
  CHECK(report.anomalies == 0);
  REQUIRE(report.rounds.size() == 3);
  for (const auto& round : report.rounds) {
    INFO("round " << round.round);
    CHECK(round.live == 16);
    CHECK(round.completed == 16);
    CHECK(round.killed == 0);
    std::size_t members = 0;
    for (const auto& [size, count] : round.group_sizes) {
      CHECK(size >= 2);
      CHECK(size <= 4);
      members += size * count;
    }
    CHECK(members == 16);
    CHECK(round.spread_after < round.spread_before);
    // No peer died: the all-reduce preserves the mean (float32 sums of 1,000 values).
    CHECK(std::abs(round.mean_after - round.mean_before) < 1e-5);
  }
  CHECK(report.rounds.back().spread_after < 0.5 * report.rounds.front().spread_before);
}

TEST_CASE("reductions on a modelled device: every peer completes, the mean is kept, the trace replays") {
  AveragingScenarioConfig config = small_config();
  config.averager.part_size_bytes = 256;        // many parts per reducer, many device jobs
  config.averager.device_ns_per_value = 20000;  // 20 us per value: jobs queue up on each device
  const auto a = run_or_fail(config, "16 peers, device reductions");
  CHECK(a.anomalies == 0);
  REQUIRE(a.rounds.size() == 3);
  for (const auto& round : a.rounds) {
    INFO("round " << round.round);
    CHECK(round.completed == 16);
    CHECK(std::abs(round.mean_after - round.mean_before) < 1e-5);
    CHECK(round.spread_after < round.spread_before);
  }
  const auto b = run_or_fail(config, "16 peers, device reductions, replay");
  CHECK(a.trace_hash == b.trace_hash);
  // The device time shows in the trace: the same run with inline reductions differs.
  config.averager.device_ns_per_value = 0;
  CHECK(run_or_fail(config, "16 peers, inline reductions").trace_hash != a.trace_hash);
}

TEST_CASE("the same seed gives the same trace hash, another seed another one") {
  AveragingScenarioConfig config = small_config();
  config.rounds = 2;
  const auto a = run_or_fail(config, "replay a");
  const auto b = run_or_fail(config, "replay b");
  CHECK(a.trace_hash == b.trace_hash);
  config.seed += 1;
  const auto c = run_or_fail(config, "other seed");
  CHECK(c.trace_hash != a.trace_hash);
}

TEST_CASE("a bad config is refused with the field named") {
  AveragingScenarioConfig config = small_config();
  config.group = 1;
  auto report = scenarios::run_averaging_scenario(config);
  REQUIRE_FALSE(report.ok());
  CHECK(report.error().what().find("group") != std::string::npos);
}

TEST_CASE("256 averagers, groups of 16, 1-100 ms links, 5% dying per round: >= 95% complete") {
  const AveragingScenarioConfig config = config_of(5, 256, 16, 5, 0.05);
  const auto report = run_or_fail(config, "256 peers, group 16, 5% failures");
  CHECK(report.anomalies == 0);
  REQUIRE(report.rounds.size() == 5);
  std::size_t killed = 0;
  for (const auto& round : report.rounds) {
    INFO("round " << round.round);
    CHECK(round.completion() >= 0.95);
    CHECK(round.killed >= 10);
    CHECK(round.group_sizes.rbegin()->first <= 16);
    CHECK(round.spread_after < round.spread_before);
    killed += round.killed;
  }
  CHECK(report.rounds.front().live == 256 - report.rounds.front().killed);
  CHECK(report.rounds.back().live == 256 - killed);
  CHECK(report.rounds.back().spread_after < 0.01 * report.rounds.front().spread_before);

  // Replaying the seed reproduces the run event for event.
  const auto replay = run_or_fail(config, "256 peers, replay");
  CHECK(replay.trace_hash == report.trace_hash);
}

namespace {

namespace avg = apiary::core::averaging;

/// PowerSGD's round as the reference states it, in double precision: the peers' M = error
/// + gradient, P = mean(M Q), orthogonalized, Q = mean(M^T P), result P Q^T; the errors
/// become M - P Q^T and Q is kept.
struct ReferencePowerSgd {
  std::size_t rows, cols, rank;
  std::vector<double> q;
  std::vector<std::vector<double>> errors;

  std::vector<double> round(const std::vector<std::vector<float>>& grads) {
    const std::size_t n = grads.size();
    std::vector<std::vector<double>> m(n, std::vector<double>(rows * cols));
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t e = 0; e < rows * cols; ++e) m[i][e] = errors[i][e] + grads[i][e];
    }
    std::vector<double> p(rows * rank, 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t k = 0; k < rank; ++k) {
          double sum = 0;
          for (std::size_t c = 0; c < cols; ++c) sum += m[i][r * cols + c] * q[c * rank + k];
          p[r * rank + k] += sum / static_cast<double>(n);
        }
      }
    }
    for (std::size_t k = 0; k < rank; ++k) {  // Gram-Schmidt over the columns
      double norm = 0;
      for (std::size_t r = 0; r < rows; ++r) norm += p[r * rank + k] * p[r * rank + k];
      norm = std::max(std::sqrt(norm), 1e-8);
      for (std::size_t r = 0; r < rows; ++r) p[r * rank + k] /= norm;
      for (std::size_t j = k + 1; j < rank; ++j) {
        double dot = 0;
        for (std::size_t r = 0; r < rows; ++r) dot += p[r * rank + k] * p[r * rank + j];
        for (std::size_t r = 0; r < rows; ++r) p[r * rank + j] -= dot * p[r * rank + k];
      }
    }
    std::fill(q.begin(), q.end(), 0.0);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t c = 0; c < cols; ++c) {
        for (std::size_t k = 0; k < rank; ++k) {
          double sum = 0;
          for (std::size_t r = 0; r < rows; ++r) sum += m[i][r * cols + c] * p[r * rank + k];
          q[c * rank + k] += sum / static_cast<double>(n);
        }
      }
    }
    std::vector<double> approx(rows * cols, 0.0);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c) {
        for (std::size_t k = 0; k < rank; ++k) approx[r * cols + c] += p[r * rank + k] * q[c * rank + k];
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t e = 0; e < rows * cols; ++e) errors[i][e] = m[i][e] - approx[e];
    }
    return approx;
  }
};

}  // namespace

TEST_CASE("PowerSGD: 4 averagers in one group end each round with the group's rank-2 average and keep the error") {
  AveragingScenarioConfig config = config_of(5, 4, 4, 3, 0.0);
  config.values = 40 * 25;
  config.keep_values = true;
  avg::PowerSgdConfig powersgd;
  powersgd.rank = 2;
  powersgd.matrices = {avg::PowerSgdMatrix{40, 25}};
  powersgd.seed = 99;
  config.averager.powersgd = powersgd;
  const auto report = run_or_fail(config, "4 peers, PowerSGD rank 2");
  CHECK(report.anomalies == 0);
  REQUIRE(report.rounds.size() == 3);
  ReferencePowerSgd reference{40, 25, 2, {}, std::vector<std::vector<double>>(4, std::vector<double>(1000, 0.0))};
  for (float v : avg::powersgd_initial_q(99, 0, 25, 2)) reference.q.push_back(v);
  for (const auto& round : report.rounds) {
    INFO("round " << round.round);
    REQUIRE(round.completed == 4);
    REQUIRE(round.group_sizes == std::map<std::size_t, std::size_t>{{4, 1}});
    const std::vector<double> expected = reference.round(round.values_before);
    double worst = 0;
    for (const auto& values : round.values_after) {
      REQUIRE(values.size() == expected.size());
      for (std::size_t e = 0; e < expected.size(); ++e) worst = std::max(worst, std::abs(values[e] - expected[e]));
    }
    CHECK(worst < 1e-4);
  }
}
