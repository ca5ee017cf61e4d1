#pragma once
/// `apiary ps` with an all-reduce strategy (AllReduce, PartitionedAR,
/// RandomAxisPartitionAR): no PS processes; every replica keeps its own copy of the
/// logistic-regression model, and each step averages its gradients with the other
/// replicas. through one collective per fusion group (apiary::Replica), weighted by
/// samples (AutoDist's replica-weighted mean, reference autodist.md §3.4; every replica
/// gets the same bits, so the copies stay identical), then applies its optimizer
/// locally. Sparse variables travel as the rows they touch, all-gathered once per step
/// and averaged by every replica. Replicas are standalone processes (--role chief|worker, each
/// given every replica's address with --peers DEVICE=HOST:PORT) or threads of one
/// process (--embedded).
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/collective/nccl_group.hpp"
#include "apps/ps_roles.hpp"
#include "core/collective/ar_plan.hpp"
#include "core/ps/checkpoint.hpp"
#include "core/ps/optimizer.hpp"
#include "core/effects.hpp"
#include "messages/result.hpp"

namespace apiary::apps {

/// The all-reduce plan of the strategy file when it uses AllReduceSynchronizers (none
/// when it is a PS strategy: the caller runs the PS job; a mixed strategy's PS
/// variables are listed in ArPlan::ps_variables, apps/ps_mixed.hpp), checked against the
/// logistic-regression model of `features` features and the resource spec. The
/// variables named in `sparse` have sparse gradients (the rows they touch, gathered by
/// every replica and averaged). Errors: the files' and plan_allreduce's, naming the
/// file; invalid_argument for an unknown name in `sparse`.
[[nodiscard]] Result<std::optional<core::collective::ArPlan>> load_allreduce_plan(
    const std::string& strategy_path, bool text, const std::string& spec_path, std::size_t features,
    const std::vector<std::string>& sparse = {});

/// Prints a replica's final line and parameters, as the PS job does (one fputs, so that
/// replicas sharing the process keep their lines whole).
void print_final(std::int32_t id, std::int64_t version, double loss, double mean_ms,
                 std::optional<std::uint64_t> collectives, const std::map<std::string, std::vector<float>>& params);

/// Runs the job's replica (or, embedded, all of them); prints one line per step and the
/// final parameters like the PS job. Returns the exit code (2 bad usage, 1 failure).
int run_allreduce_job(const ps_roles::PsArgs& args, const core::collective::ArPlan& plan);

/// Whether any fusion group of `plan` runs over NCCL.
[[nodiscard]] bool uses_nccl(const core::collective::ArPlan& plan);

/// Replica `rank`'s member of the NCCL group of a job's replicas, on the GPU its replica
/// device names (localhost:GPU:1 -> CUDA device 1), found by the others at `root`
/// (replica 0's multiaddr) through `gw`; `job` names the group. nullptr when the plan
/// has no NCCL group. Blocks until every replica joined. Errors: unsupported when the
/// replica's device is not a GPU or this process cannot use it ("NCCL needs a GPU on
/// every replica; ..."), NcclGroup::create's otherwise, all naming the replica.
[[nodiscard]] Result<std::shared_ptr<actors::NcclGroup>> nccl_group_for(
    caf::actor_system& sys, std::shared_ptr<actors::Gateway> gw, const core::collective::ArPlan& plan,
    std::size_t rank, const core::PeerAddr& root, std::int64_t timeout_ms, const std::string& job);

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

/// Prints the plan's collectives ("all-reduce plan: ...") and notes.
void print_allreduce_plan(const core::collective::ArPlan& plan);

}  // namespace apiary::apps
