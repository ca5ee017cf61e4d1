#pragma once
/// One side of apiary_ucx_pingpong: a UCP context + worker + (listener) + endpoint, the
/// active-message handlers, and the progress loop (event fd or busy poll). Bare UCX only.
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ucp/api/ucp.h>

namespace apiary::bench::pingpong {

using Clock = std::chrono::steady_clock;

/// Command-line settings shared by the server, the client and the pair launcher.
struct Options {
  enum role_t { client, server, pair };
  role_t role = client;
  std::string host = "127.0.0.1";  ///< server address the client connects to
  int port = 0;                    ///< server port; 0 = ephemeral (server side)
  bool port_given = false;
  std::string tls = "tcp";         ///< "tcp" (err mode PEER) or "shm" (tcp,sm,self; NONE)
  bool busy = false;               ///< busy-poll instead of sleeping on the event fd
  bool pin = false;                ///< pair: pin server and client to distinct CPUs
  bool info = false;               ///< print the endpoint's lanes to stderr
  std::uint64_t size = 64;         ///< rtt payload, bytes (request and reply)
  std::uint64_t bw_size = 0;       ///< bw message size, bytes; 0 selects the rtt test
  int window = 4;                  ///< bw: rendezvous sends in flight
  std::uint64_t iters = 0;         ///< timed iterations; 0 = default of the test
  std::int64_t warmup = -1;        ///< untimed iterations; -1 = default of the test
  int timeout_s = 30;              ///< whole-run deadline, seconds
  int cpu = -1;                    ///< pin this process to this CPU; -1 = no pinning
};

/// Active-message ids. Every id 0..65535 has a handler (UCX 1.13 can crash on an id
/// without one); the unused ones drop and count.
namespace am {
constexpr unsigned ping = 0;  ///< client -> server, payload `size` bytes
constexpr unsigned pong = 1;  ///< server -> client, same payload size
constexpr unsigned data = 2;  ///< client -> server, bw payload (rendezvous)
constexpr unsigned fin = 3;   ///< client -> server, header = running count of data msgs
constexpr unsigned ack = 4;   ///< server -> client: every data msg up to fin has landed
constexpr unsigned quit = 5;  ///< client -> server: done
constexpr unsigned bye = 6;   ///< server -> client: quit seen
constexpr unsigned count = 7;
}  // namespace am

/// UCX objects and counters of one process. Not thread-safe (single-threaded worker).
class Peer {
 public:
  Peer() = default;
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;
  ~Peer();

  /// Creates context, worker, event fd and the AM handlers for `o.tls` / `o.busy`.
  bool open(const Options& o);
  /// Server: listens on 127.0.0.1:`port` and reports the bound port in `bound`.
  bool listen(int port, int& bound);
  /// Client: creates the endpoint to host:port (usable at once; wireup is queued).
  bool connect(const std::string& host, int port);
  /// Sends AM `id` with the reply flag; header and payload must outlive the send.
  bool send(ucp_ep_h ep, unsigned id, const void* header, std::size_t header_len,
            const void* payload, std::size_t len, std::uint32_t flags);
  /// Closes the endpoint with a flush, progressing until done or `deadline`.
  void close_ep(Clock::time_point deadline);

  /// Progresses until `done()` holds; false on an endpoint error or when `deadline`
  /// passes, with a message naming `what` unless it is null.
  template <class Done>
  bool drive(Done done, Clock::time_point deadline, const char* what);

  ucp_ep_h ep = nullptr;
  int inflight = 0;                   ///< send requests not yet completed
  std::uint64_t pongs = 0, acks = 0, byes = 0, data_sent = 0;
  std::uint64_t fin_header = 0;       ///< storage of the fin header while it is sent
  bool quit_seen = false;
  std::uint64_t unexpected_am = 0;    ///< messages to ids nobody uses

  // Receive side state, touched by the AM handlers (public for the C callbacks).
  ucp_conn_request_h conn_request = nullptr;
  std::vector<std::pair<void*, std::size_t>> rndv;  ///< stashed rendezvous descriptors
  std::uint64_t data_done = 0;        ///< data messages fully received
  int rx_inflight = 0;                ///< posted ucp_am_recv_data_nbx not yet done
  std::uint64_t fin_total = 0;
  ucp_ep_h fin_ep = nullptr;          ///< where to send the ack; null = no fin pending
  std::vector<char> reply_buf = std::vector<char>(4096, 'r');
  bool failed = false;
  ucs_status_t fail_status = UCS_OK;
  bool timed_out = false;             ///< a drive() ran into its deadline

 private:
  bool service();       ///< accept, post rendezvous receives, send due acks
  bool wait_event(Clock::time_point deadline);  ///< arm + epoll_wait (efd mode)
  bool register_handlers();

  ucp_context_h ctx_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_listener_h listener_ = nullptr;
  int epfd_ = -1;
  bool busy_ = false;
  ucp_err_handling_mode_t err_mode_ = UCP_ERR_HANDLING_MODE_PEER;
  std::vector<char> rx_buf_;          ///< one landing buffer reused by every data message
};

/// --pair: forks `self --server`, reads its port, runs the client; exit code of the run.
int run_pair(const Options& o, const char* argv0);
/// Exit code of a run that ran into its deadline (as timeout(1)).
constexpr int exit_timed_out = 124;

/// Client role: connect to o.host:o.port, run the test, print its result line; exit code
/// 0, 1 on an error, exit_timed_out when a deadline passed.
int run_client(const Options& o);
/// Pins the calling process to `cpu`; false (with a message) if the kernel refuses.
bool pin_to(int cpu);

/// Prints why a wait for `what` stopped (endpoint error or deadline) to stderr.
void report_wait_failure(const char* what, bool failed, ucs_status_t status);

template <class Done>
bool Peer::drive(Done done, Clock::time_point deadline, const char* what) {
  unsigned spins = 0;
  for (;;) {
    if (!service()) return false;
    if (done()) return true;
    if (failed) break;
    if (ucp_worker_progress(worker_) != 0) continue;
    if (busy_) {
      if ((++spins & 1023U) == 0 && Clock::now() > deadline) break;
      continue;
    }
    if (!wait_event(deadline)) break;
  }
  timed_out = timed_out || !failed;
  if (what != nullptr) report_wait_failure(what, failed, fail_status);
  return false;
}

}  // namespace apiary::bench::pingpong
