#pragma once
/// `apiary bench transport`: apiary's RPC figures between two processes on 127.0.0.1
/// (actor-to-actor unary round trip, calls/s with a window, one-way bandwidth), each
/// printed beside the established peer measured in the same run (bare UCX pingpong,
/// ucx_perftest) with the ratio and its target. See bench/README.md.
#include <cstddef>
#include <string>
#include <vector>

namespace apiary::bench {

/// What `run_transport_bench` measures. Defaults take well under a minute on 2 cores.
struct TransportBenchOptions {
  /// Transports to measure: "tcp" (tcp lanes, UCX PEER error mode) and/or "shm".
  std::vector<std::string> modes{"tcp", "shm"};
  std::size_t rtt_iters = 5000;        ///< sequential 64 B round trips timed per figure
  std::size_t rate_calls = 20000;      ///< calls timed for the calls/s figure
  std::size_t rate_in_flight = 64;     ///< calls kept in flight for the calls/s figure
  std::size_t bw_size = 16u << 20;     ///< bytes per payload for the bandwidth figure
  std::size_t bw_iters = 64;           ///< payloads timed for the bandwidth figure
  bool busy_poll = false;              ///< also measure with transport busy-poll (50 µs) on both sides
  /// Also measure encrypted connections (the default outside benchmarks) beside the
  /// plaintext (--insecure) ones the peers are compared with: RTT added, bandwidth ratio.
  bool secure = false;
  std::string self_exe;                ///< the executable that runs the server side
                                       ///< (`<self_exe> bench transport-server ...`); empty: this one
  bool quick = false;                  ///< small counts, for a smoke test (figures are rough)
};

/// Runs every figure for every mode, prints the CAF configuration, the machine load
/// before and after, and one table per mode: figure | apiary | peer | ratio | target.
/// A peer that cannot be run shows as "n/a (why)". Returns 0 when every apiary figure
/// was measured (targets missed or not), 1 when one could not be (or bad options).
int run_transport_bench(const TransportBenchOptions& options);

/// The server side, run in its own process: serves the benchmark handles over a
/// gateway in `mode` ("tcp" or "shm"; busy: busy-poll 50 µs; secure: encrypted, else
/// --insecure; authority: every call authorized with that swarm authority key file), prints
/// "listening HOST:PORT", and serves until its stdin closes. Returns 0, or 1 on error.
int run_transport_bench_server(const std::string& mode, bool busy, bool direct, bool secure,
                               const std::string& authority = {});

}  // namespace apiary::bench
