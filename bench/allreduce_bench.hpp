#pragma once
/// `apiary bench allreduce`: float32 all-reduce among 2 and 4 processes on one machine,
/// apiary's butterfly all-reduce (AllReduceRunner over the gateway, UCX tcp and shm)
/// beside Gloo's ring (tcp) and Open MPI's MPI_Allreduce (shared memory and tcp), all in
/// the same run, loopback only. Every system runs the workload of
/// bench/allreduce_workload.hpp in its own processes; the table shows the slowest rank's
/// time per op, algbw = bytes / time and busbw = algbw * 2(n-1)/n (GB/s = 1e9 B/s), the
/// voluntary context switches per op (thread hand-offs, all ranks together) and apiary's
/// busbw over the best peer's. See bench/README.md.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace apiary::bench {

/// What `run_allreduce_bench` measures.
struct AllReduceBenchOptions {
  std::vector<std::size_t> ranks{2, 4};  ///< group sizes, one set of processes per system and size
  std::vector<std::size_t> sizes{std::size_t{4} << 10, std::size_t{1} << 20, std::size_t{16} << 20,
                                 std::size_t{64} << 20};  ///< buffer bytes (float32)
  /// Systems: apiary-tcp, apiary-shm, apiary-shm-poll (apiary-shm whose transport threads
  /// spin 20 µs after each event before sleeping, as MPI spins), gloo
  /// (gloo::AllreduceRing, tcp), mpi-shm (ob1 + vader), mpi-tcp (ob1 + btl tcp on lo); on
  /// request also apiary-shm-dev (apiary-shm with the part reductions on a device actor).
  std::vector<std::string> systems{"apiary-tcp", "apiary-shm", "apiary-shm-poll", "gloo", "mpi-shm", "mpi-tcp"};
  std::int64_t part_size_bytes = std::int64_t{1} << 19;  ///< apiary's part size, bytes (hivemind's)
  bool quick = false;   ///< about a tenth of the iterations (a smoke run, < 2 min)
  bool timers = true;   ///< false: apiary ranks drop the runner's fault timers (profiling)
  /// apiary ranks keep freed memory in the heap (GLIBC_TUNABLES mmap and trim thresholds
  /// at 4 GiB), so the buffers of one op reuse the pages of the last instead of faulting
  /// in fresh ones.
  bool keep_heap = false;
  bool one_timer = false;  ///< apiary ranks: one pending CAF wake-up for all the runner's timers
  int busy_poll_us = 0;    ///< apiary ranks: transport busy-poll before sleeping, µs
  int timeout_s = 300;  ///< longest run of one system at one group size
  int quiet_wait_s = 30;  ///< before each system, wait up to this long for the CPUs to be < 25% busy
  std::string self_exe;   ///< runs apiary's ranks (`<self_exe> bench allreduce-rank`); empty: this one
  std::string gloo_path;  ///< apiary_allreduce_gloo_peer; empty: $APIARY_ALLREDUCE_GLOO_PEER, next to self, PATH
  std::string mpi_path;   ///< apiary_allreduce_mpi_peer; empty: $APIARY_ALLREDUCE_MPI_PEER, next to self, PATH
};

/// Runs every system at every group size and prints the tables and the goals. Returns 0
/// when every apiary figure was measured and checked, 1 otherwise.
int run_allreduce_bench(const AllReduceBenchOptions& options);

/// One system's figure at one size, over all its ranks.
struct AllReduceFigure {
  std::size_t ranks = 0;
  std::size_t bytes = 0;
  std::size_t iters = 0;
  double us_per_op = 0;        ///< the slowest rank's mean
  double vcsw_per_op = 0;      ///< voluntary context switches per op, all ranks summed
  double nivcsw_per_op = 0;    ///< involuntary ones, all ranks summed
  double cpu_us_per_op = 0;    ///< CPU time per op, all ranks (every thread) summed, µs
  std::size_t reports = 0;     ///< ranks that reported
  bool ok = true;              ///< every rank's check passed

  /// bytes / time, GB/s (1e9 B/s).
  [[nodiscard]] double algbw() const { return us_per_op > 0 ? static_cast<double>(bytes) / us_per_op / 1e3 : 0; }
  /// algbw * 2(n-1)/n, GB/s: what each link carried, comparable across group sizes.
  [[nodiscard]] double busbw() const {
    return ranks > 0 ? algbw() * 2.0 * static_cast<double>(ranks - 1) / static_cast<double>(ranks) : 0;
  }
};

/// Folds every allreduce_result line of `output` into one figure per buffer size.
std::map<std::size_t, AllReduceFigure> parse_allreduce_results(std::string_view output);

}  // namespace apiary::bench
