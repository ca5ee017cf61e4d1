#pragma once
/// All-reduce training as simulated nodes: one ArReplicaHost per replica of an
/// all-reduce strategy (core/collective/ar_plan.hpp). Every replica keeps its own copy of
/// the logistic-regression model; a step, in virtual time: compute the batch gradient ->
/// wait `compute` (a timer) -> per fusion group, in plan order, one mean of
/// core::collective::Exchange over the World's network (fixed group: every replica in
/// rank order, weight = the batch's samples, codecs as the plan says; every replica gets
/// the same bits, decode(encode(average))) -> assemble the averaged gradients
/// (core::collective::Synchronizer) -> apply the optimizer locally, so that the replicas
/// stay bit-identical. Sparse variables (ArPlan::sparse) go last in a step: one gather of
/// every replica's touched rows, averaged by each replica and applied to those rows
/// only. It follows the collective actor of actors/collective/ (its mean and gather
/// ops): op n of one replica meets op n of the others; a part for an op this replica has
/// not started yet is held by the exchange until it starts.
///
/// Failures are errors, never hangs: an op in which a member did not take part ends the
/// replica with errc::peer_down naming every such member by rank and address; so does a
/// member whose connection broke (peer_down) while the replica still needs it. A failed
/// replica refuses every later part, so that the others fail too instead of waiting.
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
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/host.hpp"
#include "sim/scenarios/ar_member.hpp"
#include "sim/scenarios/ps_host.hpp"

namespace apiary::sim::scenarios {

/// Fixed settings of one all-reduce replica.
struct ArReplicaSettings {
  std::size_t rank = 0;                                      ///< index in plan->replicas and members
  std::shared_ptr<const core::collective::ArPlan> plan;     ///< the job's all-reduce layout
  std::vector<core::PeerAddr> members;                      ///< every replica's World address, rank order
  std::string job = "apiary.sim.allreduce";                 ///< names the exchange handle
  std::shared_ptr<const core::ps::LogisticData> data;       ///< the data set
  std::map<std::string, std::vector<float>> initial;        ///< initial parameters by variable name
  core::ps::OptimizerConfig optimizer;                      ///< the local update rule
  std::size_t batch = 16;                                   ///< samples per step (also the averaging weight)
  std::int64_t steps = 10;                                  ///< training steps
  core::Duration compute = std::chrono::milliseconds(10);   ///< virtual compute time per step
  /// Longest wait for every member's part of a collective, from its start here
  /// (ExchangeConfig::timeout); each call's deadline is twice it.
  core::Duration timeout = std::chrono::seconds(5);
  bool full_loss = false;                                   ///< also compute the loss over the whole data set each step
};

/// One all-reduce replica as a simulated node.
class ArReplicaHost : public Host {
 public:
  /// A replica with `settings`. Errors: invalid_argument (rank out of range, members not
  /// one per replica, no data, a plan the Synchronizer refuses, parameters missing).
  [[nodiscard]] static Result<std::unique_ptr<ArReplicaHost>> create(ArReplicaSettings settings);

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

  /// The connection to `peer` broke: if it is a member this replica still needs (it is
  /// not finished), the replica fails naming it. Returns the effects for World::submit.
  [[nodiscard]] core::Effects peer_down(core::TimePoint now, const core::PeerAddr& peer);
  /// The World\'s failure detector: peer_down().
  core::Effects on_peer_down(core::TimePoint now, const core::PeerAddr& peer) override { return peer_down(now, peer); }

  /// Steps completed so far (version = the step: every replica applies every average).
  [[nodiscard]] const std::vector<PsReplicaStep>& steps() const { return steps_; }
  /// True once every step was applied.
  [[nodiscard]] bool finished() const { return finished_; }
  /// Why the replica stopped early, if it did.
  [[nodiscard]] const std::optional<Error>& error() const { return error_; }
  /// The parameters by variable name (final once finished).
  [[nodiscard]] const std::map<std::string, std::vector<float>>& parameters() const { return params_; }
  /// Virtual time at which the replica finished or failed.
  [[nodiscard]] core::TimePoint end_time() const { return end_; }
  /// Collectives completed so far.
  [[nodiscard]] std::uint64_t ops() const { return member_.step().done_ops(); }
  /// The replica's rank.
  [[nodiscard]] std::size_t rank() const { return settings_.rank; }

 private:
  ArReplicaHost(ArReplicaSettings settings, ArMember member);
  core::Effects begin_step(core::TimePoint now);
  /// Applies the step's averages once the all-reduce finished them; begins the next step.
  core::Effects advance(core::TimePoint now, core::Effects out);
  core::Effects fail(core::TimePoint now, Error error);

  ArReplicaSettings settings_;
  ArMember member_;
  std::map<std::string, std::vector<float>> params_;
  std::map<std::string, std::vector<float>> gradients_;  ///< this step's
  std::set<core::PeerAddr> down_;
  core::TimePoint step_begin_{};
  std::vector<PsReplicaStep> steps_;
  bool finished_ = false;
  std::optional<Error> error_;
  core::TimePoint end_{};
};

}  // namespace apiary::sim::scenarios
