#pragma once
/// Collaborative training progress (hivemind's ProgressTracker, reference §7): every peer
/// publishes its LocalProgress as its own subkey of "<run_id>_progress" (signed by the
/// DHT node's ownership validator, checked by the progress schema); every peer reads them
/// all back and derives the swarm's GlobalProgress: the epoch, the samples gathered
/// toward target_batch_size, when the next epoch is due and when to look again.
///
/// ProgressTracker here is the arithmetic alone (what hivemind's computes, for given
/// times); ProgressRole (progress_role.hpp) hosts it with its timers and DHT work.
/// Pure: DHT time and the monotonic time come in as arguments.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dht/schema_validator.hpp"
#include "messages/result.hpp"

namespace apiary::core::optim {

/// One peer's progress as it publishes it (hivemind's LocalTrainingProgress).
struct LocalProgress {
  std::string peer_id;                   ///< PeerID bytes
  std::int64_t epoch = 0;                ///< the peer's local epoch (>= 0)
  std::int64_t samples_accumulated = 0;  ///< samples toward this epoch (>= 0)
  double samples_per_second = 0;         ///< the peer's recent speed (>= 0)
  double time = 0;                       ///< DHT time of the report
  bool client_mode = false;              ///< a client: does not move the global epoch
};

/// The msgpack of hivemind's LocalTrainingProgress.dict(): a map of the six fields in
/// declaration order (peer_id bin, epoch and samples_accumulated int, samples_per_second
/// and time float64, client_mode bool).
[[nodiscard]] std::string pack_progress(const LocalProgress& progress);
/// A published progress from untrusted bytes; errc::malformed unless it is such a map
/// with exactly those fields of those types (strictly, as the schema checks them).
[[nodiscard]] Result<LocalProgress> unpack_progress(std::string_view packed);

/// The DHT key of a run's progress records: "<run_id>_progress".
[[nodiscard]] std::string progress_key(const std::string& run_id);
/// The schema field of the progress records (hivemind's TrainingProgressSchema, prefix
/// run_id): a dictionary of owner-marked subkeys to Optional[LocalTrainingProgress].
[[nodiscard]] dht::SchemaField progress_schema_field();

/// The swarm's progress as one peer sees it (hivemind's GlobalTrainingProgress).
struct GlobalProgress {
  std::int64_t epoch = 0;                ///< the highest epoch of a non-client peer (or ours)
  std::int64_t samples_accumulated = 0;  ///< reported samples of the peers at that epoch
  std::int64_t target_batch_size = 0;
  std::size_t num_peers = 0;
  std::size_t num_clients = 0;
  double eta_next_epoch = 0;   ///< DHT time the next epoch is due (infinity: unknown)
  double next_fetch_time = 0;  ///< DHT time to read the records again
};

/// Samples per second as a bias-corrected exponential moving average of the seconds per
/// sample (hivemind's PerformanceEMA).
class PerformanceEma {
 public:
  explicit PerformanceEma(double alpha = 0.1, double eps = 1e-20) : alpha_(alpha), eps_(eps), speed_(eps) {}
  /// `task_size` (> 0) samples took `interval` seconds (>= 0): the new speed.
  double update(double task_size, double interval);
  [[nodiscard]] double samples_per_second() const { return speed_; }
  [[nodiscard]] double eps() const { return eps_; }

 private:
  double alpha_;
  double eps_;
  double seconds_per_sample_ = 0;
  std::uint64_t updates_ = 0;
  double speed_;
};

/// What a ProgressTracker is made of (hivemind's defaults).
struct ProgressConfig {
  std::int64_t target_batch_size = 1;  ///< samples per collective epoch (> 0)
  bool client_mode = false;
  double min_refresh_period = 0.5;     ///< seconds between fetches, at least
  double max_refresh_period = 10;      ///< seconds between fetches, at most
  double default_refresh_period = 3;   ///< seconds to the next fetch when nobody reported (within min..max)
  double expected_drift_peers = 3;     ///< peers that may join before the next fetch
  double expected_drift_rate = 0.2;    ///< the share of peers that may join meanwhile
  double performance_ema_alpha = 0.1;
  double metadata_expiration = 60;     ///< seconds a report lives; reports every half of it

  /// Errors: errc::invalid_argument naming the first bad setting.
  [[nodiscard]] Status validate() const;
};

/// The tracker's state and arithmetic for one peer.
class ProgressTracker {
 public:
  /// At local epoch 0 with nothing accumulated, at monotonic time `mono_now` (seconds).
  ProgressTracker(ProgressConfig config, std::string peer_id, double mono_now, double dht_now);

  [[nodiscard]] const LocalProgress& local() const { return local_; }
  [[nodiscard]] const GlobalProgress& global() const { return global_; }
  [[nodiscard]] const ProgressConfig& config() const { return config_; }
  [[nodiscard]] double samples_per_second() const { return ema_.samples_per_second(); }

  /// report_local_progress: `samples_accumulated` toward `local_epoch` now; the speed
  /// learns from the samples added since the last report (a drop restarts its clock),
  /// and the global sample count follows when all three epochs agree.
  void report(double mono_now, double dht_now, std::int64_t local_epoch, std::int64_t samples_accumulated,
              bool update_global_samples = true);
  /// Moves to `new_epoch` (default local + 1) with nothing accumulated; the global epoch
  /// follows if behind (its samples 0, its ETA unknown). Returns the new local epoch.
  std::int64_t update_epoch(double mono_now, double dht_now, std::optional<std::int64_t> new_epoch = std::nullopt);

  /// The published progress of the peers just fetched (the live values of the progress
  /// dictionary; nullopt entries are peers that left, bytes that do not parse are
  /// skipped): recomputes the global progress as of `dht_now`.
  void on_fetched(double dht_now, const std::vector<std::optional<LocalProgress>>& peers);
  /// Whether the records were read since the last epoch change.
  [[nodiscard]] bool fetched_this_epoch() const { return fetched_this_epoch_; }

  /// The swarm is ahead of us, has gathered target_batch_size, or its ETA passed.
  [[nodiscard]] bool ready_to_update_epoch(double dht_now) const;
  /// dht_now when ready, else the ETA.
  [[nodiscard]] double estimated_next_update_time(double dht_now) const;

 private:
  ProgressConfig config_;
  PerformanceEma ema_;
  double ema_clock_;  ///< monotonic seconds of the last report (or reset)
  LocalProgress local_;
  GlobalProgress global_;
  bool fetched_this_epoch_ = false;
};

}  // namespace apiary::core::optim
