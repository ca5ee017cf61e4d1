#pragma once
/// `apiary bench experts`: the workload of hivemind's benchmarks/benchmark_throughput.py
/// (reference §8.1) on apiary and on hivemind in the same run. An expert server with N
/// ffn experts of hidden size h; C client processes each send B batches of S rows to
/// experts drawn at random, forward then (unless forward-only) backward with gradient
/// ones (`out.sum().backward()`); samples/s = C * B * S / wall time, from the moment every
/// client is connected to the last one's last answer. Beside both, the bound: the same
/// batches through the same module in one process, no RPC (apiary's FfnExpert; torch for
/// hivemind's column). And the per-call overhead at batch 1: RemoteExpert::forward on a
/// nop expert against a plain unary round trip of the same runtime. See bench/README.md.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace apiary::bench {

/// One workload (a preset of benchmark_throughput.py, sized for the machine).
struct ExpertsPreset {
  std::string name;
  std::size_t experts = 16;       ///< N ffn experts on the server
  std::uint32_t hidden = 1024;    ///< h: each expert maps [rows, h] to [rows, h]
  std::size_t clients = 4;        ///< C client processes
  std::size_t batches = 2;        ///< B batches per client
  std::size_t batch_size = 256;   ///< S rows per batch
  std::size_t max_batch_size = 0; ///< the server's batch limit in rows; 0: 4 * S (upstream's)
  bool backward = true;           ///< forward then backward (false: forward only)
  std::size_t handlers = 0;       ///< hivemind's connection handler processes; 0: max(1, C / 2)

  [[nodiscard]] std::size_t total_rows() const { return clients * batches * batch_size; }
  [[nodiscard]] std::size_t server_batch_limit() const { return max_batch_size ? max_batch_size : 4 * batch_size; }
  [[nodiscard]] std::size_t handler_count() const { return handlers ? handlers : (clients / 2 ? clients / 2 : 1); }
};

/// The presets: "minimalistic", "ffn_small_batch" and "default" (upstream's shapes, batch
/// counts cut so that each runs in about a minute per system on 2 cores), "tiny" (a smoke
/// run of a few seconds). Unknown names give an empty list.
std::vector<ExpertsPreset> experts_presets(const std::vector<std::string>& names);

/// What `run_experts_bench` runs.
struct ExpertsBenchOptions {
  std::vector<std::string> presets{"minimalistic", "ffn_small_batch", "default"};
  std::vector<std::string> systems{"apiary", "hivemind"};  ///< which to run
  bool bound = true;               ///< also run the bound of each system
  bool latency = true;             ///< also measure the per-call overhead at batch 1
  std::size_t latency_calls = 2000;///< calls per latency figure (after 200 to warm up)
  std::uint64_t seed = 1;          ///< draws the batches and the experts each batch goes to
  std::string self_exe;            ///< `apiary` (runs the server and the clients); empty: this one
  std::string python;              ///< hivemind's interpreter; empty: $APIARY_HIVEMIND_PYTHON, else <build>/hivemind-venv
  std::string script;              ///< bench/python/bench_experts.py; empty: the source tree's
};

/// Runs every preset on every system, prints the tables, the goals and notes. Returns 0
/// when every apiary figure was measured, 1 otherwise (or for bad options).
int run_experts_bench(const ExpertsBenchOptions& options);

/// The apiary server child (`apiary bench experts-server FLAGS`: --experts N --hidden H
/// --max-batch-size M --cls ffn|nop --seed S): serves experts "expert.0".."expert.N-1"
/// and a plain echo handle on 127.0.0.1, prints "serving <multiaddr>", then serves until
/// SIGTERM or SIGINT and prints its counters. Returns 0 ok, 1 failure, 2 bad flags.
int run_experts_bench_server(int argc, char** argv);

/// The apiary client child (`apiary bench experts-client FLAGS`): connects to --server,
/// asks every expert's info, prints "ready", waits for the file --go to exist, then runs
/// its batches and prints one "experts_result" line. With --latency it instead times
/// --calls forwards of one row to expert.0 and as many plain echo calls of the same
/// bytes. Returns 0 ok, 1 failure, 2 bad flags.
int run_experts_bench_client(int argc, char** argv);

/// The bound of `preset`: the same batches through FfnExpert in this process, no RPC.
/// Returns samples/s, or a negative number when the preset cannot run.
double experts_bound_samples_per_s(const ExpertsPreset& preset, std::uint64_t seed);

/// The expert that batch `batch` of client `client` goes to (splitmix64 of the three,
/// mod `experts`); bench/python/bench_experts.py draws the same.
std::size_t expert_of_batch(std::uint64_t seed, std::size_t client, std::size_t batch, std::size_t experts);

}  // namespace apiary::bench
