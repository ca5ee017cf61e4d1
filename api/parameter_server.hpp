#pragma once
/// apiary::ParameterServer: one PS device of a job (AutoDist's PSSynchronizer): the
/// shards a training plan puts on the device, at their initial values (and optimizer
/// state, for a restored job), served on a runtime's gateway to the job's replicas
/// (apiary::Replica, api/replica.hpp). Synchronous steps, bounded staleness and async
/// updates are the plan's (core/ps/shard.hpp); a replica's session ending early makes
/// the device fail the synchronous steps that wait for it.
///
///   auto ps = apiary::ParameterServer::start(runtime, {device, plan, initial});
///   ... until the job ends; destroying it stops serving.
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/fwd.hpp"
#include "core/ps/optimizer.hpp"
#include "core/ps/plan.hpp"
#include "messages/result.hpp"

namespace apiary {

/// How to start a PS device.
struct ParameterServerOptions {
  std::string device;                                  ///< the PS device served, e.g. "localhost:CPU:0"
  std::shared_ptr<const core::ps::TrainingPlan> plan;  ///< the job's plan (the same on every process)
  /// Every variable's initial values, whole (a partitioned one as one tensor).
  std::map<std::string, std::vector<float>> initial;
  /// Every variable's optimizer state, whole, to continue from (a restored job); empty:
  /// the optimizers start afresh.
  std::map<std::string, core::ps::Optimizer::State> states;
  /// A replica whose session fails is dropped this long after by every synchronous shard
  /// here, and the job goes on with the replicas left (the mean over them); unset: the
  /// synchronous shards fail every request from then on (core/ps/server.hpp).
  std::optional<std::chrono::milliseconds> drop_lost_replicas_after;
  /// A PS process started again after it went down: its values and states are a
  /// checkpoint's after this many of the job's steps, and it continues the running job
  /// there (core::ps::ShardServer::resume_at; BSP shards only).
  std::optional<std::int64_t> resume_at;
};

class ParameterServer {
 public:
  /// Starts serving the device's shards on `runtime`'s gateway. Errors: invalid_argument
  /// (no plan, a device that holds no shard, initial values or states that do not fit).
  static Result<std::unique_ptr<ParameterServer>> start(Runtime& runtime, ParameterServerOptions options);
  /// start() on an actor system and gateway of the caller's (a job embedded in one process).
  static Result<std::unique_ptr<ParameterServer>> start(caf::actor_system& system,
                                                        std::shared_ptr<actors::Gateway> gateway,
                                                        ParameterServerOptions options);
  /// Stops serving.
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  /// The names of the shards served, comma-separated.
  [[nodiscard]] const std::string& shard_names() const { return names_; }
  /// Whether every replica of the job is done with this device: finished (its session
  /// ended normally after its last pull) or dropped.
  [[nodiscard]] bool replicas_done() const;
  /// Waits until replicas_done(), `patience` has passed, or `*stop` is true (when given);
  /// whether every replica was done.
  bool wait_replicas_done(std::chrono::milliseconds patience, const std::atomic<bool>* stop = nullptr) const;

 private:
  ParameterServer() = default;

  std::shared_ptr<actors::Gateway> gateway_;
  std::shared_ptr<caf::actor> actor_;
  std::shared_ptr<actors::PsCounters> counters_;
  std::size_t replicas_ = 0;
  std::string names_;
};

}  // namespace apiary
