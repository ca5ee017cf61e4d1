#pragma once
/// `apiary ps` with an all-reduce strategy (AllReduce, PartitionedAR,
/// RandomAxisPartitionAR): no PS processes; every replica keeps its own copy of the
/// logistic-regression model, and each step averages its gradients with the other
/// replicas' through one collective per fusion group (actors/collective/), weighted by
/// samples (AutoDist's replica-weighted mean, reference autodist.md §3.4; every replica
/// gets the same bits, so the copies stay identical), then applies its optimizer
/// locally. Sparse variables travel as the rows they touch, all-gathered once per step
/// and averaged by every replica. Replicas are standalone processes (--role chief|worker, each
/// given every replica's address with --peers DEVICE=HOST:PORT) or threads of one
/// process (--embedded).
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/collective/ar_plan.hpp"
#include "core/ps/optimizer.hpp"
#include "messages/result.hpp"

namespace apiary::apps {

/// What an all-reduce job takes from `apiary ps`'s flags.
struct ArJobArgs {
  std::string role;                ///< chief, worker or ps (refused); empty with embedded
  bool embedded = false;           ///< every replica in this process
  std::int32_t replica = -1;       ///< worker: its replica id
  std::string listen;              ///< host:port of this replica (processes)
  std::vector<std::string> peers;  ///< DEVICE=HOST:PORT of every replica (processes)
  std::int64_t steps = 20;
  std::size_t batch = 32;  ///< samples per replica per step (its all-reduce weight)
  std::size_t samples = 4096;
  std::size_t features = 16;
  std::uint64_t seed = 1;
  core::ps::OptimizerConfig optimizer;
  std::int64_t timeout_ms = 30000;  ///< collective timeout, and the join/leave patience
  std::int64_t step_delay_ms = 0;
  std::string mode = "tcp";
  const std::atomic<bool>* stopped = nullptr;  ///< set when the job must stop between steps
};

/// The all-reduce plan of the strategy file when it uses AllReduceSynchronizers (none
/// when it is a PS strategy: the caller runs the PS job), checked against the
/// logistic-regression model of `features` features and the resource spec. The
/// variables named in `sparse` have sparse gradients (the rows they touch, gathered by
/// every replica and averaged). Errors: the files' and plan_allreduce's, naming the
/// file; invalid_argument for an unknown name in `sparse`.
[[nodiscard]] Result<std::optional<core::collective::ArPlan>> load_allreduce_plan(
    const std::string& strategy_path, bool text, const std::string& spec_path, std::size_t features,
    const std::vector<std::string>& sparse = {});

/// Runs the job's replica (or, embedded, all of them); prints one line per step and the
/// final parameters like the PS job. Returns the exit code (2 bad usage, 1 failure).
int run_allreduce_job(const ArJobArgs& args, const core::collective::ArPlan& plan);

}  // namespace apiary::apps
