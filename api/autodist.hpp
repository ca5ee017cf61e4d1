#pragma once
/// apiary::AutoDistJob: this process's part of an AutoDist job for a trainer's own model
/// (AutoDist's `AutoDist(resource_spec, strategy_builder)` + `distribute`, for models
/// that are not the built-in logistic regression): the strategy built from the model's
/// variables and the cluster, the PS devices this process serves, and its replica.
///
///   auto job = apiary::AutoDistJob::start(options);   // every process of the job, same options but rank
///   job->pull_into(params);                           // the first step's parameters
///   for (step...) {
///     ... gradients of the whole model on this replica's batch ...
///     job->push_lent(grads, samples);                 // PS pushes, all-reduce, optimizers
///     job->pull_into(params);                         // the next step's parameters
///   }
///   job->leave();
///
/// Every process builds the same strategy from the same variables, resource spec and
/// builder, so nothing is exchanged to agree on it. Addresses follow from the strategy
/// (as AutoDist's fixed port range does): on the host of its device, replica r listens
/// at `port + r`, the k-th PS device of the plan at `port + R + k` (R replicas), and
/// replica 0's initial-value server at `port + R + K` (K PS devices). A PS device is
/// served by the lowest-ranked replica process on its host, or, when the job has PS
/// processes (`ps_processes`), by a PS process (`serve_devices`: one or several devices
/// each): the replicas then wait until every PS device answers.
///
/// The job starts from replica 0's values: every other process first pulls every
/// variable from replica 0's initial-value server (a PS of its own, the whole model on
/// it), so the PS devices and the all-reduced copies begin from one model even when the
/// trainers initialised theirs differently.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/fwd.hpp"
#include "core/ps/optimizer.hpp"
#include "core/strategy/builders.hpp"
#include "core/train/replica_role.hpp"
#include "messages/result.hpp"
#include "strategy.pb.h"

namespace apiary {

/// A variable of the trainer's model, in creation order.
struct AutoDistVariable {
  std::string name;                  ///< unique, e.g. "fc1.weight"
  std::vector<std::int64_t> shape;   ///< every axis's extent
  bool sparse = false;               ///< its gradient touches rows only (an embedding)
};

struct AutoDistOptions {
  std::string resource_spec;  ///< path of AutoDist's resource_spec.yml
  /// The strategy: built with `builder` (AutoDist's class name) and `builder_options`,
  /// or, when `strategy_file` is set, read from that file (`apiary strategy build --out`).
  std::string builder = "PSLoadBalancing";
  core::strategy::BuilderOptions builder_options;
  std::string strategy_file;
  bool strategy_text = false;           ///< the strategy file is protobuf text format
  std::vector<AutoDistVariable> variables;
  core::ps::OptimizerConfig optimizer;  ///< the update rule of every variable (PS shards and replicas)
  std::int32_t rank = 0;                ///< this process's replica
  std::uint16_t port = 15000;           ///< the first port of the job's range (see above)
  /// This process's values of every variable, whole; replica 0's start the job.
  std::map<std::string, std::vector<float>> initial;
  /// Optimizer states to continue from (a checkpoint's, every variable whole; the same on
  /// every process); empty: the optimizers start afresh.
  std::map<std::string, core::ps::Optimizer::State> states;
  /// Each pull and push, each collective, and the initial-value pull.
  std::chrono::milliseconds timeout{30000};
  /// Waiting for every replica to arrive (start) or to finish (leave).
  std::chrono::milliseconds patience{120000};
  std::string job = "apiary.autodist";  ///< names the job's handles
  /// Non-empty: this process serves these PS devices of the strategy only (no replica),
  /// each at its own address, from replica 0's initial values, until destroyed. `rank`
  /// is not used.
  std::vector<std::string> serve_devices;
  /// The PS devices are served by PS processes (`serve_devices`): replicas serve none.
  bool ps_processes = false;
  std::string mode = "tcp";             ///< UCX same-host lanes: tcp or shm
  bool insecure = false;                ///< plaintext connections (every process of the job must choose it)
  /// Processes serving PS devices: a replica whose session fails is dropped this long
  /// after, and the synchronous shards go on with the replicas left (the mean over them);
  /// unset: a lost replica fails the synchronous shards' requests, ending the job.
  std::optional<std::chrono::milliseconds> drop_lost_replicas_after;
  /// Replicas: wait this long for a PS process that went down to be started again with
  /// `resume_at` (zero: a PS process going down ends the replica), then replay their
  /// acknowledged pushes since its checkpoint; they keep those of the last `replay_steps`
  /// steps (at least the steps between two checkpoints, twice over). Needs ps_processes.
  std::chrono::milliseconds ps_restart_wait{0};
  std::int64_t replay_steps = 0;
  /// A PS process (serve_devices) started again after it went down: `initial` and
  /// `states` are a checkpoint's after this many steps of the job, and its devices
  /// continue the running job from there (BSP shards only) instead of starting from
  /// replica 0's initial values.
  std::optional<std::int64_t> resume_at;
  /// A replica's process started again after the job dropped it (drop_lost_replicas_after):
  /// it meets no one, takes the running job's parameters from the PS devices, and trains
  /// from the step the shards take it back at (a job of PS variables only, this replica
  /// serving none of them).
  bool rejoin = false;
};

class AutoDistJob {
 public:
  /// Builds the strategy and plans, serves this process's PS devices, starts its replica
  /// and waits until every replica arrived. Errors: invalid_argument (bad options or
  /// variables, a rank outside the strategy's replicas, missing initial values), the
  /// strategy's and plans' errors, unavailable / deadline_exceeded (replica 0 or another
  /// replica did not come within the patience), each naming the replica and address.
  static Result<std::unique_ptr<AutoDistJob>> start(AutoDistOptions options);
  /// The PS devices the strategy of `options` uses, in plan order (nothing is started).
  static Result<std::vector<std::string>> ps_devices(const AutoDistOptions& options);
  ~AutoDistJob();
  AutoDistJob(const AutoDistJob&) = delete;
  AutoDistJob& operator=(const AutoDistJob&) = delete;

  /// Whether this process only serves a PS device (no replica: the step calls fail).
  [[nodiscard]] bool serves_only() const { return rank_ < 0; }
  /// This step's parameters into `params` (its vectors reused where they fit).
  Status pull_into(std::map<std::string, std::vector<float>>& params, std::int64_t* version = nullptr);
  /// pull_into() writing the all-reduced variables named in `direct` straight into the
  /// caller's memory (Replica::pull_into with targets).
  Status pull_into(std::map<std::string, std::vector<float>>& params,
                   const std::map<std::string, core::train::DirectTarget>& direct, std::int64_t* version = nullptr);
  /// This step's gradients (every variable's, dense; a sparse one zero outside its rows)
  /// from `samples` examples; the map comes back when the step is over (Replica::push_lent).
  /// A sparse variable's gradient may come in `rows` (the rows it touched) instead.
  /// `learning_rate` > 0: this step's rate (a schedule's), for every variable wherever it
  /// is updated; 0: the options' optimizer rate.
  Status push_lent(std::map<std::string, std::vector<float>>& gradients, double samples,
                   std::map<std::string, core::ps::SparseGradient> rows = {}, float learning_rate = 0.0F);
  /// Ends the replica's part (after the last pull) and waits: with all-reduced variables
  /// for every replica at a barrier; otherwise, in a process serving PS devices, until
  /// every replica is done with them (finished, or dropped: drop_lost_replicas_after).
  Status leave();
  /// Every variable's optimizer state (the PS ones read from their shards).
  Result<std::map<std::string, core::ps::Optimizer::State>> optimizer_states();

  [[nodiscard]] std::int32_t rank() const { return rank_; }
  [[nodiscard]] std::size_t replicas() const { return replicas_; }
  [[nodiscard]] const pb::autodist::Strategy& strategy() const { return *strategy_; }
  /// How the strategy places the variables, as lines ("PS ...", "all-reduce ...").
  [[nodiscard]] const std::string& summary() const { return summary_; }
  /// The PS devices this process serves.
  [[nodiscard]] const std::vector<std::string>& served() const { return served_; }

 private:
  AutoDistJob() = default;
  struct Parts;

  std::int32_t rank_ = 0;
  std::size_t replicas_ = 0;
  std::shared_ptr<pb::autodist::Strategy> strategy_;
  std::string summary_;
  std::vector<std::string> served_;
  std::chrono::milliseconds patience_{};
  std::unique_ptr<Parts> parts_;
};

}  // namespace apiary
