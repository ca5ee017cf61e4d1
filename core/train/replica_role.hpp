#pragma once
/// ReplicaRole: one replica's training step, whatever the strategy: its PS variables
/// pulled and pushed through a PsClientRole (role "ps"), its all-reduced variables
/// averaged through an AllReduceRole (role "allreduce") and applied by its own
/// optimizers to its own copy, sparse rows as rows, and the first failure (naming the
/// shard and PS device, or the member) ending the step on every side: the PS sessions
/// are left with the reason (the PS devices fail the steps that wait for this replica)
/// and the exchange refuses every later part (the other members fail too).
///
/// It runs in a Mux beside the roles it asks (add_replica_roles adds the set), hosted
/// by any host: the simulator's (a trainer role drives it), the actor host under
/// apiary::Replica, a test. A step, bulk-synchronously:
///   "pull" [std::map<std::string, std::vector<float>> storage, or ReplicaPullInto] ->
///              ReplicaParams: the PS variables' parameters for this step (received into
///              the storage's vectors where they fit, the caller's last parameters),
///              beside a copy of this replica's all-reduced ones (or, for those
///              ReplicaPullInto::direct names, written straight into the caller's memory
///              and left out)
///   (the trainer computes the gradients of the whole model)
///   "push" ReplicaGradients -> the same ReplicaGradients (dense ones), storage and all,
///              once the step is over, an all-reduced variable's buffer holding its
///              averaged gradient (a sparse variable's gradient may come as rows
///              instead): the PS variables' gradients pushed (dense ones sent from
///              where they lie; a sparse one as the rows it touched), then, once every
///              shard acknowledged, the all-reduced variables' gradients averaged with
///              the other replicas' (weighted by samples, in their own buffers) and
///              applied by this replica's optimizers to its copy. A missing or
///              mis-sized gradient is refused before anything leaves (nothing changes;
///              the caller may retry).
///   "join" Duration (patience) -> with ReplicaConfig::meet, waits until every replica
///              joined; without, completes at once
///   "leave" Duration (patience) -> ends the PS sessions (after the last step, usually
///              after a final pull) and, with ReplicaConfig::meet (and meet_on_leave),
///              waits until every replica got there
///   "watch" -> completes only with the error that ended the replica between calls
///   "optimizer_states" -> every variable's optimizer state by name (the PS ones read
///              from their shards)
///   "restore_optimizers" std::map<std::string, ps::Optimizer::State> -> nothing (the
///              all-reduced variables')
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/collective/ar_plan.hpp"
#include "core/mux.hpp"
#include "core/ps/optimizer.hpp"
#include "core/ps/plan.hpp"
#include "core/role.hpp"

namespace apiary::core::train {

/// What a replica's roles need.
struct ReplicaConfig {
  std::int32_t replica = 0;                           ///< replica id (its rank among the replicas)
  std::shared_ptr<const ps::TrainingPlan> ps;         ///< the PS variables (null: none)
  std::shared_ptr<const collective::ArPlan> ar;       ///< the all-reduced variables (null: none)
  std::map<std::string, PeerAddr> servers;            ///< PS device -> its address
  std::map<std::size_t, PeerAddr> pull_via;           ///< shard -> the proxy it is pulled through
  std::vector<PeerAddr> members;                      ///< every replica's address, rank order (all-reduce)
  std::string job = "apiary.train";                   ///< names the exchange handle
  ps::OptimizerConfig optimizer;                      ///< the all-reduced variables' update rule
  std::map<std::string, std::vector<float>> initial;  ///< initial values of the all-reduced variables (others ignored)
  Duration call_timeout = std::chrono::seconds(30);   ///< deadline of each pull and push
  Duration exchange_timeout = std::chrono::seconds(5);  ///< ExchangeConfig::timeout of each collective
  std::string label = "replica";                      ///< how errors of creation name the replica kind
  /// PsClientConfig::ps_restart_wait and replay_steps: waiting for a PS device that went
  /// down to come back from a checkpoint, and the pushes kept to replay to it.
  Duration ps_restart_wait = Duration::zero();
  std::int64_t replay_steps = 0;
  /// Non-empty: the all-reduce's NCCL groups are Asked of this role of the process
  /// (AllReduceConfig::nccl_role).
  std::string nccl_role;
  /// The all-reduce's RING groups stream through a GroupAllReduceRole (role "ring",
  /// part handles "<job>/ring/<0|1>::...", identical results, AllReduceConfig::ring_role)
  /// instead of the exchange's one message per member and span: processes. The
  /// simulator keeps the exchange.
  bool stream_ring = false;
  /// The replicas meet at a barrier ("barrier" role, core/collective/barrier_role.hpp)
  /// on "join", before their first collective, and on "leave", after their last, so that
  /// none calls a replica that does not serve yet or has stopped. Processes need it; the
  /// simulator starts every replica at once.
  bool meet = false;
  /// With meet: meet on "leave" too. Off, "leave" ends the PS sessions only: a job of PS
  /// variables only, whose PS devices wait instead until each replica is done with them
  /// (finished or dropped), so that a dropped replica does not hold the others' leave.
  bool meet_on_leave = true;
};

/// Memory of the caller's to write a variable's values into: `count` floats at `data`.
struct DirectTarget {
  float* data = nullptr;
  std::size_t count = 0;
};

/// What "pull" may take: the storage to receive into, and where to write all-reduced
/// variables straight into (the caller's model memory, which must stay alive and
/// untouched until the pull completes; a target of another size is ignored and the
/// variable comes in ReplicaParams as usual).
struct ReplicaPullInto {
  std::map<std::string, std::vector<float>> storage;
  std::map<std::string, DirectTarget> direct;
};

/// What "pull" gives: every variable's values for the step.
struct ReplicaParams {
  std::int64_t step = 0;     ///< the step they are for
  std::int64_t version = 0;  ///< smallest version among the pulled PS pieces (the step without PS variables)
  std::map<std::string, std::vector<float>> params;  ///< by variable name
};

/// What "push" takes.
struct ReplicaGradients {
  /// The whole model's gradients by variable name, as dense tensors (a sparse variable's
  /// is zero outside the rows it touched).
  std::map<std::string, std::vector<float>> gradients;
  double samples = 1.0;  ///< examples behind them (the PS aggregation and averaging weight)
  /// A sparse variable's gradient as the rows it touched, instead of a dense tensor in
  /// `gradients` (an embedding's gradient without its untouched rows).
  std::map<std::string, ps::SparseGradient> sparse;
  /// The step's learning rate (a schedule's: the PS shards and this replica's own
  /// optimizers update at it), or 0: the configured one.
  float learning_rate = 0.0F;
};

class ReplicaRole final : public Role {
 public:
  /// Errors: invalid_argument (neither plan; an all-reduced variable without initial values).
  [[nodiscard]] static Result<std::unique_ptr<ReplicaRole>> create(const ReplicaConfig& config);

  [[nodiscard]] std::vector<std::string> handles() const override { return {}; }
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  /// The step being run, or the next one.
  [[nodiscard]] std::int64_t step() const { return step_; }
  /// Why the replica stopped, if it did.
  [[nodiscard]] const std::optional<Error>& failure() const { return failure_; }

 private:
  enum class Phase { idle, pulling, pulled, pushing, averaging, reading, joining, leaving, meeting, left };
  ReplicaRole(const ReplicaConfig& config, std::map<std::string, ps::Optimizer> optimizers);
  Effects on_call(LocalCall call);
  Effects on_reply(LocalReply reply);
  /// Checks every gradient, then takes them from `grads` (the caller's args: a refused
  /// push leaves them there).
  Effects push(OpId op, ReplicaGradients& grads);
  Effects average(Effects out);
  Effects fail(Error error);
  /// The step's parameters: `pulled` (the PS variables) and a copy of this replica's
  /// all-reduced ones, in the storage the caller lent where it did.
  ReplicaParams parameters(std::map<std::string, std::vector<float>> pulled);
  /// Takes the PS push's gradients back into lent_ (copies while a call still views them).
  void reclaim(const Value& pushed);
  /// The all-reduced variables' optimizer states.
  [[nodiscard]] std::map<std::string, ps::Optimizer::State> own_states() const;
  /// Asks the barrier to meet the others at `level`.
  Effects meet(Effects out, std::uint64_t level);
  /// The PS sessions are over: meets the others, or is done.
  Effects left(Effects out);
  void finish(Effects& out, Result<Value> result);

  std::int32_t replica_;
  bool has_ps_;
  bool has_ar_;
  bool meet_;
  bool meet_on_leave_;
  Duration patience_{};  ///< of the running join or leave
  std::vector<ps::VariablePlan> ps_variables_;
  std::map<std::string, std::vector<float>> params_;          ///< this replica's copy of the all-reduced variables
  std::map<std::string, ps::Optimizer> optimizers_;           ///< per all-reduced variable
  std::map<std::string, std::vector<float>> storage_;  ///< the caller's, lent to a pull
  std::map<std::string, DirectTarget> direct_;         ///< the running pull's direct targets
  std::map<std::string, std::vector<float>> lent_;     ///< the caller's gradients during a push
  std::map<std::string, ps::SparseGradient> rows_;     ///< the caller's sparse gradients during a push
  std::map<std::string, std::size_t> sparse_widths_;   ///< sparse variable -> values per row
  Phase back_to_ = Phase::idle;                        ///< after an optimizer-state read
  double samples_ = 1.0;
  float learning_rate_ = 0.0F;         ///< the running step's (0: the configured one)
  float config_learning_rate_ = 0.0F;  ///< ReplicaConfig::optimizer's
  Phase phase_ = Phase::idle;
  std::int64_t step_ = 0;
  std::int64_t version_ = 0;
  std::optional<OpId> running_;       ///< the host's pull or push
  std::optional<OpId> watch_;
  OpId next_ask_ = 1;
  OpId asked_ = 0;                    ///< the Ask the running op waits for
  std::vector<OpId> watching_;        ///< this role's watches of the others
  std::optional<Error> failure_;
};

/// Adds a replica's roles to `mux`: "ps" (when the config has a PS plan), "allreduce"
/// (when it has an all-reduce plan), "barrier" (with `meet`) and "replica", in that order. Errors: each role's,
/// the Mux's.
[[nodiscard]] Status add_replica_roles(Mux& mux, const ReplicaConfig& config);

}  // namespace apiary::core::train
