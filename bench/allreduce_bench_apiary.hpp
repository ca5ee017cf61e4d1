#pragma once
/// apiary's rank of `apiary bench allreduce`: one process per rank, each with its own
/// actor system and gateway on 127.0.0.1, running core::averaging::AllReduceRunner in a
/// fixed group (every rank's address known up front, equal fractions, NONE codec, every
/// peer a node) inside one event-based actor that feeds it the gateway's deliveries
/// through actors::EffectExecutor. Per size it runs the workload of
/// bench/allreduce_workload.hpp (checked op, warm-up, timed ops), each op applying
/// tensor += delta, and prints allreduce_result lines.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/effects.hpp"

namespace apiary::bench {

/// What one apiary rank runs.
struct AllReduceRankOptions {
  std::size_t rank = 0;             ///< own index in `ports`
  std::vector<int> ports;           ///< every rank's gateway port on 127.0.0.1, in rank order
  std::string mode = "tcp";         ///< UCX lanes: "tcp" (err mode PEER) or "shm" (sysv + cma)
  std::vector<std::size_t> sizes;   ///< buffer sizes, bytes of float32
  std::int64_t part_size_bytes = std::int64_t{1} << 20;  ///< AllReduceConfig::part_size_bytes
  bool quick = false;               ///< the workload's smaller iteration counts
  bool timers = true;               ///< false: drop the runner's fault timers (profiling only)
  /// Keeps the runner's timers in the actor with one pending CAF wake-up
  /// (bench/allreduce_bench_timers.hpp) instead of one CAF delayed message per SetTimer.
  bool one_timer = false;
  int busy_poll_us = 0;             ///< transport::Config::busy_poll, µs (0: sleep on the event fd)
  /// The runner's part reductions run on a device actor (spawn_device_actor: the GPU if
  /// usable, else the CPU device actor's thread) instead of inline in the driver.
  bool device_reductions = false;
  std::string barrier_dir;          ///< shared empty directory: ranks meet there (ready/done files)
  int timeout_s = 300;              ///< longest wait for the other ranks, and for the whole run
};

/// Parses the rank's flags (argv[0] is skipped):
///   --rank R --ports P0,P1,... --mode tcp|shm --sizes B1,B2,... --part-size B
///   --barrier DIR [--quick] [--no-timers] [--one-timer] [--busy-poll-us U]
///   [--timeout-s S]
/// Returns false (and says why on stderr) for flags that do not make a rank.
bool parse_allreduce_rank_options(int argc, char** argv, AllReduceRankOptions& out);

/// Runs one rank (`apiary bench allreduce-rank FLAGS`) and prints its result lines.
/// Returns 0 when every check passed, 1 on a failed check or run, 2 on bad flags.
int run_allreduce_rank(int argc, char** argv);

}  // namespace apiary::bench
