#pragma once
/// The averaging scenario (`apiary sim averaging`): N averagers (AveragerHost: a DHT
/// node, matchmaking and a butterfly all-reduce each) form their DHT, then run R rounds.
/// In each round every live peer starts a step a little after the round begins,
/// matchmaking forms groups of up to G through the DHT, each group averages the peers'
/// vectors and every member applies the delta (alpha 1); meanwhile the fault injector
/// kills a fraction of the live peers at random times inside the round. The checker
/// reports, per round, how many live peers completed, the group sizes, the spread of
/// the vectors across peers and their mean. Same config (seed included), same trace hash.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/scenarios/averaging_host.hpp"
#include "sim/world.hpp"

namespace apiary::sim::scenarios {

/// What to run.
struct AveragingScenarioConfig {
  std::uint64_t seed = 1;        ///< seeds the World (ids, values, picks, kills, latencies)
  std::size_t peers = 256;       ///< averagers (>= 2)
  std::size_t group = 16;        ///< target group size (>= 2)
  std::size_t rounds = 5;        ///< averaging rounds (>= 1)
  /// Fraction in [0, 1) of the live peers killed at random times inside each round
  /// (rounded to the nearest count).
  double fail_rate = 0.05;
  core::Duration min_latency = std::chrono::milliseconds(1);    ///< one-way, per link
  core::Duration max_latency = std::chrono::milliseconds(100);  ///< one-way, per link
  std::size_t values = 1000;     ///< floats averaged per peer (>= 1), uniform in [-1, 1)
  /// Moshpit grid: bits of the group key (0: one key "avg.0b" for everyone; else peer i
  /// starts in bucket i mod 2^bits and moves by the Moshpit update after each round).
  std::size_t grid_bits = 0;
  std::string prefix = "avg";    ///< group key prefix
  /// Between two rounds' beginnings; every round's work must fit in it.
  core::Duration round_period = std::chrono::seconds(30);
  /// Peers start their step at round start + uniform [0, start_jitter).
  core::Duration start_jitter = std::chrono::seconds(1);
  core::Duration min_matchmaking_time = std::chrono::seconds(5);  ///< matchmaking
  core::Duration request_timeout = std::chrono::seconds(1);       ///< matchmaking
  /// A step without a group this long after the round began fails.
  core::Duration matchmaking_deadline = std::chrono::seconds(15);
  /// Peer i's DHT node starts at i * start_interval; round 0 begins start_interval * peers
  /// + warmup.
  core::Duration start_interval = std::chrono::milliseconds(5);
  core::Duration warmup = std::chrono::seconds(5);
  std::size_t bootstrap_peers = 3;  ///< random earlier peers each DHT node bootstraps from
  AveragerSettings averager{};      ///< DHT node and all-reduce settings of every peer
  /// Keep every peer's values before and after each round in the report.
  bool keep_values = false;
};

/// Checks an AveragingScenarioConfig; the error names the field, its value and the range.
[[nodiscard]] Status validate(const AveragingScenarioConfig& config);

/// What one round measured, over the peers alive at its end.
struct RoundReport {
  std::size_t round = 0;
  std::size_t live = 0;       ///< peers alive at the end of the round
  std::size_t completed = 0;  ///< ... whose all-reduce finished and was applied
  std::size_t killed = 0;     ///< peers killed during the round
  std::map<std::size_t, std::size_t> group_sizes;  ///< size -> groups formed of that size
  std::size_t failed_peers = 0;  ///< failed senders/reducers seen by live completed peers
  double spread_before = 0.0;  ///< mean over elements of the std across live peers
  double spread_after = 0.0;
  double mean_before = 0.0;    ///< mean of every value of the live peers
  double mean_after = 0.0;
  std::map<std::string, std::size_t> errors;  ///< why live peers did not complete -> count
  /// With keep_values: each peer's values at the round's beginning (empty for a peer not
  /// running then) and at its end.
  std::vector<std::vector<float>> values_before;
  std::vector<std::vector<float>> values_after;

  /// completed / live (1 when no peer is alive).
  [[nodiscard]] double completion() const;
};

/// What a run measured.
struct AveragingScenarioReport {
  std::uint64_t seed = 0;
  std::uint64_t trace_hash = 0;
  std::size_t peers = 0;
  std::size_t group = 0;
  std::vector<RoundReport> rounds;
  core::TimePoint virtual_time{};  ///< virtual time at the end of the run
  WorldStats world;                ///< the World's counters at the end
  std::size_t anomalies = 0;       ///< World::anomalies() (0 in a correct run)

  /// The lowest completion() over the rounds (1 with no rounds).
  [[nodiscard]] double min_completion() const;
};

/// Runs the scenario to the end. Errors: a config that fails validate(), or peers that
/// could not be added to the World.
[[nodiscard]] Result<AveragingScenarioReport> run_averaging_scenario(const AveragingScenarioConfig& config);

/// The report as readable lines: one per round, then seed and trace hash.
[[nodiscard]] std::string format_report(const AveragingScenarioReport& report);

}  // namespace apiary::sim::scenarios
