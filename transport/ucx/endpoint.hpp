#pragma once
/// One connection to a peer: its UCP endpoint plus what apiary tracks about it
/// (key, liveness for keepalives).
#include <atomic>
#include <cstdint>
#include <optional>
#include <deque>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include <ucp/api/ucp.h>

#include "messages/identity/noise.hpp"
#include "messages/result.hpp"
#include "transport/transport.hpp"

namespace apiary::transport::ucx {

/// An inbound frame held so that frames reach the handler in the order the peer sent
/// them: a rendezvous frame is delivered once its payload is in, and the frames that came
/// after it wait behind it.
struct RxSlot {
  Frame frame;
  bool ready = false;  ///< the payload is in (or failed)
};

/// A sealed frame on its way out, in its connection's nonce order. A large payload is
/// sealed on a crypto worker (`done` once it is), and the frames behind it wait for it.
struct TxJob {
  std::string header;  ///< the sealed envelope
  Buffer payload;      ///< the sealed payload
  std::optional<Error> failed;
  std::atomic<bool> done{false};
};

/// A live or failing connection. Owned by the transport; the endpoint is closed by
/// close(), never by the destructor (closing needs the worker to progress). A relayed
/// connection has no UCP endpoint: its frames travel as CIRCUIT_DATA on the connection to
/// its relay (`via`), under its circuit id there.
struct Endpoint {
  ucp_ep_h ep = nullptr;
  PeerKey via;                       ///< relayed: the relay's connection ("" for a direct one)
  std::uint64_t circuit = 0;         ///< relayed: the circuit's id on `via`
  bool circuit_closed = false;       ///< relayed: the relay (or the far end) already closed it
  PeerKey key;                       ///< "host:port" when we dialled, "inbound:N" when accepted
  std::string listen_addr;           ///< the peer's listen "host:port", from its HELLO
  std::string peer_id;               ///< the peer's PeerID bytes: proven by the handshake, or from its HELLO (--insecure)
  bool outbound = false;             ///< we dialled it
  bool failed = false;               ///< UCX reported an error; awaiting cleanup
  bool flush_on_close = false;       ///< a refusal is on its way to the peer: close gently
  bool heard = false;                ///< a frame arrived on it
  /// Dialled connections hold frames back until the peer's first frame (its HELLO)
  /// shows the connection is wired up: UCX 1.13 can assert on rendezvous sends queued
  /// before wireup completes (shared-memory lanes), and an unreachable peer then
  /// fails cleanly instead of swallowing frames.
  bool ready = true;
  std::vector<Frame> backlog;
  /// Encrypted connections: the Noise handshake while it runs, then the session (shared
  /// with rendezvous receives, which decrypt when their data is in).
  std::unique_ptr<messages::noise::Handshake> handshake;
  std::shared_ptr<messages::noise::Session> session;
  /// PeerIDs of nodes behind the peer's gateway, proven by IDENTITY frames.
  std::unordered_set<std::string> proven;
  /// Our calls refused on it because the peer did not prove the PeerID dialled (wire
  /// ids): their later frames stay here. Forgotten all at once when it grows large (the
  /// caller ends a refused call as soon as it hears, so old ones send nothing more).
  std::unordered_set<std::uint64_t> refused_calls;
  /// Sealed frames waiting for a payload ahead of them to be sealed (empty: none).
  std::deque<std::shared_ptr<TxJob>> tx_queue;
  Error failure;                     ///< why it failed
  Clock::time_point last_rx{};       ///< last frame received
  Clock::time_point last_probe{};    ///< last KEEPALIVE sent
  std::size_t transfers = 0;         ///< rendezvous sends and receives in flight
  /// Inbound frames behind a rendezvous receive still in flight, in arrival order
  /// (empty: frames go straight to the handler).
  std::deque<std::shared_ptr<RxSlot>> rx_order;
};

/// Dials host:port with the error mode matching `mode`. `err_cb(arg, ep, status)` is
/// called (inside progress) when the connection fails.
Result<ucp_ep_h> connect_endpoint(ucp_worker_h worker, const std::string& host, std::uint16_t port,
                                  Mode mode, ucp_err_handler_cb_t err_cb, void* arg);

/// Accepts a connection request with the error mode matching `mode`.
Result<ucp_ep_h> accept_endpoint(ucp_worker_h worker, ucp_conn_request_h request, Mode mode,
                                 ucp_err_handler_cb_t err_cb, void* arg);

/// Starts closing `ep` (flushing unless `force`); returns the pending request, or
/// nullptr when it closed at once.
void* close_endpoint(ucp_ep_h ep, bool force);

/// Frees the requests in `requests` that have completed and removes them from it.
void release_completed(std::vector<void*>& requests);

/// The endpoint's lanes and devices as UCX prints them.
std::string describe_endpoint(ucp_ep_h ep);

}  // namespace apiary::transport::ucx
