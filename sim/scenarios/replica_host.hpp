#pragma once
/// One replica of a simulated training job, whatever its strategy (PS, all-reduce or
/// both): the generic RoleHost running a Mux of the replica's roles
/// (core/train/replica_role.hpp: "ps", "allreduce", "replica") and a LogisticTrainer
/// ("trainer") that drives them on the logistic-regression workload. A step, in virtual
/// time: pull -> compute the whole model's gradients on the batch and wait `compute` (a
/// timer) -> push (PS pushes, then the all-reduce, then the optimizers) -> the next
/// step's pull. After the last step it pulls once more (the final parameters) and
/// leaves. A failure anywhere ends the replica with the error that names it.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/mux.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/role.hpp"
#include "core/train/replica_role.hpp"
#include "messages/result.hpp"
#include "sim/role_host.hpp"

namespace apiary::sim::scenarios {

/// What one step of a replica measured.
struct PsReplicaStep {
  std::int64_t step = 0;     ///< the step
  std::int64_t version = 0;  ///< smallest version among the pulled shards (the step, without PS)
  double batch_loss = 0.0;   ///< loss of its batch at the pulled parameters
  double full_loss = -1.0;   ///< loss over the whole data set (settings.full_loss), else -1
  core::Duration time{};     ///< virtual time from the pull to the end of the push
  /// With TrainerSettings::count_touched: w's values its gradient holds other than zero
  /// (the rows a sparse w sends), for what they cost.
  std::size_t touched = 0;
};

/// A simulated job's latest checkpoint, written by the chief as `apiary ps --save` does:
/// the parameters it pulled at the start of a step and every variable's optimizer state.
struct SimCheckpoint {
  std::int64_t step = -1;  ///< steps behind it (-1: none written yet)
  std::map<std::string, std::vector<float>> values;
  std::map<std::string, core::ps::Optimizer::State> states;
};

/// The trainer's workload.
struct TrainerSettings {
  std::size_t replicas = 1;                                ///< the data set is split among this many
  std::shared_ptr<const core::ps::LogisticData> data;      ///< the data set
  std::size_t batch = 16;                                  ///< samples per step (its weight)
  std::int64_t steps = 10;                                 ///< training steps
  core::Duration compute = std::chrono::milliseconds(10);  ///< virtual compute time per step
  bool full_loss = false;  ///< also compute the loss over the whole data set each step
  bool count_touched = false;  ///< count w's gradient values other than zero each step (PsReplicaStep::touched)
  /// > 0 with `checkpoint`: at the start of every step that is a multiple of it (step 0
  /// aside), the trainer reads the optimizer states and writes the checkpoint there.
  std::int64_t save_every = 0;
  std::shared_ptr<SimCheckpoint> checkpoint;
};

/// The workload as a role: drives role "replica" of its Mux step by step.
class LogisticTrainer final : public core::Role {
 public:
  LogisticTrainer(std::int32_t replica, TrainerSettings settings)
      : replica_(replica), settings_(std::move(settings)) {}

  [[nodiscard]] std::vector<std::string> handles() const override { return {}; }
  [[nodiscard]] core::Effects on(core::TimePoint now, core::Input input) override;

  [[nodiscard]] const std::vector<PsReplicaStep>& steps() const { return steps_; }
  [[nodiscard]] bool finished() const { return finished_; }
  [[nodiscard]] const std::optional<Error>& error() const { return error_; }
  [[nodiscard]] const std::map<std::string, std::vector<float>>& parameters() const { return params_; }
  [[nodiscard]] std::int64_t final_version() const { return final_version_; }
  [[nodiscard]] core::TimePoint end_time() const { return end_; }

 private:
  core::Effects ask(const char* method, core::Value args = {});
  core::Effects pulled(core::TimePoint now, core::train::ReplicaParams params);
  /// Computes the step whose parameters were pulled (`step`, at `version`).
  core::Effects compute(core::TimePoint now, std::int64_t step, std::int64_t version);
  core::Effects fail(core::TimePoint now, Error error);

  std::int32_t replica_;
  TrainerSettings settings_;
  core::OpId next_op_ = 1;
  std::map<core::OpId, std::string> asked_;  ///< op -> method
  std::map<std::string, std::vector<float>> params_;     ///< as last pulled
  /// The parameters before those: storage lent to the next pull, which receives into it
  /// (as a replica process pulls into the memory it holds).
  std::map<std::string, std::vector<float>> spare_;
  /// This step's, until pushed; the push gives the storage back for the next step's.
  std::map<std::string, std::vector<float>> gradients_;
  core::TimePoint step_begin_{};
  std::int64_t pulled_step_ = 0;     ///< the step being checkpointed
  std::int64_t pulled_version_ = 0;
  std::vector<PsReplicaStep> steps_;
  std::int64_t final_version_ = 0;
  bool finished_ = false;
  std::optional<Error> error_;
  core::TimePoint end_{};
};

/// One replica as a simulated node.
class ReplicaHost final : public RoleHost<core::Mux> {
 public:
  /// A replica with the roles of `config` driven by a trainer with `settings`. Errors:
  /// invalid_argument (no data), add_replica_roles'.
  [[nodiscard]] static Result<std::unique_ptr<ReplicaHost>> create(const core::train::ReplicaConfig& config,
                                                                   TrainerSettings settings);

  /// Steps completed so far, with what each measured.
  [[nodiscard]] const std::vector<PsReplicaStep>& steps() const { return trainer_->steps(); }
  /// True once the final parameters were pulled.
  [[nodiscard]] bool finished() const { return trainer_->finished(); }
  /// Why the replica stopped early, if it did.
  [[nodiscard]] const std::optional<Error>& error() const { return trainer_->error(); }
  /// Every variable by name, as last pulled (final once finished).
  [[nodiscard]] const std::map<std::string, std::vector<float>>& parameters() const { return trainer_->parameters(); }
  /// The smallest version among the final pull's shards (once finished).
  [[nodiscard]] std::int64_t final_version() const { return trainer_->final_version(); }
  /// Virtual time at which the replica finished or failed.
  [[nodiscard]] core::TimePoint end_time() const { return trainer_->end_time(); }
  /// Collectives completed so far (0 without all-reduced variables).
  [[nodiscard]] std::uint64_t ops() const;
  /// The replica id.
  [[nodiscard]] std::int32_t id() const { return id_; }

 private:
  ReplicaHost(core::Mux mux, std::int32_t id);

  std::int32_t id_;
  const LogisticTrainer* trainer_ = nullptr;
  const core::Role* allreduce_ = nullptr;
};

}  // namespace apiary::sim::scenarios
