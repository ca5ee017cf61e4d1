#pragma once
/// The processes of `apiary bench ps`: one per PS shard (`--role ps`) serving its
/// variables (apiary::ParameterServer), and one per replica (`--role replica`) pulling
/// every variable and pushing a gradient for each per step through apiary::Replica
/// (BSP). All of them build the same synthetic model and plan
/// from the same flags, so shard ids agree without being sent.
///
/// Flags (argv[0] is skipped):
///   --role ps|replica --index I --shards K --replicas N --model-bytes M
///   --ports P0,P1,...  (every PS shard's port on 127.0.0.1, shard order)
///   --barrier DIR      (shared empty directory: ps_ready.<i> and done.<r> files)
///   --steps S --warmup W [--timeout-s T]
/// A replica prints one line when done:
///   ps_result shards=K replica=R replicas=N bytes=B steps=S cpu_us=C step_us=T1,T2,... check=ok|FAIL
/// step_us is pull + push time of each timed step (the checks between them excluded);
/// cpu_us the process's CPU time (every thread) per timed step. A shard prints, before
/// it exits, its CPU time from ready to the last replica's leaving:
///   ps_cpu shard=I cpu_us=C
/// The gradient of every element is 2^-10 and the optimizer plain SGD with rate 1, from
/// zeros, so after v updates every parameter is exactly -v/1024: the replicas check the
/// first and last element of every variable at each pull, and every element at the end.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/ps/plan.hpp"
#include "messages/result.hpp"

namespace apiary::bench {

/// A synthetic model: variables of mixed sizes, by name, in float32 elements.
struct PsBenchModel {
  std::vector<std::pair<std::string, std::size_t>> variables;  ///< (name, elements), creation order

  /// Total bytes (4 per element).
  [[nodiscard]] std::size_t bytes() const;
  /// Elements of the largest and of the smallest variable.
  [[nodiscard]] std::pair<std::size_t, std::size_t> extremes() const;
};

/// The model of about `bytes` bytes (rounded down to whole floats): four large tensors
/// (32%, 24%, 16%, 16%), six of 1% each, and the rest in small ones cycling through
/// 4, 16, 64 and 256 KiB, the way embeddings, dense layers and biases mix.
PsBenchModel ps_bench_model(std::size_t bytes);

/// The BSP plan of `model` over `shards` PS devices ("localhost:CPU:<i>") for
/// `replicas` replicas ("localhost:GPU:<r>", one host): every variable whole on one
/// shard, placed largest first on the least loaded shard (as PSLoadBalancing places
/// them), plain SGD with rate 1. Errors: invalid_argument on zero shards or replicas.
Result<core::ps::TrainingPlan> ps_bench_plan(const PsBenchModel& model, std::size_t shards, std::size_t replicas);

/// Bytes of `plan`'s variables held by PS device `device`.
std::size_t ps_bench_bytes_on(const core::ps::TrainingPlan& plan, const std::string& device);

/// Runs one process (`apiary bench ps-process FLAGS`). Returns 0 when it ran and every
/// check passed, 1 on a failed run or check, 2 on bad flags.
int run_ps_bench_process(int argc, char** argv);

}  // namespace apiary::bench
