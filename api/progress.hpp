#pragma once
/// apiary::ProgressTracker: a collaborative run's progress beside a Dht (hivemind's
/// ProgressTracker, reference §7; the arithmetic and the role are core/optim/). It adds
/// the run's validators to the node (an ownership validator of its key and the progress
/// schema under the run's prefix), publishes this peer's progress and reads the swarm's
/// on its own actor, and answers the trainer's calls.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "api/dht.hpp"
#include "core/optim/progress_role.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/result.hpp"

namespace apiary {

using ProgressSnapshot = core::optim::ProgressSnapshot;

/// How to start a tracker.
struct ProgressTrackerOptions {
  /// The run's name: records live under "<run_id>_progress" (hivemind's prefix).
  std::string run_id;
  /// target_batch_size, client_mode, refresh periods, EMA, metadata_expiration.
  core::optim::ProgressConfig tracker;
  /// The key this peer's record is signed with (its subkey names it); empty: one key per
  /// process, shared by every tracker of the process (hivemind's process-wide key).
  std::optional<messages::Ed25519PrivateKey> owner_key;
};

class ProgressTracker {
 public:
  /// Starts a tracker on `dht` (which must outlive it). Errors: invalid options
  /// (invalid_argument), a stopped node (cancelled).
  static Result<std::unique_ptr<ProgressTracker>> start(Dht& dht, ProgressTrackerOptions options);
  /// Leaves the run (publishes None, waiting at most a second) and stops.
  ~ProgressTracker();
  ProgressTracker(const ProgressTracker&) = delete;
  ProgressTracker& operator=(const ProgressTracker&) = delete;

  /// report_local_progress: `samples_accumulated` toward `epoch`; published at once.
  Result<ProgressSnapshot> report(std::int64_t epoch, std::int64_t samples_accumulated,
                                  bool update_global_samples = true);
  /// Moves to `epoch` (default: the local one + 1); returns the new local epoch.
  Result<std::int64_t> update_epoch(std::optional<std::int64_t> epoch = std::nullopt);
  /// The tracker as it stands.
  Result<ProgressSnapshot> look();
  /// Reads every peer's record now; the snapshot after.
  Result<ProgressSnapshot> fetch(std::chrono::milliseconds patience = std::chrono::seconds(30));
  /// Publishes None (this peer left the run); whether the DHT took it. Later reports fail.
  Result<bool> leave(std::chrono::milliseconds patience = std::chrono::seconds(10));
  /// Holds reports and fetches back until pause(false) (hivemind's pause_updates), so that
  /// several calls are published as one.
  Status pause(bool paused);
  /// The owner marker of this peer's record (its subkey).
  [[nodiscard]] const std::string& owner_marker() const { return owner_marker_; }

 private:
  ProgressTracker() = default;
  Result<core::Value> call(const char* method, core::Value args, std::chrono::milliseconds patience);

  std::shared_ptr<Runtime> runtime_;  ///< the node's own runtime, if it has one: it outlives this tracker
  std::shared_ptr<actors::Gateway> gateway_;
  std::shared_ptr<caf::actor> actor_;  ///< the role's host
  std::string owner_marker_;
  bool left_ = false;
};

}  // namespace apiary
