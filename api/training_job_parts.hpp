#pragma once
/// The pieces of apiary::run_training_job (api/training_job.hpp) that its files share:
/// api/training_job.cpp (plans, the PS and replica processes), api/training_loop.cpp (a
/// replica and its training loop), api/embedded_job.cpp (the whole job in one process)
/// and api/node_proxy.cpp (node proxies and the job's DHT). Not for trainers: the
/// facades they use are apiary::Replica, ParameterServer and the job directory.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor.hpp>

#include "actors/collective/nccl_group.hpp"
#include "actors/gateway.hpp"
#include "actors/ps/proxy_actor.hpp"
#include "api/dht.hpp"
#include "api/job_directory.hpp"
#include "api/parameter_server.hpp"
#include "api/replica.hpp"
#include "api/runtime.hpp"
#include "api/training_job.hpp"
#include "core/collective/ar_plan.hpp"
#include "core/ps/checkpoint.hpp"
#include "core/ps/plan.hpp"
#include "messages/result.hpp"
#include "strategy.pb.h"

namespace apiary::training_job {

/// The options of this process, the output, and what was read for them.
struct Job : TrainingJobOptions {
  JobOutput out;
  /// The --restore checkpoint, read and checked against the model; null without one.
  std::shared_ptr<const core::ps::Checkpoint> restored;
  /// --resume: the latest --save checkpoint; null when there is none yet (the PS then
  /// continues from the job's start: the --restore checkpoint or the initial values).
  std::shared_ptr<const core::ps::Checkpoint> resumed;
};

/// A job's all-reduce part, for its replicas (all-reduce and mixed strategies).
struct AllReducePart {
  std::shared_ptr<const core::collective::ArPlan> plan;  ///< null: a PS job
  std::vector<core::PeerAddr> members;                   ///< every replica's collective multiaddr, rank order
};

/// The --peers prefix naming a replica's collective address in a mixed job:
/// `replica:<device>=HOST:PORT`.
inline constexpr const char* k_replica_peer_prefix = "replica:";
/// The --peers prefix naming a node's proxy: `proxy:<node>=HOST:PORT`.
inline constexpr const char* k_proxy_peer_prefix = "proxy:";

/// The optimizer of --optimizer and --learning-rate.
core::ps::OptimizerConfig optimizer_of(const Job& a);
/// The variables of the logistic-regression model of `features` features, whole.
std::vector<core::ps::VariablePlan> model_variables(std::size_t features);
/// Splits "host:port" ("[v6]:port" too). Errors: invalid_argument.
Result<std::pair<std::string, std::uint16_t>> split_host_port(const std::string& text, const char* what);
/// The process's runtime listening on `host_port` ("host:port", as --listen), over
/// UCX `mode` ("tcp" or "shm"), plaintext when `insecure`, every call authorized by the
/// swarm authority key file `authority` when it is not empty.
Result<std::unique_ptr<Runtime>> start_runtime(const std::string& host_port, const std::string& mode,
                                               bool insecure, const std::string& authority);
/// The options of PS device `device` of the job: its shards at their initial values (or
/// the --restore checkpoint's, with its optimizer state when the optimizer is the same).
ParameterServerOptions ps_options(const Job& a, const core::ps::TrainingPlan& plan, const std::string& device);

/// The all-reduce plan of the strategy when it uses AllReduceSynchronizers (none when it
/// is a PS strategy; a mixed strategy's PS variables are listed in ArPlan::ps_variables),
/// checked against the model and the resource spec. The variables named in --sparse have
/// sparse gradients (the rows they touch, gathered by every replica and averaged).
/// Errors: the files' and plan_allreduce's, naming the file; invalid_argument for an
/// unknown name in --sparse.
[[nodiscard]] Result<std::optional<core::collective::ArPlan>> load_allreduce_plan(
    const Job& a, const pb::autodist::Strategy& strategy);
/// The training plan of the strategy (of its PS part only when `ps_only`: a mixed
/// strategy, with the --sparse variables marked sparse), checked against the model and
/// the cluster.
[[nodiscard]] Result<core::ps::TrainingPlan> load_plan(const Job& a, const pb::autodist::Strategy& strategy,
                                                       bool ps_only);

/// "/ip4/H/tcp/P" (or /ip6/) for "H:P" ("[v6]:P" too): a replica's collective address.
/// Errors: invalid_argument naming `flag`.
[[nodiscard]] Result<core::PeerAddr> replica_multiaddr(const std::string& host_port, const char* flag = "--peers");
/// Every replica's multiaddr, in the order of `replicas` (the plan's), from
/// DEVICE=HOST:PORT entries (after `prefix`, e.g. "replica:"; entries without it are
/// skipped when it is non-empty); `host_ports` gets their "HOST:PORT" in the same order.
/// Errors: invalid_argument for a malformed entry or a replica device without one.
[[nodiscard]] Result<std::vector<core::PeerAddr>> replica_members(const std::vector<std::string>& peers,
                                                                  const std::vector<std::string>& replicas,
                                                                  const std::string& prefix,
                                                                  std::vector<std::string>& host_ports);
/// The plan's collectives ("all-reduce plan: ...") and notes, as lines.
[[nodiscard]] std::string format_allreduce_plan(const core::collective::ArPlan& plan);
/// The PS devices holding `v`'s shards, comma-separated, in order of first use.
[[nodiscard]] std::string devices_of(const core::ps::TrainingPlan& plan, const core::ps::VariablePlan& v);
/// How a mixed job splits the model ("mixed plan: ...") and its all-reduce plan, as lines.
[[nodiscard]] std::string format_mixed_plan(const core::collective::ArPlan& ar, const core::ps::TrainingPlan& ps);

/// Replica `rank`'s member of the NCCL group of a job's replicas, on the GPU its replica
/// device names (localhost:GPU:1 -> CUDA device 1), found by the others at `root`
/// (replica 0's multiaddr) through `gw`; `job` names the group. nullptr when the plan
/// has no NCCL group. Blocks until every replica joined. Errors: unsupported when the
/// replica's device is not a GPU or this process cannot use it ("NCCL needs a GPU on
/// every replica; ..."), NcclGroup::create's otherwise, all naming the replica.
[[nodiscard]] Result<std::shared_ptr<actors::NcclGroup>> nccl_group_for(
    caf::actor_system& sys, std::shared_ptr<actors::Gateway> gw, const core::collective::ArPlan& plan,
    std::size_t rank, const core::PeerAddr& root, std::int64_t timeout_ms, const std::string& job);

/// Starts replica `id` of a job on `gateway` (apiary::Replica): the PS variables of `ps`
/// (null: none) at `servers` (PS device -> "host:port"), pulled through `pull_via`
/// (shard -> a node proxy's "host:port"), and the all-reduced ones of `ar` among its
/// members, over their NCCL group when the plan has NCCL groups (named `nccl_job`); the
/// all-reduced variables' optimizers continue from the --restore checkpoint.
Result<std::unique_ptr<Replica>> start_replica(const Job& a, caf::actor_system& system,
                                               std::shared_ptr<actors::Gateway> gateway, std::int32_t id,
                                               const core::ps::TrainingPlan* ps,
                                               const std::map<std::string, actors::PeerKey>& servers,
                                               const std::map<std::size_t, actors::PeerKey>& pull_via,
                                               const AllReducePart& ar, const std::string& nccl_job);
/// Trains `replica` of `replicas` for --steps steps (on the data of the steps after the
/// --restore checkpoint's): joins the others, then pulls, computes and pushes each step,
/// pulls the final parameters and leaves; prints one line per step and the final
/// parameters (with the collectives run when `collectives`), and the chief writes the
/// --save checkpoint. Errors: the first failure (reported).
Status train(const Job& a, Replica& replica, std::size_t replicas, bool collectives);

/// The whole job in this process, on one actor system: each PS device of `plan`, each
/// node's proxy (shards with local_replication) and each replica has its own in-process
/// gateway, so the roles talk over the same RPC as separate processes do. Replicas
/// train on their own threads (a mixed or all-reduce strategy's replicas also
/// all-reduce `ar` among themselves, their NCCL group named `nccl_job`), after `header`
/// is printed. Errors: the first failing replica's (each reported).
Status run_embedded(const Job& a, const core::ps::TrainingPlan& plan,
                    std::shared_ptr<const core::collective::ArPlan> ar, const std::string& header,
                    const std::string& nccl_job);

/// Starts a DHT node on the role's actor system and gateway (one transport per process;
/// the node is addressed by its own PeerID there), bootstrapping from `initial_peers`
/// (multiaddrs with /p2p/; none: this node is the first of the job). Errors: as
/// Dht::start (bad multiaddr, no initial peer answered).
[[nodiscard]] Result<std::unique_ptr<Dht>> start_job_dht(caf::actor_system& sys,
                                                         std::shared_ptr<actors::Gateway> gateway,
                                                         const std::vector<std::string>& initial_peers);

/// Moves the `proxy:<node>` entries of `servers` (parsed --peers) to `proxies` (node ->
/// "host:port") and returns the PS devices of `plan` left without an address, with their
/// DHT keys (device -> key). Errors: invalid_argument naming them when there are some and
/// no --initial-peers to look them up with.
[[nodiscard]] Result<std::map<std::string, std::string>> split_peers(const Job& a, const core::ps::TrainingPlan& plan,
                                                                    std::map<std::string, actors::PeerKey>& servers,
                                                                    std::map<std::string, std::string>& proxies);

/// This replica's part in its node's proxy (shards with local_replication).
struct NodeProxy {
  std::string node;                                 ///< host of the replica's device
  std::map<std::size_t, actors::PeerKey> pull_via;  ///< proxied shard id -> the proxy's "host:port"
  /// Set on the node's first replica, which hosts the proxy on its gateway.
  caf::actor actor;
  std::shared_ptr<actors::ProxyCounters> counters;
  std::int64_t expected_reads = 0;  ///< reads of a whole job by all the node's replicas
  std::int64_t readers = 0;         ///< the node's other replicas, which say when they are done
};

/// Sets up replica `id`'s proxy: none when no shard has local_replication; on the node's
/// first replica, spawns the proxy on `gateway` (its PS addresses from `servers`) and
/// publishes it on `dht` when there is one; on the others, finds the proxy's address in
/// `proxies` (node -> "host:port", from --peers proxy:<node>=...) or else on `dht`.
/// Errors: invalid_argument when a non-first replica has neither; deadline_exceeded
/// when the proxy does not show up in the DHT within a.timeout_ms.
[[nodiscard]] Result<NodeProxy> setup_node_proxy(const Job& a, const core::ps::TrainingPlan& plan, std::int32_t id,
                                                 const std::map<std::string, actors::PeerKey>& servers,
                                                 const std::map<std::string, std::string>& proxies,
                                                 caf::actor_system& sys, std::shared_ptr<actors::Gateway> gateway,
                                                 Dht* dht, AddressPublisher* publisher);

/// On the proxy's host, after its own training: waits (up to a.timeout_ms) until the
/// node's other replicas have read their last step and said they are done (they have
/// every answer: one still arriving would be cut off by the host's exit), prints the
/// proxy's counters ("proxy <node>: P pulls for R reads, D of N readers done") and stops
/// it. On the node's other replicas, after their training: tells the proxy this replica
/// `id` is done (waiting up to a.timeout_ms for its answer; a proxy gone already is no
/// error).
void finish_node_proxy(const Job& a, NodeProxy& proxy, actors::Gateway& gateway, std::int32_t id);

}  // namespace apiary::training_job
