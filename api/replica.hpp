#pragma once
/// apiary::Replica: one replica of a synchronous data-parallel job, whatever its strategy
/// (PS variables pulled and pushed, all-reduced variables averaged and applied by this
/// replica's optimizers, or both), for a training loop in C++:
///
///   auto replica = apiary::Replica::start(runtime, options);   // its roles, on the runtime's gateway
///   (*replica)->join(patience);                                // every replica is serving
///   for (step...) {
///     auto params = (*replica)->pull();                        // this step's parameters
///     ... gradients of the whole model on this replica's batch ...
///     (*replica)->push(std::move(gradients), samples);         // PS pushes, all-reduce, optimizers
///   }
///   (*replica)->pull();                                         // the final parameters
///   (*replica)->leave(patience);
///
/// The step is core/train's ReplicaRole (with its PS client and all-reduce roles) on the
/// generic actor host: the same roles the simulator runs. Every call has a deadline; the
/// first failure (a PS device or a replica gone, a refused request) ends the replica and
/// every later call returns it, naming what failed.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "api/fwd.hpp"
#include "core/ps/optimizer.hpp"
#include "core/train/replica_role.hpp"
#include "messages/result.hpp"

namespace apiary {

using ReplicaParams = core::train::ReplicaParams;
using ReplicaConfig = core::train::ReplicaConfig;

/// How to start a replica.
struct ReplicaOptions {
  /// The plans, the PS devices' and replicas' addresses (multiaddrs), the optimizer and
  /// initial values of the all-reduced variables, deadlines. start() sets `meet` when there
  /// are all-reduced variables; set it to have PS-only replicas meet too (given `members`).
  ReplicaConfig roles;
  /// The replica's member of the replicas' NCCL group, for the plan's NCCL fusion groups
  /// (null: the plan must have none).
  std::shared_ptr<actors::NcclGroup> nccl;
  /// The longest a pull or push waits for its answer (beyond the calls' own deadlines).
  std::chrono::milliseconds patience{120000};
};

class Replica {
 public:
  /// Starts the replica's roles on `runtime`'s gateway. Errors: invalid_argument (the
  /// roles' checks), unsupported (NCCL fusion groups without a group).
  static Result<std::unique_ptr<Replica>> start(Runtime& runtime, ReplicaOptions options);
  /// start() on an actor system and gateway of the caller's (a job embedded in one
  /// process, each replica on its own in-process gateway).
  static Result<std::unique_ptr<Replica>> start(caf::actor_system& system, std::shared_ptr<actors::Gateway> gateway,
                                                ReplicaOptions options);
  /// Stops the roles (a replica that did not leave abandons its PS sessions: the PS
  /// devices then fail the steps that wait for it).
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  /// Waits until every replica joined (all-reduce jobs; at once otherwise).
  Status join(std::chrono::milliseconds patience);
  /// This step's parameters: the PS variables pulled, beside this replica's copy of the
  /// all-reduced ones.
  Result<ReplicaParams> pull();
  /// pull() into `params`, reusing the vectors it holds: a PS variable held whole whose
  /// vector has its size is received straight into it (over UCX), the others are
  /// overwritten in place; a loop that passes the same map every step keeps its memory.
  /// On success `params` holds every variable and `version` (if given) the smallest
  /// pulled version; on an error its contents are unspecified.
  Status pull_into(std::map<std::string, std::vector<float>>& params, std::int64_t* version = nullptr);
  /// pull_into() that writes the all-reduced variables named in `direct` straight into
  /// the caller's memory (one copy, from this replica's copy; they are left out of
  /// `params`). The memory must stay alive and untouched until the call returns.
  Status pull_into(std::map<std::string, std::vector<float>>& params,
                   const std::map<std::string, core::train::DirectTarget>& direct, std::int64_t* version = nullptr);
  /// This step's gradients (the whole model's, by variable name) from `samples`
  /// examples: returns once the PS took them and the all-reduced ones were averaged and
  /// applied. Errors: invalid_argument (a missing gradient, or a mis-sized one of an
  /// all-reduced variable: nothing is sent and the push may be retried), protocol (a push
  /// without a pull), or the failure that ended the replica.
  Status push(std::map<std::string, std::vector<float>> gradients, double samples);
  /// push() with the gradients lent: the PS variables' dense gradients are sent from
  /// where they lie, the all-reduced ones' buffers go through the collectives, and the
  /// map comes back through `gradients` when it returns, its storage kept (an
  /// all-reduced variable's now holding the averaged gradient that was applied; a copy
  /// where a frame may still be in flight after a failure). Pass the same map every
  /// step to keep its memory. A sparse variable's gradient may come in `rows` instead
  /// (the rows it touched), not in `gradients`. `learning_rate` > 0 is this step's rate
  /// (a schedule's): the PS shards and the replica's own optimizers update at it; 0
  /// keeps the configured one.
  Status push_lent(std::map<std::string, std::vector<float>>& gradients, double samples,
                   std::map<std::string, core::ps::SparseGradient> rows = {}, float learning_rate = 0.0F);
  /// Ends the PS sessions and waits until every replica got there (all-reduce jobs).
  Status leave(std::chrono::milliseconds patience);
  /// The all-reduced variables' optimizer states, by name (for a checkpoint).
  Result<std::map<std::string, core::ps::Optimizer::State>> optimizer_states();
  /// Continues the all-reduced variables' optimizers from `states`.
  Status restore_optimizers(std::map<std::string, core::ps::Optimizer::State> states);
  /// Collectives completed so far (NCCL ones included).
  [[nodiscard]] std::uint64_t collectives() const { return counters_->collectives.load(); }
  /// PS pulls received straight into the caller's vectors so far.
  [[nodiscard]] std::uint64_t pulls_landed() const { return counters_->pulls_landed.load(); }
  /// The replica id.
  [[nodiscard]] std::int32_t id() const { return id_; }
  /// The step of the last pull's parameters: 0, 1, 2, ... from the first pull, or, for a
  /// replica that rejoined a running synchronous PS job (its PS devices had dropped it),
  /// the job's step it rejoined at, then on from there.
  [[nodiscard]] std::int64_t step() const { return step_; }

 private:
  Replica() = default;
  Result<core::Value> call(const char* method, core::Value args, std::chrono::milliseconds patience);

  std::int32_t id_ = 0;
  std::int64_t step_ = 0;
  std::shared_ptr<actors::Gateway> gateway_;
  std::shared_ptr<caf::actor> host_;
  std::shared_ptr<caf::actor> nccl_route_;
  std::vector<std::string> handles_;
  std::chrono::milliseconds patience_{120000};
  /// Published by the host after every input, for other threads to read.
  struct Counters {
    std::atomic<std::uint64_t> collectives{0};
    std::atomic<std::uint64_t> pulls_landed{0};
  };
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
};

}  // namespace apiary
