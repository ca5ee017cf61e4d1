#pragma once
/// The pieces of `apiary ps` (apps/ps_cmd.cpp) that its embedded mode (apps/ps_embedded.cpp)
/// shares: the parsed flags, shard building, the replica and its training loop
/// (apps/ps_replica.cpp), and error reporting.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/gateway.hpp"
#include "api/parameter_server.hpp"
#include "api/replica.hpp"
#include "api/runtime.hpp"
#include "core/collective/ar_plan.hpp"
#include "core/ps/checkpoint.hpp"
#include "core/ps/plan.hpp"
#include "core/ps/shard.hpp"
#include "messages/result.hpp"

namespace apiary::apps::ps_roles {

/// The flags of `apiary ps`.
struct PsArgs {
  std::string role;
  std::string strategy;
  bool text = false;
  std::string resource_spec;
  std::string listen = "127.0.0.1:0";
  std::vector<std::string> peers;
  std::vector<std::string> initial_peers;  ///< DHT multiaddrs (with /p2p/) to bootstrap from
  std::string job = "ps";                  ///< DHT key prefix of the job's addresses
  std::string device;
  std::int32_t replica = -1;
  std::int64_t steps = 20;
  std::size_t batch = 32;
  std::size_t samples = 4096;
  std::size_t features = 16;
  std::uint64_t seed = 1;
  std::string optimizer = "sgd";
  float learning_rate = 0.5F;
  std::int64_t timeout_ms = 30000;
  std::int64_t step_delay_ms = 0;
  std::string mode = "tcp";
  bool stdin_stops = false;
  bool embedded = false;
  std::string save;     ///< --save: the chief writes a checkpoint here after the last step ({step}: its number)
  std::int64_t save_every = 0;  ///< --save-every: also at the start of every step that is a multiple of it
  std::string restore;  ///< --restore: the checkpoint the job starts from
  /// The --restore checkpoint, read and checked against the plan; null without one.
  std::shared_ptr<const core::ps::Checkpoint> restored;
};

/// Set when stdin closed under --stop-on-stdin-eof (replicas check it between steps).
extern std::atomic<bool> g_stdin_closed;

/// A job's all-reduce part, for its replicas (all-reduce and mixed strategies).
struct AllReducePart {
  std::shared_ptr<const core::collective::ArPlan> plan;  ///< null: a PS job
  std::vector<core::PeerAddr> members;                   ///< every replica's collective multiaddr, rank order
};

/// Prints `e` for the command and returns the exit code (2 for bad input, 1 otherwise).
int fail(const Error& e);
/// The optimizer of --optimizer and --learning-rate.
core::ps::OptimizerConfig optimizer_of(const PsArgs& a);
/// Splits "host:port" ("[v6]:port" too). Errors: invalid_argument.
Result<std::pair<std::string, std::uint16_t>> split_host_port(const std::string& text, const char* what);

/// The process's runtime listening on `host_port` ("host:port", as --listen), over
/// UCX `mode` ("tcp" or "shm").
Result<std::unique_ptr<Runtime>> start_runtime(const std::string& host_port, const std::string& mode);
/// Watches stdin: at its end, sets the stop flag and raises SIGTERM.
void watch_stdin();
/// The options of PS device `device` of the job: its shards at their initial values (or
/// the --restore checkpoint's, with its optimizer state when the optimizer is the same).
ParameterServerOptions ps_options(const PsArgs& a, const core::ps::TrainingPlan& plan, const std::string& device);
/// Starts replica `id` of a job on `gateway` (apiary::Replica): the PS variables of `ps`
/// (null: none) at `servers` (PS device -> "host:port"), pulled through `pull_via`
/// (shard -> a node proxy's "host:port"), and the all-reduced ones of `ar` among its
/// members, over their NCCL group when the plan has NCCL groups (named `nccl_job`); the
/// all-reduced variables' optimizers continue from the --restore checkpoint.
Result<std::unique_ptr<Replica>> start_replica(const PsArgs& a, caf::actor_system& system,
                                               std::shared_ptr<actors::Gateway> gateway, std::int32_t id,
                                               const core::ps::TrainingPlan* ps,
                                               const std::map<std::string, actors::PeerKey>& servers,
                                               const std::map<std::size_t, actors::PeerKey>& pull_via,
                                               const AllReducePart& ar, const std::string& nccl_job);
/// Trains `replica` of `replicas` for --steps steps (on the data of the steps after the
/// --restore checkpoint's): joins the others, then pulls, computes and pushes each step,
/// pulls the final parameters and leaves; prints one line per step and the final
/// parameters (with the collectives run when `collectives`), and the chief writes the
/// --save checkpoint. Returns the exit code.
int train(const PsArgs& a, Replica& replica, std::size_t replicas, bool collectives);
/// A PS process: serves the shards the plan puts on --device until SIGINT/SIGTERM.
int run_ps(const PsArgs& a, const core::ps::TrainingPlan& plan);
/// A replica process (--role chief|worker): finds the PS processes (--peers or the DHT),
/// starts its replica (with the job's all-reduce part, for a mixed strategy) and trains.
/// Returns the exit code.
int run_replica(const PsArgs& a, core::ps::TrainingPlan plan, const AllReducePart& ar = {});
/// --embedded: the whole job in this process (apps/ps_embedded.cpp), each replica on its
/// own thread (a mixed strategy's replicas also all-reduce `ar` among themselves).
int run_embedded(const PsArgs& a, const core::ps::TrainingPlan& plan,
                 std::shared_ptr<const core::collective::ArPlan> ar = nullptr);

}  // namespace apiary::apps::ps_roles
