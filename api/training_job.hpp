#pragma once
/// apiary::run_training_job: one process of a synchronous data-parallel job training the
/// built-in logistic-regression model (core/ps/logistic_regression.hpp) on synthetic
/// data, whatever its AutoDist strategy: what `apiary ps` runs (apps/README.md).
///
/// - A PS strategy: one process per PS device (role "ps") serves the shards the strategy
///   places there (apiary::ParameterServer); one process per replica ("chief" for replica
///   0, "worker" for the others) pulls parameters and pushes gradients each step
///   (apiary::Replica).
/// - An all-reduce strategy (AllReduce, PartitionedAR, RandomAxisPartitionAR) has no PS
///   role: every replica keeps its own copy of the model and each step averages its
///   gradients with the other replicas through one collective per fusion group, weighted
///   by samples (AutoDist's replica-weighted mean, reference autodist.md §3.4; every
///   replica gets the same bits, so the copies stay identical), then applies its optimizer
///   locally. Sparse variables travel as the rows they touch, all-gathered once per step
///   and averaged by every replica. Each replica is given every replica's address.
/// - A mixed strategy (Parallax puts sparse variables on parameter servers and
///   all-reduces the dense ones; a hand-written strategy may mix them any way, one kind
///   per variable) runs both: the PS processes plan from the strategy's PS part
///   (core::collective::ps_part) and serve only the PS variables; each replica, per step
///   and bulk-synchronously, pulls the PS variables, computes the gradients of the whole
///   model, pushes the PS variables' gradients (a sparse variable's as the rows it
///   touched), and averages the all-reduced variables' gradients with the other
///   replicas' and applies its optimizer.
/// - Embedded: every PS device, node proxy and replica of the job in this one process,
///   each on its own in-process gateway.
///
/// Processes find each other by addresses given up front (`peers`) or through the job's
/// DHT (api/job_directory.hpp); shards with local_replication are pulled through a proxy
/// per node (api/training_job_parts.hpp).
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "api/job_places.hpp"
#include "messages/result.hpp"

namespace apiary {

/// The settings of one process of a job (`apiary ps`'s flags, of the same names).
struct TrainingJobOptions {
  std::string role;  ///< "ps", "chief" or "worker"; empty: the whole job embedded
  std::string strategy;       ///< strategy file (`apiary strategy build`)
  bool text = false;          ///< the strategy file is protobuf text format
  std::string resource_spec;  ///< resource_spec.yml the strategy was built for
  std::string listen = "127.0.0.1:0";  ///< "host:port" (port 0: any)
  /// "DEVICE=HOST:PORT" of PS devices, "proxy:NODE=HOST:PORT" of node proxies, and (an
  /// all-reduce strategy: "DEVICE=...", a mixed one: "replica:DEVICE=...") of every replica.
  std::vector<std::string> peers;
  std::vector<std::string> initial_peers;  ///< DHT multiaddrs (with /p2p/) to bootstrap from
  std::string job = "ps";                  ///< DHT key prefix of the job's addresses
  std::string device;                      ///< role "ps": the PS device served
  std::int32_t replica = -1;               ///< role "worker": its replica id
  std::int64_t steps = 20;                 ///< training steps
  std::size_t batch = 32;                  ///< samples per replica per step
  std::size_t samples = 4096;              ///< samples in the synthetic data set
  std::size_t features = 16;               ///< features per sample
  double density = 1.0;                    ///< a sample's values other than zero, of the features (< 1: sparse)
  std::uint64_t seed = 1;                  ///< seed of the synthetic data
  std::string optimizer = "sgd";           ///< sgd, momentum or adam
  float learning_rate = 0.5F;              ///< the optimizer's step size
  std::int64_t timeout_ms = 30000;         ///< deadline of each pull and push (ms)
  std::int64_t step_delay_ms = 0;          ///< extra time per step (ms), to make a straggler
  std::string mode = "tcp";                ///< UCX same-host lanes: tcp or shm
  bool insecure = false;                   ///< plaintext connections (every process of the job must say so)
  std::string authority;                   ///< a swarm authority key file: every call authorized (Authorization)
  /// PS processes: drop a replica whose session failed this many ms later and go on
  /// without it (-1: a lost replica ends the synchronous shards, as before).
  std::int64_t drop_lost_after_ms = -1;
  /// Role "ps": stop once every replica of the job is done with this device (finished, or
  /// dropped), instead of waiting for `wait_for_stop` (a launcher's PS processes).
  bool until_replicas_finish = false;
  std::string save;             ///< the chief writes a checkpoint here after the last step ({step}: its number)
  std::int64_t save_every = 0;  ///< also at the start of every step that is a multiple of it
  std::string restore;          ///< the checkpoint the job starts from
  /// Role "ps": a PS process started again after it went down continues the running job
  /// from the latest --save checkpoint (none yet: from the job's start); the replicas,
  /// waiting for it (ps_restart_wait_ms), replay their pushes since. BSP shards only.
  bool resume = false;
  /// Replicas: wait this long (ms) for a PS process that went down to be started again
  /// with --resume (0: a PS going down ends the job). They keep their pushes of the last
  /// 2 x save_every + staleness + 2 steps (every step without save_every) to replay.
  std::int64_t ps_restart_wait_ms = 0;
  std::vector<std::string> sparse;  ///< variables of the model whose gradients are sparse
  /// When set, replicas stop before their next step, failing with `stop_reason`.
  const std::atomic<bool>* stop = nullptr;
  std::string stop_reason = "stopped";
};

/// Where a job's output goes: whole lines of progress (plans, steps, final values,
/// checkpoints; each call one or more lines ending in '\n', so that replicas sharing a
/// process keep theirs whole), and every failure as it happens (a replica's, and
/// failures that do not end the process, such as a replica's late leave). Either may be
/// empty: that output is dropped. Messages name the options as `apiary ps` spells its
/// flags (--peers, --restore, ...).
struct JobOutput {
  std::function<void(const std::string&)> print;
  std::function<void(const Error&)> error;
  /// Reports `e` through `error` and returns it.
  Error fail(Error e) const {
    if (error) error(e);
    return e;
  }
};

/// Runs this process's part of the job (`options.role`, or all of it embedded) to its
/// end: reads the strategy, the resource spec and the checkpoint to restore, then serves
/// a PS device until `wait_for_stop` returns (what it returns names the reason: "ps
/// DEVICE stopping on REASON"), or trains a replica (or every replica) for `steps`
/// steps. Every error is also reported to `output.error` when it happens; the one
/// returned decides the process's outcome (invalid_argument: bad usage).
[[nodiscard]] Status run_training_job(const TrainingJobOptions& options, const JobOutput& output,
                                      const std::function<std::string()>& wait_for_stop);

/// Takes this process's place in the job from its launcher's environment
/// (api/job_places.hpp: the rank from `RANK`, `OMPI_COMM_WORLD_RANK`, `SLURM_PROCID` or
/// `PMI_RANK`, the first port from `APIARY_PORT` or `MASTER_PORT`): the ranks are the
/// strategy's replicas, then one PS process per PS device. Sets `role`, `device`,
/// `replica`, `listen`, `until_replicas_finish` (a PS process ends with the job), and
/// adds to `peers` every other process's address (entries already there win). Returns a line saying the place. Errors: invalid_argument when
/// no launcher set a rank, when its world size is not the job's process count, or on a
/// bad variable, strategy or port.
[[nodiscard]] Result<std::string> take_place_from_environment(TrainingJobOptions& options, const EnvLookup& env);

}  // namespace apiary
