#pragma once
/// What the `apiary ps` integration tests share: the job (a strategy built for the
/// logistic-regression model and a resource spec on disk), starting `apiary ps`
/// processes, reading what they print, and the single-process SGD they must match.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ps/plan.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/resource_spec.hpp"
#include "tests/support/ar_options.hpp"
#include "tests/support/process.hpp"

namespace apiary::testing::ps_job {

namespace cs = core::strategy;
namespace cps = core::ps;
using testing::Sync;

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

/// Builds the strategy of `kind` with `options` for `item` on `spec` (parsed from
/// `spec_text`), writes both into `job`'s directory and returns the strategy.
pb::autodist::Strategy write_strategy(Job& job, const std::string& spec_text,
                                      const core::strategy::ResourceSpec& spec, core::strategy::BuilderKind kind,
                                      const core::strategy::BuilderOptions& options,
                                      const core::strategy::GraphItem& item);

/// The flags every `apiary ps` process of the job takes.
std::string common_args(const Job& job);

/// Starts `apiary ps ARGS` (stderr merged into stdout).
std::unique_ptr<Process> spawn_ps(const std::string& args);

/// The role flags of replica `r`: the chief for 0, else a worker.
std::string replica_role(int r);

/// " PREFIX:0=127.0.0.1:PORT PREFIX:1=..." for `replicas` replicas on free loopback
/// ports: what each replica passes in --peers to find the others.
std::string loopback_peers(const std::string& prefix, int replicas = k_replicas);

/// Starts `replicas` replica processes, each with `--peers` + `peers` and `extra`; the
/// last one also takes `last_extra` (a straggler's flags).
std::vector<std::unique_ptr<Process>> start_replicas(const Job& job, const std::string& peers,
                                                     const std::string& extra, int replicas = k_replicas,
                                                     const std::string& last_extra = "");

/// The PS processes of a job, started and listening; `peers` is the replicas' --peers.
struct Servers {
  std::vector<std::unique_ptr<Process>> procs;
  std::vector<std::string> devices;
  std::string peers;

  ~Servers();
};

/// Starts a `--role ps` process for each PS device of `job.plan` with `extra`, and
/// waits until each listens.
void start_servers(const Job& job, Servers& s, const std::string& extra = "");

/// What a process printed and how it ended.
struct Run {
  int rc = -1;
  std::vector<std::string> lines;
  std::string text;
};

/// Reads `p` to its end and waits for it.
Run finish(Process& p);

/// finish() of each of `procs`, in order.
std::vector<Run> finish_all(const std::vector<std::unique_ptr<Process>>& procs);

/// Kills `victim` (SIGKILL), which must be gone within 10 s, then finish() of the first
/// `count` of `procs`.
std::vector<Run> kill_then_finish(Process& victim, const std::vector<std::unique_ptr<Process>>& procs,
                                  std::size_t count);

/// Checks each of `runs` (replica r's run at r), with what it printed shown on a failure:
/// it ended with rc 1, and `check` holds (its own checks of the run; it returns whether
/// the run named the process that died). True when at least one run named it.
bool each_failed(const std::vector<Run>& runs, const std::function<bool(const Run&)>& check);

/// Reads lines of `p` until one contains `needle` and returns it (nullopt: the process
/// ended or stayed silent for `timeout` first); every line read is appended to `seen`.
std::optional<std::string> read_until(Process& p, const std::string& needle, std::chrono::milliseconds timeout,
                                      std::string& seen);

/// The values of the "final <name> v v v" line printed by replica `replica` (after its
/// "final replica R" line; any replica when -1).
std::vector<float> final_values(const Run& run, const std::string& name, int replica = -1);

/// The final values printed in `run` (of replica `replica`; any when -1) are `expected`
/// within `margin`.
void check_close(const Run& run, const std::map<std::string, std::vector<float>>& expected, double margin = 1e-5,
                 int replica = -1);

/// (step, version) of every "step S replica R version V ..." line of `run`.
std::vector<std::pair<std::int64_t, std::int64_t>> step_versions(const Run& run);

/// Single-process SGD on the concatenated batch of `replicas` replicas, `steps` steps (the
/// data at `density`).
std::map<std::string, std::vector<float>> reference_sgd(std::int64_t steps, int replicas = k_replicas,
                                                        double density = 1.0);

}  // namespace apiary::testing::ps_job
