#pragma once
/// The UCX backend: UCP active messages between processes. One thread per transport
/// owns the context, worker, listener and endpoints; it sleeps on the worker's event
/// fd and is woken by ucp_worker_signal when work is posted.
#include <atomic>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "transport/transport.hpp"
#include "transport/ucx/context.hpp"
#include "transport/ucx/crypto_pool.hpp"
#include "transport/ucx/endpoint.hpp"
#include "transport/ucx/worker.hpp"

namespace apiary::transport::ucx {

class Transport final : public transport::Transport {
 public:
  explicit Transport(Config config);
  ~Transport() override;

  Result<std::string> start(Handler* handler, const std::string& host, std::uint16_t port) override;
  void post(std::function<void()> fn) override;
  void send(const PeerKey& to, Frame frame) override;
  void disconnect(const PeerKey& peer) override;
  void prove_identity(const messages::Ed25519PrivateKey& key) override;
  void reserve(const PeerKey& relay, const std::string& peer_id, std::function<void(Result<RelayGrant>)> done) override;
  void advertise(const std::string& listen_addr) override;
  void stop() override;
  Stats stats() const override;
  std::string describe(const PeerKey& peer) override;

 private:
  /// A frame whose payload is still arriving through rendezvous.
  struct PendingRndv {
    Transport* self = nullptr;
    PeerKey from;
    std::shared_ptr<RxSlot> slot;  ///< the frame, in its connection's arrival order
    void* desc = nullptr;  ///< UCX data descriptor
    std::size_t offset = 0;  ///< where the data lands in the payload (after a spliced head)
    std::size_t length = 0;  ///< bytes of data
    Buffer zone;             ///< or: the posted Landing the data goes to (the payload is head + tail)
    /// Encrypted connections: the session, the payload's nonce and tag (it is decrypted in
    /// place once fetched).
    std::shared_ptr<messages::noise::Session> session;
    std::uint64_t nonce = 0;
    std::string tag;
  };

  /// A frame that goes out on a given connection after progress returns: handshake
  /// messages and refusals (in clear), the first encrypted frame of a connection.
  struct ControlOut {
    Endpoint* ep = nullptr;
    Frame frame;
    bool plain = false;
  };

  /// Hands `frame` from `ep` to the handler in arrival order (behind pending rendezvous).
  void receive(Endpoint& ep, Frame frame);
  /// A rendezvous frame of `from` completed: delivers the ready frames at the head of its
  /// connection's order.
  void flush_in_order(const PeerKey& from, const std::shared_ptr<RxSlot>& slot);
  /// A rendezvous receive ended with `status`: opens a sealed payload (a large one on a
  /// crypto worker), then delivers.
  void rndv_complete(std::unique_ptr<PendingRndv> rp, ucs_status_t status);
  /// Delivers a finished rendezvous frame in its connection's order.
  void rndv_deliver(PendingRndv& rp);
  void run(std::string host, std::uint16_t port, std::promise<Result<std::string>>* started);
  Status setup(const std::string& host, std::uint16_t port);
  void loop();
  void shutdown();
  /// Lets what was sent before stop() leave (shutdown's first step): large payloads still
  /// being sealed, and rendezvous sends their peers are still fetching, for as long as
  /// they make progress.
  void finish_sends();
  void run_posted();
  void accept_pending();
  void start_rndv_receives();
  void dispatch_inbox();
  void reap_failed();
  /// Closes the refused connections whose linger ended (all of them with `all`).
  void close_lingering(Clock::time_point now, bool all);
  void check_keepalives(Clock::time_point now);
  void transfer_done(const PeerKey& key);
  int sleep_budget_ms(Clock::time_point now);

  Endpoint* find_or_connect(const PeerKey& key);
  Endpoint* adopt(ucp_ep_h ep, PeerKey key, bool outbound);
  /// A frame's bytes as they arrived on `ep` (an active message, or a relayed frame with
  /// `rndv` false): opened, checked and queued for the handler.
  ucs_status_t on_wire(Endpoint& ep, const void* header, std::size_t header_length, void* data, std::size_t length,
                       bool rndv);

  // Relays (relay.cpp).
  /// Dials `key` (HOST:PORT/p2p/RELAY/p2p-circuit/p2p/PEER) through its relay.
  Endpoint* connect_relayed(const PeerKey& key);
  /// A relayed connection on circuit `circuit` of `via`, registered (not yet started).
  Endpoint* adopt_relayed(PeerKey key, const PeerKey& via, std::uint64_t circuit, bool outbound);
  /// Sends a relayed connection's frame (its envelope as sealed, its payload) to its relay.
  void relay_out(Endpoint& ep, std::string header, Buffer payload);
  /// A relay frame (RELAY_RESERVE .. CIRCUIT_CLOSE) from `from`: never reaches the handler.
  void on_relay_frame(const PeerKey& from, Frame frame);
  void on_circuit_open(const PeerKey& from, const pb::Envelope& env);
  void on_circuit_data(const PeerKey& from, Frame frame);
  void on_circuit_close(const PeerKey& from, const pb::Envelope& env);
  void on_reserve(const PeerKey& from, const pb::Envelope& env);
  void on_reserved(const PeerKey& from, const pb::Envelope& env);
  /// Tells `end` its circuit is closed, for `why`.
  void close_circuit(const CircuitEnd& end, const Error& why);
  /// The connection `key` is gone for good: its relayed connections fail, a relay's
  /// circuits through it close, and a reservation at it is asked for again later.
  void relay_link_down(const PeerKey& key, const Error& why);
  /// Renews reservations, asks again for lost ones, and ends a relay's expired circuits.
  void tend_relays(Clock::time_point now);
  /// Asks the relay of `slot` (relay, PeerID) for it (again).
  void ask_reservation(const std::pair<PeerKey, std::string>& slot);
  /// Whether this node holds or asked for a slot at `relay` (for any of its PeerIDs).
  bool reserved_at(const PeerKey& relay) const;
  void send_on(Endpoint& ep, Frame frame);
  /// Sends `frame` on `ep` now: sealed when the connection has a session and not `plain`.
  void transmit(Endpoint& ep, Frame frame, bool plain);
  /// Seals `frame` with `cipher` under reserved nonces `first` (the envelope) and
  /// `first + 1` (the payload): the payload into a new buffer, its tag into the envelope,
  /// and the envelope (returned) with its own tag appended.
  static Result<std::string> seal_frame(messages::noise::CipherState& cipher, Frame& frame, std::uint64_t first);
  /// Hands a frame to UCX now.
  void send_now(Endpoint& ep, std::string header, Buffer payload);
  /// Sends the sealed frames at the front of each connection's tx_queue that are ready.
  void drain_tx();
  /// Opens a sealed envelope from `ep` (its bytes); a failure fails the connection.
  Result<std::string> open_header(Endpoint& ep, const void* header, std::size_t size);
  /// A frame on a connection whose handshake has not finished (encrypted mode), or the
  /// first frames of a connection in --insecure mode that say the peer is not.
  void on_handshake_frame(Endpoint& ep, const pb::Envelope& env, const void* data, std::size_t length);
  /// Fails `ep` for `why`; with `tell_peer`, an ERROR frame (call 0) says why first.
  void refuse(Endpoint& ep, const Error& why, bool tell_peer);
  /// Starts the handshake on a new connection (encrypted mode).
  Status begin_handshake(Endpoint& ep);
  /// The IDENTITY frame proving `key`'s PeerID on `ep` (its identity signs this side's
  /// static key of that connection).
  Result<Frame> identity_frame(const Endpoint& ep, const messages::Ed25519PrivateKey& key) const;
  /// Sends every extra identity's proof on `ep` now (a connection just established).
  void send_proofs(Endpoint& ep);
  /// An IDENTITY frame from `ep` (its payload): the PeerID is proven for the connection.
  void on_identity(Endpoint& ep, const Buffer& payload);
  /// Whether a caller's frame may leave on encrypted connection `ep`: an OPEN whose
  /// dialled PeerID (Frame::expect_peer) the peer did not prove is answered at once with
  /// an ERROR naming both, and its call's later frames are dropped with it.
  bool admit_call(Endpoint& ep, const Frame& frame);
  void send_control(Endpoint& ep, pb::FrameKind kind);
  void mark_failed(Endpoint& ep, Error why);
  void on_hello(Endpoint& ep, const pb::Envelope& env);
  Frame hello_frame() const;

  // UCX callbacks (run inside ucp_worker_progress on this transport's thread).
  static ucs_status_t on_frame_am(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t on_stray_am(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param);
  static void on_conn_request(ucp_conn_request_h request, void* arg);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void on_send_done(void* request, ucs_status_t status, void* user_data);
  static void on_rndv_done(void* request, ucs_status_t status, size_t length, void* user_data);

  Config config_;
  Handler* handler_ = nullptr;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> running_{false};

  // Posted work, guarded by posted_mu_.
  std::mutex posted_mu_;
  std::vector<std::function<void()>> posted_;
  std::atomic<ucp_worker_h> wake_target_{nullptr};
  std::atomic<bool> awake_{true};  ///< false while the thread is (about to be) asleep

  // Owned by the transport thread only.
  std::optional<Context> context_;
  std::optional<Worker> worker_;
  std::optional<Listener> listener_;
  std::string bound_;
  std::string advertised_;  ///< the listen address peers are told (bound_, or a relayed key)
  std::size_t max_header_ = 0;
  std::vector<ucp_conn_request_h> conn_requests_;
  std::vector<std::unique_ptr<PendingRndv>> rndv_pending_;
  std::vector<std::pair<PeerKey, Frame>> inbox_;    ///< received, to hand to the handler
  std::vector<std::pair<PeerKey, Frame>> replies_;  ///< transport-level answers to send
  std::vector<Endpoint*> unblocked_;                ///< dialled endpoints that just heard back
  std::vector<ControlOut> control_out_;              ///< per-connection frames to send
  std::optional<messages::Ed25519PrivateKey> identity_;  ///< signs handshakes (encrypted mode)
  std::unique_ptr<CryptoPool> crypto_;  ///< seals and opens large payloads (encrypted mode)
  std::vector<messages::Ed25519PrivateKey> extra_identities_;  ///< prove_identity's keys
  /// Connections by their UCP endpoint (a relayed one by its own address).
  std::unordered_map<const void*, std::unique_ptr<Endpoint>> endpoints_;
  /// Relayed connections this node is an end of, by their circuit on the relay's connection.
  std::map<CircuitEnd, Endpoint*> circuits_;
  std::uint64_t next_circuit_ = 0;
  /// Serving as a relay (Config::relay_service).
  std::optional<RelayBook> relay_book_;
  /// Reservations this node holds or asked for, by relay and PeerID (bytes).
  struct Reservation {
    std::vector<std::function<void(Result<RelayGrant>)>> waiting;  ///< reserve() callers not yet answered
    std::optional<RelayGrant> grant;
    bool asked = false;                ///< a RELAY_RESERVE is unanswered
    bool keep = false;                 ///< granted once: kept (asked for again whenever lost)
    Clock::time_point ask_at{};        ///< when to ask again (renewal, or after the relay was lost)
  };
  std::map<std::pair<PeerKey, std::string>, Reservation> reservations_;
  std::unordered_map<PeerKey, Endpoint*> by_key_;
  std::vector<void*> closing_;
  /// Connections refused with an ERROR to the peer (flush_on_close), kept open until this
  /// time so the ERROR arrives before the peer hears of a closed connection (over tcp,
  /// UCX reports the close on another socket than the data, and a dialler could see only
  /// "rejected"); the peer hangs up first, saying why.
  std::vector<std::pair<ucp_ep_h, Clock::time_point>> lingering_;
  std::uint64_t inbound_counter_ = 0;
  std::size_t rndv_sends_ = 0;  ///< rendezvous sends not yet complete (fetched, or failed)

  struct Counters {
    std::atomic<std::uint64_t> sent{0}, received{0}, bytes_sent{0}, bytes_received{0}, malformed{0}, oversized{0}, stray{0}, down{0},
        landed{0}, handshakes{0}, refused{0}, refused_calls{0}, relayed{0}, circuits{0};
  } counters_;
};

}  // namespace apiary::transport::ucx
