#pragma once
/// What the `apiary ps` integration tests share: the job (a strategy built for the
/// logistic-regression model and a resource spec on disk), starting `apiary ps`
/// processes, reading what they print, and the single-process SGD they must match.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ps/plan.hpp"
#include "core/strategy/builders.hpp"
#include "tests/support/process.hpp"

namespace apiary::testing::ps_job {

inline constexpr int k_replicas = 4;
inline constexpr std::size_t k_features = 16;
inline constexpr std::size_t k_batch = 16;
inline constexpr std::size_t k_samples = 1024;
inline constexpr float k_learning_rate = 0.5F;
/// One GPU-less node with four CPU devices: four replicas, four candidate PS devices.
inline constexpr const char* k_spec = "nodes:\n  - address: localhost\n    cpus: [0, 1, 2, 3]\n";

/// A strategy and a resource spec on disk, and (for PS strategies) the plan they make.
struct Job {
  /// Removes the job's directory when the last copy goes.
  std::shared_ptr<void> cleanup;
  std::string dir;
  std::string strategy;
  std::string spec;
  core::ps::TrainingPlan plan;
};

/// Builds the strategy of `kind` with `options` into a directory named after `name`;
/// `with_plan` also makes the PS training plan (PS strategies only). The variables named
/// in `sparse` are sparse in the model the builder sees (Parallax puts them on a PS).
/// A job with only its directory: /tmp/apiary_<kind>_job_<pid>_<name>, created now and
/// removed with the last copy of the Job.
Job job_directory(const std::string& kind, const std::string& name);

Job make_job(core::strategy::BuilderKind kind, core::strategy::BuilderOptions options, const std::string& name,
             bool with_plan, const std::vector<std::string>& sparse = {});

/// The flags every `apiary ps` process of the job takes.
std::string common_args(const Job& job);

/// Starts `apiary ps ARGS` (stderr merged into stdout).
std::unique_ptr<Process> spawn_ps(const std::string& args);

/// What a process printed and how it ended.
struct Run {
  int rc = -1;
  std::vector<std::string> lines;
  std::string text;
};

/// Reads `p` to its end and waits for it.
Run finish(Process& p);

/// Reads lines of `p` until one contains `needle` and returns it (nullopt: the process
/// ended or stayed silent for `timeout` first); every line read is appended to `seen`.
std::optional<std::string> read_until(Process& p, const std::string& needle, std::chrono::milliseconds timeout,
                                      std::string& seen);

/// The values of the "final <name> v v v" line printed by replica `replica` (after its
/// "final replica R" line; any replica when -1).
std::vector<float> final_values(const Run& run, const std::string& name, int replica = -1);


/// Single-process SGD on the concatenated batch of `replicas` replicas, `steps` steps.
std::map<std::string, std::vector<float>> reference_sgd(std::int64_t steps, int replicas = k_replicas);

}  // namespace apiary::testing::ps_job
