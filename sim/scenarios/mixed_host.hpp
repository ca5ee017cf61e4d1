#pragma once
/// A replica of a mixed strategy as a simulated node (Parallax: sparse variables on PS
/// devices, dense ones all-reduced; any strategy mixing PSSynchronizers and
/// AllReduceSynchronizers, one kind per variable). It speaks both wires of the real
/// replica: core/ps/wire.hpp to the PsServerHosts serving the strategy's PS part, and
/// core::collective::Exchange to the other replicas. A step, in virtual time,
/// bulk-synchronously:
///   pull every PS shard (in parallel) -> compute the whole model's gradients on the
///   batch, wait `compute` (a timer) -> push every PS shard (in parallel) -> per fusion
///   group, one mean of the all-reduced gradients (then one gather of the sparse
///   all-reduced rows, if any) -> apply the averages to this replica's own copy of the
///   all-reduced variables -> the next step's pull.
/// After the last step it pulls once more (the final PS parameters) and ends its PS
/// sessions. Shards with local_replication are pulled from their PS (no node proxies).
///
/// Failures are errors, never hangs: a failed pull or push names the shard, the PS
/// device and its address; an op a member did not take part in, or a member whose
/// connection broke, names the member by rank and address. A failed replica cancels
/// its calls and sessions (so the PS devices fail the steps that wait for it) and
/// refuses every later collective part (so the other replicas fail too).
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/collective/ar_plan.hpp"
#include "core/effects.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/ps/optimizer.hpp"
#include "core/ps/plan.hpp"
#include "core/ps/replica.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/host.hpp"
#include "sim/scenarios/ar_member.hpp"
#include "sim/scenarios/ps_client.hpp"
#include "sim/scenarios/ps_host.hpp"

namespace apiary::sim::scenarios {

/// Fixed settings of one mixed replica.
struct MixedReplicaSettings {
  std::int32_t replica = 0;                               ///< replica id (index in the plans' replicas)
  std::shared_ptr<const core::ps::TrainingPlan> ps_plan;  ///< the strategy's PS part
  std::shared_ptr<const core::collective::ArPlan> ar_plan;  ///< its all-reduce part
  std::map<std::string, core::PeerAddr> servers;          ///< PS device -> its World address
  std::vector<core::PeerAddr> members;                    ///< every replica's World address, rank order
  std::string job = "apiary.sim.mixed";                   ///< names the exchange handle
  std::shared_ptr<const core::ps::LogisticData> data;     ///< the data set
  std::map<std::string, std::vector<float>> initial;      ///< initial parameters by variable name
  core::ps::OptimizerConfig optimizer;                    ///< the update rule of the all-reduced variables
  std::size_t batch = 16;                                 ///< samples per step (push samples and averaging weight)
  std::int64_t steps = 10;                                ///< training steps
  core::Duration compute = std::chrono::milliseconds(10);   ///< virtual compute time per step
  core::Duration call_timeout = std::chrono::seconds(30);   ///< deadline of each pull and push
  core::Duration timeout = std::chrono::seconds(5);         ///< ExchangeConfig::timeout of each collective
  bool full_loss = false;  ///< also compute the loss over the whole data set each step
};

/// One mixed replica as a simulated node.
class MixedReplicaHost : public Host {
 public:
  /// A replica with `settings`. Errors: invalid_argument (bad replica id, a PS device
  /// without an address, members not one per replica, no data, missing parameters, a
  /// plan the replica or the Synchronizer refuses).
  [[nodiscard]] static Result<std::unique_ptr<MixedReplicaHost>> create(MixedReplicaSettings settings);

  [[nodiscard]] core::Effects on_start(core::TimePoint now) override;
  [[nodiscard]] core::Effects on_request(core::TimePoint now, core::RequestId id, const std::string& handle,
                                         const std::string& request) override;
  [[nodiscard]] core::Effects on_request_from(core::TimePoint now, core::RequestId id, const std::string& handle,
                                              const core::PeerAddr& from, const std::string& request) override;
  [[nodiscard]] core::Effects on_response(core::TimePoint now, core::CallId call,
                                          const Result<std::string>& response) override;
  [[nodiscard]] core::Effects on_timer(core::TimePoint now, core::TimerId id) override;
  [[nodiscard]] core::Effects on_message(core::TimePoint now, core::CallId call, const std::string& message) override;
  [[nodiscard]] core::Effects on_request_message(core::TimePoint now, core::RequestId id,
                                                 const Result<std::string>& message, bool last) override;

  /// The connection to `peer` (a PS device or a member) broke: if this replica still
  /// needs it, the replica fails naming it. Returns the effects for World::submit.
  [[nodiscard]] core::Effects peer_down(core::TimePoint now, const core::PeerAddr& peer);
  /// The World\'s failure detector: peer_down().
  core::Effects on_peer_down(core::TimePoint now, const core::PeerAddr& peer) override { return peer_down(now, peer); }

  /// Steps completed so far (version: the smallest pulled PS version).
  [[nodiscard]] const std::vector<PsReplicaStep>& steps() const { return steps_; }
  /// True once the final PS parameters were pulled.
  [[nodiscard]] bool finished() const { return finished_; }
  /// Why the replica stopped early, if it did.
  [[nodiscard]] const std::optional<Error>& error() const { return error_; }
  /// Every variable by name (final once finished: the PS ones as last pulled).
  [[nodiscard]] const std::map<std::string, std::vector<float>>& parameters() const { return params_; }
  /// The smallest version among the final pull's shards (once finished).
  [[nodiscard]] std::int64_t final_version() const { return final_version_; }
  /// Virtual time at which the replica finished or failed.
  [[nodiscard]] core::TimePoint end_time() const { return end_; }
  /// Collectives completed so far.
  [[nodiscard]] std::uint64_t ops() const { return member_.step().done_ops(); }
  /// The replica id.
  [[nodiscard]] std::int32_t id() const { return settings_.replica; }

 private:
  MixedReplicaHost(MixedReplicaSettings settings, PsClient client, ArMember member);
  core::Effects start_pull(core::TimePoint now);
  core::Effects on_pulled(core::TimePoint now);
  core::Effects push(core::TimePoint now);
  core::Effects start_allreduce(core::TimePoint now);
  /// Applies the all-reduced averages once the step has them; pulls for the next step.
  core::Effects advance(core::TimePoint now, core::Effects out);
  core::Effects leave(core::TimePoint now);
  core::Effects fail(core::TimePoint now, Error error);

  MixedReplicaSettings settings_;
  PsClient client_;
  ArMember member_;
  std::map<std::string, std::vector<float>> params_;      ///< every variable
  std::map<std::string, std::vector<float>> gradients_;   ///< this step's
  std::set<core::PeerAddr> down_;
  core::TimePoint step_begin_{};
  std::vector<PsReplicaStep> steps_;
  std::int64_t final_version_ = 0;
  bool finished_ = false;
  std::optional<Error> error_;
  core::TimePoint end_{};
};

}  // namespace apiary::sim::scenarios
