#pragma once
/// The training scenario (`apiary sim ps`): the job of `apiary ps` on the simulated
/// network, whatever the strategy (PS synchronizers: BSP, SSP or async, partitions
/// included; all-reduce; or both). It is a workload, a checker and fault injectors:
///   - workload: one PsServerHost per PS device serving its shards, one ReplicaHost per
///     replica training the logistic-regression model (core/train's roles), each link
///     with its own seeded latency; a PS strategy's variables with local_replication are
///     read through one PsProxyHost per node;
///   - faults (sim/faults.hpp, run_with_cued_kills): a straggler (the last replica
///     computes longer), a PS process killed when the chief begins a step, a replica
///     killed when it begins a step; a kill breaks its peers' connections to it after
///     `failure_detection`;
///   - checker: per step the chief's loss, every replica's version and the virtual step
///     times, then each replica's outcome, the seed and the trace hash (same config,
///     same hash).
/// A run never hangs: it ends when every replica has finished or failed, or reports
/// `hung` at `max_time`.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/ps/shard.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/cost_profile.hpp"
#include "sim/scenarios/ps_host.hpp"
#include "sim/world.hpp"
#include "strategy.pb.h"

namespace apiary::sim::scenarios {

/// What to run.
struct PsScenarioConfig {
  std::uint64_t seed = 1;           ///< seeds the World (link latencies, trace)
  pb::autodist::Strategy strategy;  ///< PS synchronizers for the logistic-regression model
  std::size_t features = 16;        ///< model size (w has `features` values)
  std::size_t samples = 1024;       ///< synthetic data set size
  std::uint64_t data_seed = 1;      ///< seed of the data set
  double density = 1.0;             ///< a sample's values other than zero, of the features (< 1: sparse data)
  std::size_t batch = 16;           ///< samples per replica per step
  std::int64_t steps = 10;          ///< training steps (>= 0)
  core::ps::OptimizerConfig optimizer = [] {
    core::ps::OptimizerConfig o;
    o.learning_rate = 0.5F;
    return o;
  }();                                                                         ///< every shard's update rule (SGD, 0.5)
  core::ps::Aggregation aggregation = core::ps::Aggregation::sample_weighted;  ///< sync aggregation
  core::Duration min_latency = std::chrono::milliseconds(1);                   ///< one-way, per link
  core::Duration max_latency = std::chrono::milliseconds(10);                  ///< one-way, per link
  core::Duration compute = std::chrono::milliseconds(10);                      ///< virtual compute time per step
  core::Duration straggler = core::Duration::zero();  ///< extra compute per step of the last replica
  std::int64_t kill_ps_at = -1;       ///< >= 0: kill the first PS device when the chief begins this step
  std::int64_t kill_replica_at = -1;  ///< >= 0: kill the last replica when it begins this step
  /// >= 0: the replica killed by kill_replica_at starts again this long after, a fresh
  /// process: with drop_lost_after it rejoins the synchronous job where it stands (a PS
  /// strategy); under async it counts its steps afresh.
  core::Duration restart_replica_after = core::Duration(-1);
  /// >= 0: the PS device killed by kill_ps_at starts again this long after, a fresh
  /// process continuing the job from the chief's latest checkpoint (save_every; none
  /// yet: the job's start; core::ps::ShardServer::resume_at), and the replicas, waiting
  /// for it (ps_restart_wait), replay their pushes since (BSP; an SSP or async PS cannot
  /// resume, and the report says so).
  core::Duration restart_ps_after = core::Duration(-1);
  /// With restart_ps_after: how long the replicas wait for the PS (> 0; shorter than
  /// restart_ps_after, they fail before it is back).
  core::Duration ps_restart_wait = std::chrono::seconds(60);
  /// > 0: the chief keeps a checkpoint (parameters and optimizer states) at the start of
  /// every step that is a multiple of it, as `apiary ps --save-every` does.
  std::int64_t save_every = 0;
  /// After a kill, the time until its peers see their connections to it break (a
  /// transport's failure detection).
  core::Duration failure_detection = std::chrono::milliseconds(100);
  /// >= 0: the PS devices drop a replica whose session failed this long after and the
  /// job goes on without it (core::ps::ShardServer::set_drop_lost_after); negative: a
  /// lost replica ends the synchronous shards.
  core::Duration drop_lost_after = core::Duration(-1);
  core::Duration call_timeout = std::chrono::seconds(30);  ///< deadline of each pull and push
  /// Honour the strategy's local_replication: the replicas of a node (a host of the
  /// resource spec) pull its proxied dense shards through one PsProxyHost per node;
  /// false: every replica pulls from the PS.
  bool proxies = true;
  core::Duration local_latency = std::chrono::microseconds(50);  ///< one-way, replica <-> its node's proxy
  core::Duration max_time = std::chrono::hours(1);               ///< virtual time after which the run is hung
  /// All-reduce and mixed strategies: variables whose gradients are sparse (the rows
  /// they touch, all-gathered by every replica and averaged, or pushed to their PS as
  /// rows), e.g. "logreg/w:0".
  std::vector<std::string> sparse_variables;
  /// Times the hosts' handlers on the wall clock (PsScenarioReport::host_wall): the roles'
  /// own work in this process (the training step, encodings, sums, updates) without the
  /// World's handling of the messages between them (`apiary sim calibrate`). Changes
  /// nothing the run does.
  bool time_hosts = false;
  /// A machine's measured costs (`apiary sim calibrate`): every host runs on the machine
  /// of its device's host name (the profile's cores each; a loopback resource spec's
  /// processes all share one), each message and byte it handles and the step's work (the
  /// PS sums and updates, the replicas' gradients; `compute` is then not waited) costing
  /// processor time there, and every link has the profile's latency (the seeded
  /// latencies are not drawn).
  std::optional<CostProfile> profile;
};

/// Checks a PsScenarioConfig's numbers; the error names the field, its value and the range.
[[nodiscard]] Status validate(const PsScenarioConfig& config);

/// One node's proxy.
struct PsProxyReport {
  std::string node;          ///< host of the resource spec
  std::size_t replicas = 0;  ///< replicas reading through it
  std::size_t shards = 0;    ///< shards it caches
  std::int64_t pulls = 0;    ///< pulls it sent to the PS (one per shard per step)
  std::int64_t reads = 0;    ///< reads it answered
};

/// One step, over the replicas that reached it.
struct PsStepReport {
  std::int64_t step = 0;
  double loss = -1.0;                  ///< the chief's loss over the whole data set (-1: not reached)
  double batch_loss = 0.0;             ///< mean batch loss of the replicas that reached the step
  std::vector<std::int64_t> versions;  ///< per replica: version pulled (-1: not reached)
  core::Duration chief_time{};         ///< the chief's virtual step time
  core::Duration max_time{};           ///< the slowest replica's
};

/// How one replica ended.
struct PsReplicaOutcome {
  std::int32_t replica = 0;
  std::string device;                                          ///< its device in the strategy
  bool finished = false;                                       ///< pulled the final parameters
  bool killed = false;                                         ///< killed by the fault injector
  std::string error;                                           ///< why it stopped early ("" when finished)
  std::int64_t steps = 0;                                      ///< steps computed
  std::int64_t first_step = 0;  ///< the first of them (later than 0: a replica started again rejoined there)
  std::int64_t final_version = 0;                              ///< version of the final pull (finished only)
  std::map<std::string, std::vector<float>> final_parameters;  ///< finished only
  core::TimePoint end{};                                       ///< virtual time it finished or failed
};

/// What a run measured.
struct PsScenarioReport {
  std::uint64_t seed = 0;
  std::uint64_t trace_hash = 0;
  std::vector<std::string> servers;  ///< PS devices
  std::size_t shards = 0;
  std::string mode;  ///< "BSP", "SSP staleness k" or "async" (of the first shard)
  std::vector<PsStepReport> steps;
  std::vector<PsReplicaOutcome> replicas;
  std::vector<PsProxyReport> proxies;  ///< one per node with proxied shards (config.proxies)
  std::uint64_t ps_pulls = 0;          ///< pulls the PS servers answered, in all
  std::string killed;                  ///< what the fault injector killed and when ("" if nothing)
  std::string resumed;                 ///< a PS device started again: when, and from which step
  bool hung = false;                   ///< max_time passed, or nothing was left to happen, with replicas still running
  core::TimePoint virtual_time{};      ///< virtual time at the end of the run
  core::Duration cpu{};                ///< with a profile: processor time charged on every machine, in all
  core::Duration host_wall{};          ///< with config.time_hosts: wall time spent in the hosts' handlers
  /// With a profile: each node's processor time ("PS DEVICE", "replica R", "proxy HOST").
  std::vector<std::pair<std::string, core::Duration>> cpu_by_node;
  WorldStats world;                    ///< the World's counters at the end
  std::size_t anomalies = 0;           ///< World::anomalies() (0 in a correct run)
};

/// Runs the scenario to the end, whatever the strategy: PS devices for its PS variables
/// (a PS or mixed strategy: Parallax puts the sparse ones there), every replica a
/// ReplicaHost (replica_host.hpp) that all-reduces the others among the replicas (an
/// all-reduce or mixed strategy: every replica bit-identical; the variables named in
/// sparse_variables travel as the rows they touch). Errors: a config that fails
/// validate(), kill_ps_at set for an all-reduce strategy (there is no PS), a strategy the
/// planners refuse for the logistic-regression model (invalid_argument), an unknown
/// name in sparse_variables (invalid_argument).
[[nodiscard]] Result<PsScenarioReport> run_ps_scenario(const PsScenarioConfig& config);

/// Whether any node or part of `strategy` uses a PSSynchronizer.
[[nodiscard]] bool uses_ps(const pb::autodist::Strategy& strategy);

/// The per-step rows of a report from every replica's completed steps (replica 0 is the
/// chief), for steps 0..steps-1 that at least one replica reached. Shared by the PS and
/// all-reduce scenarios.
[[nodiscard]] std::vector<PsStepReport> step_reports(const std::vector<const std::vector<PsReplicaStep>*>& replicas,
                                                     std::int64_t steps);

/// Fills the world's part of a report: trace hash, virtual time, counters, anomalies.
void record_world(const World& world, PsScenarioReport& report);

/// The report as readable lines: one per step, one per replica, then seed and trace hash.
[[nodiscard]] std::string format_report(const PsScenarioReport& report);

/// Where the scenario's roles listen: PS i at /ip4/10.0.0.i/tcp/5000, proxy i at port
/// 6000 of the same host, replica r at port 7000 (swarm_address).
inline constexpr std::uint16_t k_ps_port = 5000;
inline constexpr std::uint16_t k_proxy_port = 6000;
inline constexpr std::uint16_t k_replica_port = 7000;

/// Adds and starts one PsServerHost per PS device of `plan` at swarm_address(i, k_ps_port), holding its
/// shards at the model's initial values (`features` of the logistic regression); appends
/// each address and host, and returns the address by device; `drop_lost_after` >= 0:
/// the servers drop a lost replica that long after (PsScenarioConfig::drop_lost_after).
/// Shared by the PS and mixed scenarios. Errors: the shards' and the World's.
/// ps_server() makes one such host: at `values` and `states` (a checkpoint's, empty:
/// afresh), continuing the job at `resume_at` when set.
[[nodiscard]] Result<std::unique_ptr<PsServerHost>> ps_server(
    const core::ps::TrainingPlan& plan, const std::string& device,
    const std::map<std::string, std::vector<float>>& values,
    const std::map<std::string, core::ps::Optimizer::State>& states, core::Duration drop_lost_after,
    std::optional<std::int64_t> resume_at = std::nullopt);
[[nodiscard]] Result<std::map<std::string, core::PeerAddr>> add_ps_servers(
    World& world, const core::ps::TrainingPlan& plan, std::size_t features, std::vector<core::PeerAddr>& addrs,
    std::vector<PsServerHost*>& hosts, core::Duration drop_lost_after = core::Duration(-1));

}  // namespace apiary::sim::scenarios
