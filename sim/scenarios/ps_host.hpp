#pragma once
/// Parameter-server training as simulated nodes: PsServerHost serves one PS device's
/// shards (core::ps::ShardServer), PsReplicaHost runs one replica's steps
/// (core::ps::Replica) on the logistic-regression workload, over the World's network.
/// Both speak the wire of core/ps/wire.hpp, exactly as the actors of actors/ps/ do, so
/// the simulation exercises the same protocol code as `apiary ps`.
///
/// A replica's step, in virtual time: pull every shard (in parallel) -> compute for
/// `compute` (a timer) -> push every shard (in parallel) -> the last ack starts the
/// next step. After the last step it pulls once more (the final parameters) and ends
/// its sessions. Any failed call ends the replica with an error naming the shard, the
/// PS device and its address; the replica then cancels its sessions, so every PS learns
/// that it left and fails the synchronous steps that waited for it.
///
/// Broken connections: the World has no transport, so the scenario tells hosts when a
/// peer's connection breaks (peer_down), as the gateway does for real processes.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/effects.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/ps/plan.hpp"
#include "core/ps/replica.hpp"
#include "core/ps/server.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/host.hpp"
#include "sim/role_host.hpp"
#include "sim/scenarios/ps_client.hpp"

namespace apiary::sim::scenarios {

/// One PS device's shards as a simulated node: the generic host running the server
/// (role() gives its shards, lost replicas and counters).
using PsServerHost = RoleHost<core::ps::ShardServer>;

/// Fixed settings of one replica.
struct PsReplicaSettings {
  std::int32_t replica = 0;                            ///< replica id (index in plan->replicas)
  std::shared_ptr<const core::ps::TrainingPlan> plan;  ///< the job
  std::map<std::string, core::PeerAddr> servers;       ///< PS device -> its World address
  /// Shards pulled through the node's proxy (local_replication): shard id -> the
  /// proxy's World address. Pushes always go to the PS.
  std::map<std::size_t, core::PeerAddr> pull_via;
  std::shared_ptr<const core::ps::LogisticData> data;      ///< the data set
  std::size_t batch = 16;                                  ///< samples per step
  std::int64_t steps = 10;                                 ///< training steps
  core::Duration compute = std::chrono::milliseconds(10);  ///< virtual compute time per step
  core::Duration call_timeout = std::chrono::seconds(30);  ///< deadline of each pull and push
  bool full_loss = false;                                  ///< also compute the loss over the whole data set each step
};

/// What one step of a replica measured.
struct PsReplicaStep {
  std::int64_t step = 0;     ///< the step
  std::int64_t version = 0;  ///< smallest version among the pulled shards
  double batch_loss = 0.0;   ///< loss of its batch at the pulled parameters
  double full_loss = -1.0;   ///< loss over the whole data set (settings.full_loss), else -1
  core::Duration time{};     ///< virtual time from the first pull to the last ack
};

/// One replica as a simulated node.
class PsReplicaHost : public Host {
 public:
  /// A replica with `settings`. Errors: invalid_argument (bad replica id, a PS device
  /// without an address, a plan the replica refuses).
  [[nodiscard]] static Result<std::unique_ptr<PsReplicaHost>> create(PsReplicaSettings settings);

  [[nodiscard]] core::Effects on_start(core::TimePoint now) override;
  [[nodiscard]] core::Effects on_request(core::TimePoint now, core::RequestId id, const std::string& handle,
                                         const std::string& request) override;
  [[nodiscard]] core::Effects on_response(core::TimePoint now, core::CallId call,
                                          const Result<std::string>& response) override;
  [[nodiscard]] core::Effects on_timer(core::TimePoint now, core::TimerId id) override;

  /// The connection to `peer` broke: calls in flight to it fail (errc::peer_down), and
  /// so do later ones. Returns the effects for World::submit.
  [[nodiscard]] core::Effects peer_down(core::TimePoint now, const core::PeerAddr& peer);
  /// The World\'s failure detector: peer_down().
  core::Effects on_peer_down(core::TimePoint now, const core::PeerAddr& peer) override { return peer_down(now, peer); }

  /// Steps completed so far, with what each measured.
  [[nodiscard]] const std::vector<PsReplicaStep>& steps() const { return steps_; }
  /// True once the final parameters were pulled.
  [[nodiscard]] bool finished() const { return finished_; }
  /// Why the replica stopped early, if it did.
  [[nodiscard]] const std::optional<Error>& error() const { return error_; }
  /// The final parameters by variable name (once finished).
  [[nodiscard]] const std::map<std::string, std::vector<float>>& final_parameters() const { return final_; }
  /// The smallest version among the final pull's shards (once finished).
  [[nodiscard]] std::int64_t final_version() const { return final_version_; }
  /// Virtual time at which the replica finished or failed.
  [[nodiscard]] core::TimePoint end_time() const { return end_; }
  /// The replica id.
  [[nodiscard]] std::int32_t id() const { return settings_.replica; }

 private:
  PsReplicaHost(PsReplicaSettings settings, PsClient client);
  core::Effects start_pull(core::TimePoint now);
  core::Effects on_pulled(core::TimePoint now);
  core::Effects push(core::TimePoint now);
  core::Effects leave(core::TimePoint now);
  /// Ends the replica with `error` (naming what failed), cancelling what is in flight.
  core::Effects fail(core::TimePoint now, Error error);

  PsReplicaSettings settings_;
  PsClient client_;
  std::set<core::PeerAddr> down_;  ///< peers whose connection broke
  core::TimePoint step_begin_{};
  std::map<std::string, std::vector<float>> gradients_;  ///< this step's, until pushed
  std::vector<PsReplicaStep> steps_;
  std::map<std::string, std::vector<float>> final_;
  std::int64_t final_version_ = 0;
  bool finished_ = false;
  std::optional<Error> error_;
  core::TimePoint end_{};
};

}  // namespace apiary::sim::scenarios
