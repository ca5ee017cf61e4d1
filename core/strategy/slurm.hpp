#pragma once
/// A resource spec for the nodes of a Slurm allocation: Slurm's compact host lists
/// ("node[01-03,07],gpu-a[1-2]") expanded as `scontrol show hostnames` does, its
/// SLURM_TASKS_PER_NODE counts ("2(x3),1"), and the YAML of a ResourceSpec with one node
/// per host (the first the chief), one replica per task: `apiary strategy resource-spec
/// --from-slurm` inside an allocation, before `srun apiary ps ...` (every task takes its
/// place from SLURM_PROCID: api/job_places.hpp).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "messages/result.hpp"

namespace apiary::core::strategy {

/// The host names of a Slurm host list, in order: comma-separated items, each with any
/// number of bracketed groups of numbers and ranges (a range keeps its first bound's
/// width: "n[08-10]" is n08 n09 n10). Errors: invalid_argument naming the item (an
/// unclosed or empty bracket, a range going down, a bound that is not a number, more than
/// 65536 hosts, a host name longer than 255 characters).
[[nodiscard]] Result<std::vector<std::string>> expand_hostlist(std::string_view list);

/// SLURM_TASKS_PER_NODE ("2(x3),1": 2 tasks on each of 3 nodes, then 1) as one count per
/// node. Errors: invalid_argument naming the part.
[[nodiscard]] Result<std::vector<std::int64_t>> expand_tasks_per_node(std::string_view counts);

/// The resource spec of an allocation as YAML: one node per host of SLURM_JOB_NODELIST
/// (or SLURM_NODELIST), the first the chief; on each, `gpus_per_node` GPUs (ids 0..n-1)
/// when > 0, else one CPU device per task (SLURM_TASKS_PER_NODE; 1 when unset), so that
/// the builders put one replica on each. `env` reads a variable (nullptr: unset).
/// Errors: invalid_argument (no node list, a count per node that does not match the
/// hosts, a bad list or count).
[[nodiscard]] Result<std::string> slurm_resource_spec(const std::function<const char*(const char*)>& env,
                                                      std::int64_t gpus_per_node = 0);

}  // namespace apiary::core::strategy
