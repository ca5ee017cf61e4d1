#pragma once
/// `apiary bench ps`: parameter-server steps on loopback. N replica processes pull and
/// push a synthetic model of mixed variable sizes (bench/ps_bench_process.hpp) through
/// K PS shard processes, BSP, for each K asked; beside them, in the same run, the same
/// model bytes averaged by apiary's all-reduce (`bench allreduce-rank`, tcp) and by
/// Gloo's ring among N processes, and apiary's one-way UCX bandwidth B (the transport
/// bench's sink stream, 16 MiB payloads), all over UCX tcp or shm (`mode`). Each PS row shows its step time against the
/// bound max(M/B, N*M/(K*B)): a replica moves M each way per step, and a shard N*M/K.
/// See bench/README.md.
#include <cstddef>
#include <string>
#include <vector>

namespace apiary::bench {

/// What `run_ps_bench` measures.
struct PsBenchOptions {
  std::size_t model_mb = 100;           ///< model size, MiB (float32)
  std::vector<std::size_t> shards{1, 2};  ///< PS shard counts K, one set of processes each
  std::size_t replicas = 4;             ///< replica processes N
  bool quick = false;                   ///< fewer steps and iterations (a smoke run, < 2 min)
  std::string mode = "tcp";             ///< UCX lanes of apiary's processes and of B: "tcp" or "shm"
  int timeout_s = 600;                  ///< longest run of one configuration, seconds
  std::string self_exe;                 ///< runs the PS, replica and all-reduce processes; empty: `apiary` next to this one
  std::string gloo_path;                ///< apiary_allreduce_gloo_peer; empty: $APIARY_ALLREDUCE_GLOO_PEER, next to self, PATH
};

/// Measures the bandwidth, every PS configuration and both all-reduces, and prints the
/// table and the goal. Returns 0 when every PS configuration ran and checked, 1 otherwise.
int run_ps_bench(const PsBenchOptions& options);

}  // namespace apiary::bench
