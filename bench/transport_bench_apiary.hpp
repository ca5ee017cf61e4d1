#pragma once
/// The apiary half of `apiary bench transport` (internal to bench/): the server process
/// that serves the benchmark handles, the event-based actor that drives calls against
/// it, and one measurement session (server + client gateway) per transport variant.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/gateway.hpp"
#include "messages/buffer.hpp"
#include "messages/result.hpp"

namespace apiary::bench::transport_bench {

/// Returns the request as is (the 64 B round trip).
inline constexpr const char* k_echo_handle = "bench.echo";
/// Accepts any payload and answers 8 bytes: the payload's size, little endian.
inline constexpr const char* k_sink_handle = "bench.sink";
/// Answers 32 bytes: the server process's ProcessCounters so far (four little-endian
/// u64 in declaration order), to count hand-offs, page faults and processor time per
/// call on its side.
inline constexpr const char* k_stats_handle = "bench.stats";
/// Spin time of the busy-poll variant, on both sides (transport::Config::busy_poll).
inline constexpr std::chrono::microseconds k_busy_poll{50};

/// Sets the CAF options both benchmark processes run with (the ones DESIGN.md asks for:
/// no idle polling between messages).
void apply_caf_config(caf::actor_system_config& cfg);
/// Those options as one line for the report.
std::string caf_config_line();

/// Counters of this whole process so far (every thread, getrusage).
struct ProcessCounters {
  std::uint64_t voluntary = 0;     ///< context switches: a thread went to sleep (a hand-off)
  std::uint64_t involuntary = 0;   ///< context switches: a thread was preempted
  std::uint64_t minor_faults = 0;  ///< page faults served without I/O (e.g. first touch of fresh memory)
  std::uint64_t cpu_us = 0;        ///< processor time, user and system, every thread (µs)
};
ProcessCounters process_counters();

/// The benchmark server as a child process, started as
/// `<exe> bench transport-server --mode <mode> [--busy]`. Its stdin is a pipe we hold:
/// closing it tells the server to stop. Its stdout+stderr come back through a pipe.
class ServerProcess {
 public:
  /// Starts the server (on the CPUs the calling thread may use) and waits up to
  /// `patience` for its "listening HOST:PORT" line.
  /// `direct`: the server's echo is a role on its transport thread (`--direct`).
  /// `secure`: encrypted connections (`--secure`); else both sides run --insecure.
  /// `authority`: every call authorized with that swarm authority key file (`--authority`).
  static Result<ServerProcess> start(const std::string& exe, const std::string& mode, bool busy, bool direct,
                                     bool secure, std::chrono::seconds patience, const std::string& authority = {});
  ServerProcess(ServerProcess&& other) noexcept;
  ServerProcess& operator=(ServerProcess&&) = delete;
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;
  /// Stops the server if still running (see stop(), 5 s patience).
  ~ServerProcess();

  /// The address it listens on, "host:port".
  const std::string& address() const { return address_; }
  /// Closes its stdin and waits up to `patience` for it to exit; kills it after that.
  /// An error says how it ended and what it printed last.
  Status stop(std::chrono::seconds patience);

 private:
  ServerProcess(pid_t pid, int in_fd, int out_fd) : pid_(pid), in_fd_(in_fd), out_fd_(out_fd) {}
  /// Appends what the child printed within `timeout_ms`; false once its output ended.
  bool pump(int timeout_ms);

  pid_t pid_ = -1;
  int in_fd_ = -1;   ///< write end of its stdin
  int out_fd_ = -1;  ///< read end of its stdout+stderr
  bool reaped_ = false;
  std::string output_;
  std::string address_;
};

/// One run of unary calls from one actor.
struct CallRun {
  std::vector<double> rtt_us;  ///< round trip of every call, µs, in completion order
  double seconds = 0;          ///< from the first issue to the last completion
};

/// What a call driver does: `calls` unary calls of `payload` to `handle` at `peer`,
/// `window` in flight, each reply expected to be `reply_bytes` long.
struct DriveSpec {
  std::string peer;
  std::string handle;
  Buffer payload;
  std::size_t reply_bytes = 0;
  std::size_t calls = 0;
  std::size_t window = 1;
};

/// Spawns an event-based actor that runs `spec` (it issues the next call from the
/// handler of each reply and timestamps there) and waits for it up to `patience`.
Result<CallRun> drive_calls(caf::actor_system& sys, const std::shared_ptr<actors::Gateway>& gw,
                            const DriveSpec& spec, std::chrono::seconds patience);

/// drive_calls() with the driver a role (transport_bench_roles.hpp) on `gw`'s transport
/// thread: no thread hand-off per call; `window` must be 1.
Result<CallRun> drive_on_transport_thread(caf::actor_system& sys, const std::shared_ptr<actors::Gateway>& gw,
                                          const DriveSpec& spec, std::chrono::seconds patience);

/// A round-trip figure with the hand-offs it cost.
struct RttFigure {
  double median_us = 0;
  double p99_us = 0;
  double mean_us = 0;
  std::size_t iters = 0;
  double client_switches_per_call = 0;  ///< voluntary context switches of the client process
  double server_switches_per_call = -1; ///< same for the server; -1 when it could not be read
  /// Processor time (user and system) of both processes per round trip: a lone call, each
  /// process waiting between calls; -1 when the server's could not be read.
  double cpu_us_per_call = -1;
};

/// Which figures a session measures, and how the two processes are placed.
struct SessionPlan {
  std::string exe;                 ///< executable that runs the server side
  std::string mode = "tcp";        ///< "tcp" or "shm"
  bool busy = false;               ///< busy-poll k_busy_poll on both sides
  /// The echo and the round-trip driver are roles on the transport-thread host of each
  /// side (actors/direct_host.hpp), not actors; only the round trip is measured then.
  bool direct = false;
  /// Encrypted connections (Noise XX, AES-256-GCM) on both sides; else both --insecure.
  bool secure = false;
  /// A swarm authority key file: every call is authorized on both sides (signed, checked;
  /// core/rpc/auth.hpp); empty: no authorization.
  std::string authority;
  std::optional<std::pair<int, int>> cpus;  ///< pin server to .first, client to .second
  std::size_t rtt_iters = 5000;
  std::size_t rate_calls = 0;      ///< 0: skip the calls/s figure
  std::size_t rate_in_flight = 64;
  std::size_t bw_size = 16u << 20; ///< bytes per payload to the sink
  std::size_t bw_iters = 0;        ///< 0: skip the bandwidth figure
  /// Connected, both processes left idle this long before the round trips, for their
  /// processor time a second with nothing to do; 0: skip that figure.
  std::chrono::milliseconds idle{0};
};

/// Figures of one session; each one is an error when it could not be measured.
struct SessionFigures {
  Result<RttFigure> rtt = make_error(errc::unavailable, "not measured");
  Result<double> calls_per_s = make_error(errc::unavailable, "not measured");
  Result<double> mib_per_s = make_error(errc::unavailable, "not measured");  ///< MiB/s one way
  double rate_call_p99_us = 0;  ///< calls/s run: 99th percentile of one call's time in the window, µs
  double rate_call_max_us = 0;  ///< calls/s run: the slowest call, µs
  double client_faults_per_payload = -1;  ///< bandwidth run: minor page faults per payload; -1 unknown
  double server_faults_per_payload = -1;  ///< same for the server
  /// Processor time of both processes (user and system) per call of the calls/s run, and
  /// per byte of the bandwidth run; -1 when the server's could not be read.
  double rate_cpu_us_per_call = -1;
  double bw_cpu_ns_per_byte = -1;
  /// Processor time a second of one idle process (the mean of both; SessionPlan::idle); -1 unknown.
  double idle_cpu_us_per_s = -1;
  std::size_t caf_workers = 0;  ///< CAF scheduler threads of the client

  /// Marks every figure as not measured, for `why`.
  void fail(const Error& why) {
    rtt = why;
    calls_per_s = why;
    mib_per_s = why;
  }
};

/// A gateway config whose transport signs with `identity` (its PeerID the key's).
void use_identity(actors::GatewayConfig& gc, const messages::Ed25519PrivateKey& identity);
/// Authorizes `identity`'s calls on `gw` with the swarm authority key in `authority_file`.
Status authorize_gateway(actors::Gateway& gw, const messages::Ed25519PrivateKey& identity,
                         const std::string& authority_file);

/// Starts a server, a client actor system and gateway (pinned as planned; the calling
/// thread's CPU set is restored afterwards), warms the connection up and measures.
SessionFigures run_session(const SessionPlan& plan);

}  // namespace apiary::bench::transport_bench
