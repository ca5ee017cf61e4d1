#pragma once
/// RAII ownership of a UCP worker (single-threaded: only the transport's thread
/// touches it) with its event fd in an epoll set, and of the sockaddr listener.
#include <chrono>
#include <cstdint>
#include <string>

#include <ucp/api/ucp.h>

#include "messages/result.hpp"

namespace apiary::transport::ucx {

/// The active-message id every apiary frame uses.
inline constexpr unsigned k_frame_am_id = 0;
/// Payloads of at least this many bytes go by rendezvous (zero-copy); smaller ones are
/// copied eagerly, which costs less than rendezvous's extra round trip.
inline constexpr std::size_t k_rndv_threshold_bytes = 64 * 1024;
/// In shm mode, a payload from k_stage_min_bytes to k_stage_max_bytes that is not in
/// huge-page memory is copied into a pooled block (which is, from this size on) before it
/// is sent: the all-reduce's 512 KiB parts gained 10-20 % per op at 16 and 64 MiB. Larger
/// payloads leave as they are: staging a PS's variables of up to 32 MiB made its steps
/// about 12 % slower, the copy delaying each send by milliseconds.
inline constexpr std::size_t k_stage_min_bytes = 256 * 1024;
/// On an encrypted connection, payloads of at least this many bytes are sealed and
/// opened on a crypto worker (CryptoPool) rather than on the transport's thread.
inline constexpr std::size_t k_offload_crypto_bytes = 512 * 1024;
inline constexpr std::size_t k_stage_max_bytes = 2 * 1024 * 1024;
/// How long a connection refused with an ERROR to its peer stays open (Transport::lingering_).
inline constexpr std::chrono::milliseconds k_refusal_linger{2000};
/// Stopping, a transport waits for its sends to leave while they make progress: it gives
/// a peer up after this long without any (a frozen peer), and all of them after k_stop_max.
inline constexpr std::chrono::milliseconds k_stop_idle{2000};
inline constexpr std::chrono::seconds k_stop_max{60};
/// UCX 1.13 reads its handler table before range-checking an incoming id, and leaves
/// new slots uninitialised when the table grows: one message to an unused id can crash
/// the receiver. Every 16-bit id therefore gets a handler (ids wrap to 16 bits).
inline constexpr unsigned k_am_id_count = 65536;

/// A UCP worker plus its wakeup machinery. Move-only.
class Worker {
 public:
  /// Creates a single-threaded worker with an event fd registered in a new epoll set.
  static Result<Worker> create(ucp_context_h ctx);

  Worker(Worker&& o) noexcept;
  Worker& operator=(Worker&&) = delete;
  Worker(const Worker&) = delete;
  ~Worker();

  ucp_worker_h get() const { return worker_; }

  /// Registers `frame_cb` for k_frame_am_id and `stray_cb` for every other id, in
  /// ascending order.
  Status register_handlers(ucp_am_recv_callback_t frame_cb, ucp_am_recv_callback_t stray_cb,
                           void* arg);

  /// Largest active-message header the worker's lanes accept, in bytes.
  std::size_t max_am_header() const;

  /// Arms the event fd and sleeps up to `timeout_ms` (-1 = forever) unless events are
  /// already pending. Returns after any wakeup.
  void wait(int timeout_ms);

  /// Wakes a thread sleeping in wait(); safe from any thread.
  void signal();

 private:
  Worker(ucp_worker_h w, int epfd) : worker_(w), epfd_(epfd) {}
  ucp_worker_h worker_ = nullptr;
  int epfd_ = -1;
};

/// A sockaddr listener; connection requests go to `on_conn(request, arg)`.
class Listener {
 public:
  /// Listens on host:port (port 0 picks a free one).
  static Result<Listener> create(ucp_worker_h worker, const std::string& host, std::uint16_t port,
                                 ucp_listener_conn_callback_t on_conn, void* arg);
  Listener(Listener&& o) noexcept : listener_(o.listener_), bound_(std::move(o.bound_)) {
    o.listener_ = nullptr;
  }
  Listener& operator=(Listener&&) = delete;
  Listener(const Listener&) = delete;
  ~Listener();

  /// The bound "host:port".
  const std::string& bound() const { return bound_; }
  ucp_listener_h get() const { return listener_; }

 private:
  Listener(ucp_listener_h l, std::string bound) : listener_(l), bound_(std::move(bound)) {}
  ucp_listener_h listener_ = nullptr;
  std::string bound_;
};

/// Fills a sockaddr_storage from host and port; errors name what was wrong.
Result<std::size_t> make_sockaddr(const std::string& host, std::uint16_t port, void* storage);

/// "host:port" → (host, port), or an error naming the bad part.
Result<std::pair<std::string, std::uint16_t>> split_host_port(const std::string& key);

}  // namespace apiary::transport::ucx
