#pragma once
/// The collaborative-training progress scenario (`apiary sim progress`): N trainers of
/// mixed speed, each a DHT node with a core::optim::ProgressRole (hivemind's
/// ProgressTracker) driven the way apiary.Optimizer drives it: after every batch the
/// trainer reports its samples and looks at the swarm's progress; it moves to the next
/// epoch when the tracker says the swarm gathered target_batch_size (or its ETA passed),
/// and a peer behind the swarm jumps to the swarm's epoch (as loading the state does).
/// Churn: at each epoch the swarm begins, a share of the live peers is killed at random
/// times inside the epoch, and as many fresh peers join. Links have a latency each (from
/// a seeded hash) and a bandwidth.
///
/// The report: per epoch, its length, the peers that reached it, and the error of the
/// ETAs the peers computed in its second half; the peers whose epoch stalled (alive long
/// enough, yet more than one epoch behind the swarm at the end) and any epoch that went
/// back (both 0 in a correct run). Records are checked by the progress schema but not
/// signed (Ed25519 costs tens of microseconds a record; signing is tested with real keys
/// in tests/core/optim). Same config, same trace hash.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dht/node.hpp"
#include "core/optim/progress.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/world.hpp"

namespace apiary::sim::scenarios {

struct ProgressScenarioConfig {
  std::uint64_t seed = 7;
  std::size_t peers = 1000;           ///< trainers at the start (>= 2)
  std::int64_t batch = 32;            ///< samples per step
  double min_speed = 16;              ///< samples/s of the slowest trainer (uniform in [min, max])
  double max_speed = 256;
  double epoch_seconds = 20;          ///< target_batch_size = epoch_seconds * the swarm's mean speed
  std::size_t epochs = 6;             ///< run until the swarm's epoch reaches this
  double churn = 0.1;                 ///< share of the live peers replaced during each epoch, [0, 1)
  core::Duration min_latency = std::chrono::milliseconds(1);
  core::Duration max_latency = std::chrono::milliseconds(200);
  double bandwidth = 12.5e6;          ///< bytes/s of every link (0: unlimited)
  core::Duration start_interval = std::chrono::milliseconds(2);  ///< peer i starts at i * this
  core::Duration warmup = std::chrono::seconds(5);  ///< after the last start, training begins
  core::Duration max_time = std::chrono::seconds(900);  ///< virtual time limit
  std::size_t bootstrap_peers = 3;
  core::optim::ProgressConfig tracker{};  ///< target_batch_size is set from epoch_seconds
  core::dht::NodeConfig node = [] {
    core::dht::NodeConfig config;
    config.wait_timeout = std::chrono::seconds(1);
    return config;
  }();
  double dht_epoch = 1.7e9;
};

[[nodiscard]] Status validate(const ProgressScenarioConfig& config);

/// One epoch of the swarm.
struct EpochReport {
  std::int64_t epoch = 0;
  double began = 0;          ///< virtual s at which the first peer entered it
  double seconds = 0;        ///< until the first peer entered the next one (0: not ended)
  std::size_t live = 0;      ///< peers alive when it ended (or at the run's end)
  std::size_t reached = 0;   ///< peers that were at this epoch at some point
  std::size_t eta_samples = 0;  ///< ETAs computed in its second half
  double eta_median_error = 0;  ///< median |ETA - actual end| of those, seconds
  double eta_p90_error = 0;
};

struct ProgressScenarioReport {
  std::uint64_t seed = 0;
  std::uint64_t trace_hash = 0;
  std::size_t peers = 0;
  std::int64_t target_batch_size = 0;
  std::vector<EpochReport> epochs;
  std::size_t joined = 0;       ///< fresh peers started by churn
  std::size_t killed = 0;
  std::size_t live_at_end = 0;
  std::size_t stalled = 0;      ///< alive 2 epochs or more at the end, yet 2 or more epochs behind
  std::size_t regressions = 0;  ///< a peer's epoch went back
  std::size_t caught_up = 0;    ///< jumps to the swarm's epoch (joiners and laggards)
  std::size_t reports_stored = 0;  ///< progress records the DHT accepted, all peers
  std::size_t fetches = 0;         ///< reads of the records, all peers
  core::TimePoint virtual_time{};
  WorldStats world;
  std::size_t anomalies = 0;
  bool finished = false;        ///< the swarm reached `epochs` before max_time
};

/// Runs the scenario. Errors: a config that fails validate().
[[nodiscard]] Result<ProgressScenarioReport> run_progress_scenario(const ProgressScenarioConfig& config);

/// The report as readable lines.
[[nodiscard]] std::string format_report(const ProgressScenarioReport& report);

}  // namespace apiary::sim::scenarios
