#pragma once
/// The gateway: one per process. It owns the transport and the RPC engine, both of
/// which live on the transport's thread; actors reach it through thread-safe calls
/// that post work there, and it delivers to actors with one anon_send. That is one
/// thread hand-off each way per call, the fewest a call between actors can take.
/// A host that runs on the transport thread itself (a DirectSink, actors/direct_host.hpp)
/// makes no hand-off at all: its calls run at once and its deliveries are function calls.
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <caf/actor_system.hpp>

#include "actors/delivery_target.hpp"
#include "core/rpc/auth.hpp"
#include "core/rpc/engine.hpp"
#include "transport/transport.hpp"

namespace apiary::actors {

using core::rpc::CallId;
using core::rpc::DeliveryKind;
using core::rpc::PeerKey;

/// Which transport backend a gateway runs on.
enum class Backend { ucx, local };

/// Gateway settings.
struct GatewayConfig {
  Backend backend = Backend::ucx;
  transport::Config transport;
  std::string host = "127.0.0.1";  ///< listen address
  std::uint16_t port = 0;           ///< 0 picks a free port
};

class Gateway final : private transport::Handler {
 public:
  /// Starts a gateway on its own transport. For Backend::local, every gateway started
  /// in this process shares one in-process fabric.
  static Result<std::shared_ptr<Gateway>> start(caf::actor_system& sys, GatewayConfig config);
  ~Gateway() override;
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  /// The bound listen address, "host:port".
  const std::string& address() const { return address_; }

  // ---- thread-safe API (any thread, any actor) ----
  /// Opens a call; every delivery for it goes to `reply_to` as a Delivery message.
  /// `landings` (streaming calls): memory posted for the callee's messages, in order, one
  /// per message: a spliced message that matches its Landing has its body received
  /// straight into the zone and is delivered as head + tail with Delivery::landed. The
  /// gateway drops a call's landings when the call is over; until then it holds the zones.
  /// `callee`: the PeerID dialled (/p2p/), if any; the call leaves only if `peer` proved it.
  CallId open(const DeliveryTarget& reply_to, const PeerKey& peer, const std::string& handle,
              pb::RpcKind kind, std::chrono::nanoseconds timeout, std::optional<Payload> first, bool end,
              std::string caller = {}, std::vector<Landing> landings = {}, std::string callee = {});
  /// A unary call: open with the request and end of stream. `caller` names the calling
  /// node (PeerID bytes) when several nodes share this gateway; empty: the gateway's own.
  CallId unary(const DeliveryTarget& reply_to, const PeerKey& peer, const std::string& handle, Payload request,
               std::chrono::nanoseconds timeout, std::string caller = {}, std::string callee = {}) {
    return open(reply_to, peer, handle, pb::UNARY, timeout, std::move(request), true, std::move(caller), {},
                std::move(callee));
  }
  /// Sends a message on a call (either role); `end` closes our direction.
  void send(CallId call, Payload message, bool end);
  /// Closes our direction of a call without a message.
  void end(CallId call);
  /// Callee: fails a call; the caller receives the error.
  void fail(CallId call, Error error);
  /// Either role: abandons a call; the other side is told.
  void cancel(CallId call, std::string reason);
  /// Routes calls to `handle` to `service` (Delivery messages, kind open first).
  void serve(const std::string& handle, const DeliveryTarget& service);
  /// Stops routing `handle`.
  void unserve(const std::string& handle);
  /// Runs `fn` on the transport thread with the transport (diagnostics, tests).
  std::future<std::string> describe(const PeerKey& peer);
  /// Runs `fn` on the transport thread: at once when called there, else posted.
  void run_on_thread(std::function<void()> fn);
  /// Whether the caller runs on the transport thread.
  [[nodiscard]] bool on_thread() const { return std::this_thread::get_id() == thread_.load(); }
  /// Gives `sink` the transport thread's ticks (its timers) until detach().
  void attach(std::shared_ptr<DirectSink> sink);
  void detach(const std::shared_ptr<DirectSink>& sink);
  transport::Stats transport_stats() const { return transport_->stats(); }  ///< transport counters
  /// Proves `key`'s PeerID on every encrypted connection (a node sharing this gateway).
  void prove_identity(const messages::Ed25519PrivateKey& key) {
    run_on_thread([this, key] { transport_->prove_identity(key); });
  }
  /// Reserves a slot at the relay at `relay` ("host:port") for PeerID `peer_id` (bytes; the
  /// gateway's own when empty, or a node's sharing it), kept by the transport from then on
  /// (transport::Transport::reserve); the future holds the grant or why there is none.
  std::future<Result<transport::RelayGrant>> reserve_relay(const PeerKey& relay, const std::string& peer_id = {});
  /// Tells peers this node listens at `listen_addr` from now on (Transport::advertise).
  void advertise(const std::string& listen_addr) {
    run_on_thread([this, listen_addr] { transport_->advertise(listen_addr); });
  }
  /// Authorizes the calls of `authorizer->peer_id()` (core/rpc/auth.hpp): each call it
  /// opens carries a signed request, and a call to one of its handles (a plain handle when
  /// it is the gateway's own identity, `handle@PeerID` for a node sharing the gateway) is
  /// served only when its request is authorized; the answer is signed, and the caller
  /// takes it only when that signature is a member's. Refusals are errc::unauthorized
  /// errors naming the call and why, and the connection goes on. Replaces an earlier
  /// authorizer of the same identity; null `authorizer` does nothing.
  void authorize(std::shared_ptr<core::rpc::Authorizer> authorizer);
  /// Stops authorizing the identity with PeerID bytes `peer_id` (a node leaving a shared
  /// gateway): its calls leave unsigned and its handles check nothing.
  void deauthorize(const std::string& peer_id);
  /// Whether the transport runs plaintext (Config::insecure).
  bool insecure() const { return insecure_; }
  /// Stops the transport; calls in flight end with errors. Idempotent.
  void stop();

 private:
  explicit Gateway(std::unique_ptr<transport::Transport> t) : transport_(std::move(t)) {}

  void on_frame(const PeerKey& from, transport::Frame frame) override;
  void on_peer_down(const PeerKey& peer, const Error& why) override;
  void on_tick(transport::Clock::time_point now) override;
  std::optional<transport::Clock::time_point> next_wakeup() override;
  Buffer landing_for(const PeerKey& from, const pb::Envelope& envelope, std::size_t body) override;
  void execute(core::rpc::Effects fx);
  /// Hands the queued deliveries to their targets, unless a caller up the stack does.
  void drain();
  /// Drops the caller-side sink of `call` once the engine no longer has it.
  void forget_if_over(CallId call);
  /// The authorizer of the identity with PeerID bytes `peer_id`, or null.
  core::rpc::Authorizer* authorizer_of(const std::string& peer_id) const;
  /// Caller: the signed authorization of a call `caller` (PeerID bytes, "" for the
  /// gateway's own) opens, or "" when that identity has no authorizer.
  Result<std::string> sign_open(CallId id, const std::string& handle, const std::string& caller,
                                const std::string& callee);
  /// Callee: OK when the OPEN delivered as `d` may reach its service.
  Status check_open(const Delivery& d);
  /// The answer's authorization carried by the first frame in `fx` of served call `id`.
  void sign_answer(CallId id, core::rpc::Effects& fx);
  /// Caller: an error when `d`, the first answer of an authorized call, is not a member's.
  std::optional<Error> check_answer(const Delivery& d);
  /// Unix seconds now: the time authorization works in.
  static double wall_seconds();
  static core::TimePoint now_of(transport::Clock::time_point t) { return t.time_since_epoch(); }
  static core::TimePoint now() { return now_of(transport::Clock::now()); }

  std::unique_ptr<transport::Transport> transport_;
  bool insecure_ = false;
  /// Every connection is encrypted and proves its PeerIDs (UCX, not --insecure): a
  /// request's signature need not be verified (core::rpc::CallParties::channel_proves_caller).
  bool channel_proves_ = false;
  std::string address_;
  std::mutex stop_mu_;
  std::atomic<bool> stopped_{false};
  std::atomic<CallId> next_call_{1};
  std::atomic<core::rpc::Sink> next_service_sink_{core::rpc::Sink{1} << 62};  ///< below served call ids, above caller ids

  /// The peer key under which calls from this gateway to itself are served.
  static constexpr const char* k_loop_key = "loop:self";

  // Transport thread only.
  std::string self_key_;      ///< own "host:port": calls to it stay in the process
  std::string self_peer_id_;  ///< the transport's PeerID, for calls to self that name no caller
  core::rpc::Engine engine_;
  std::atomic<std::thread::id> thread_{};  ///< the transport thread, once it ran
  std::unordered_map<core::rpc::Sink, DeliveryTarget> sinks_;
  std::deque<std::pair<std::shared_ptr<DirectSink>, Delivery>> direct_queue_;
  bool draining_ = false;
  int held_ = 0;  ///< on-thread API calls in progress: their deliveries wait (run_on_thread)
  std::vector<std::shared_ptr<DirectSink>> attached_;
  std::unordered_map<std::string, core::rpc::Sink> service_sinks_;
  /// Memory posted for the callee's next messages on a call (open's `landings`).
  struct Posted {
    PeerKey peer;
    std::deque<Landing> next;
  };
  std::unordered_map<CallId, Posted> landings_;
  /// Authorization (authorize()): the authorizer of each identity, by PeerID bytes, and
  /// the calls whose answer is still to be signed (served) or checked (opened).
  struct CallAuth {
    std::shared_ptr<core::rpc::Authorizer> by;
    pb::RequestAuthInfo request;
    std::string handle;
    std::string caller;
  };
  std::unordered_map<std::string, std::shared_ptr<core::rpc::Authorizer>> authorizers_;
  std::unordered_map<CallId, CallAuth> answers_to_sign_;
  std::unordered_map<CallId, CallAuth> answers_to_check_;
};

}  // namespace apiary::actors
