#pragma once
/// Established peers for `apiary bench transport`: ucx_perftest and the bare-UCX
/// apiary_ucx_pingpong, run as separate processes on 127.0.0.1 (UCX_NET_DEVICES=lo) in
/// the same benchmark run, so apiary's figures sit beside what plain UCX achieves on the
/// same machine at the same moment. Every failure is a Result error meant to be shown
/// as "n/a (why)"; nothing here throws or aborts.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "messages/result.hpp"

namespace apiary::bench {

/// Where the peer tools are and how a run is bounded.
struct PeerConfig {
  /// ucx_perftest; empty = $APIARY_UCX_PERFTEST, else PATH (Debian: ucx-utils).
  std::string perftest_path;
  /// apiary_ucx_pingpong; empty = $APIARY_UCX_PINGPONG, else next to the running
  /// executable, else <its dir>/../bench (the build tree), else PATH.
  std::string pingpong_path;
  /// Wall-clock limit per run (both processes), seconds; the run is killed after it.
  std::chrono::seconds timeout{60};
  /// Pin the two processes of a run to two different CPUs (perftest -c, pingpong --pin).
  /// Busy-polling pairs on a 2-core machine are unstable without it.
  bool pin = true;
};

/// Final figures of one ucx_perftest run (its `-f -v` CSV line).
struct PerftestFigure {
  std::string test;            ///< "tag_lat", "ucp_am_bw", ...
  std::string tls;             ///< "tcp" or "shm"
  std::uint64_t size = 0;      ///< message size, bytes
  std::uint64_t iters = 0;     ///< timed iterations reported
  double one_way_us = 0;       ///< latency tests: typical (median) one-way latency, µs
  double rtt_us = 0;           ///< latency tests: 2 × one_way_us (perftest halves the RTT)
  double avg_one_way_us = 0;   ///< latency tests: mean one-way latency, µs
  double mib_per_s = 0;        ///< overall bandwidth, MiB/s (2^20 B/s)
  double msg_per_s = 0;        ///< overall message rate, messages/s
};

/// Runs `ucx_perftest -t <test>` server + client on 127.0.0.1 with a free port.
/// tls "tcp" sets UCX_TLS=tcp, "shm" sets UCX_TLS=sm,self (perftest exchanges addresses
/// itself, so no tcp connection manager is needed). `iters` timed, iters/10 warm-up.
Result<PerftestFigure> run_perftest(std::string_view test, std::string_view tls,
                                    std::uint64_t size, std::uint64_t iters,
                                    const PeerConfig& config = {});

/// Parses the output of `ucx_perftest -f -v`: the last CSV line (leading spaces allowed)
/// "iterations,typical_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr".
/// Fills iters and the numbers; test/tls/size stay empty.
Result<PerftestFigure> parse_perftest_output(std::string_view output);

/// Figures of one apiary_ucx_pingpong run (its "result ..." line).
struct PingpongFigure {
  std::string kind;            ///< "rtt" or "bw"
  std::string tls;             ///< "tcp" or "shm"
  std::string mode;            ///< "efd" (event fd + epoll) or "busy" (busy polling)
  std::uint64_t size = 0;      ///< payload bytes per message
  std::uint64_t iters = 0;     ///< timed iterations
  double median_us = 0;        ///< rtt: median round trip, µs
  double p99_us = 0;           ///< rtt: 99th percentile round trip, µs
  double mean_us = 0;          ///< rtt: mean round trip, µs
  double mib_per_s = 0;        ///< bw: one-way bandwidth, MiB/s
  double seconds = 0;          ///< bw: timed duration, s
};

/// 64 B request / 64 B reply active-message round trips between two bare-UCX processes
/// (sockaddr connection; tcp: err mode PEER; shm: TLS tcp,sm,self and err mode NONE).
/// busy = busy-poll both sides, else sleep on the worker event fd.
Result<PingpongFigure> run_bare_pingpong(std::string_view tls, bool busy, std::uint64_t iters,
                                         const PeerConfig& config = {});

/// One-way bandwidth of `size`-byte rendezvous active messages between two bare-UCX
/// processes (event-fd progress, 4 sends in flight), `iters` timed messages.
Result<PingpongFigure> run_bare_bw(std::string_view tls, std::uint64_t size, std::uint64_t iters,
                                   const PeerConfig& config = {});

/// Parses the "result key=value ..." line of apiary_ucx_pingpong output.
Result<PingpongFigure> parse_pingpong_output(std::string_view output);

/// "n/a (why)": how a benchmark table shows a peer figure that could not be measured.
std::string not_available(const Error& error);

}  // namespace apiary::bench
