#pragma once
/// The RPC engine: the pure state machine behind every call between peers. It turns
/// local commands (open a call, send a message, end, fail, cancel) and inbound frames
/// into outbound frames and local deliveries, enforces deadlines, and fails every
/// call of a peer that goes down. It never touches a network or a clock: the gateway
/// (or a test, or the simulator) feeds it `now` and executes what it returns.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/time.hpp"
#include "envelope.pb.h"
#include "messages/buffer.hpp"
#include "messages/identity/multiaddr.hpp"
#include "messages/result.hpp"

namespace apiary::core::rpc {

/// The remote side of a call: the transport's key for the peer ("host:port").
using apiary::PeerKey;
/// A call, as the local side names it. Caller-side ids are chosen by the shell (and
/// travel on the wire); callee-side ids are chosen by the engine (top bit set).
using CallId = std::uint64_t;
/// A local receiver of deliveries (an actor, a test inbox); chosen by the shell.
using Sink = std::uint64_t;

/// First id the engine gives to served (callee-side) calls; caller ids stay below it.
inline constexpr CallId k_first_served_call = CallId{1} << 63;


/// What happened to a call, as told to its local side.
enum class DeliveryKind {
  open,     ///< callee: a new call to one of our handles (may carry the first message)
  message,  ///< a message from the other side (may carry end_of_stream)
  end,      ///< the other side finished sending (no message)
  error,    ///< the call ended with an error (remote failure, cancel, deadline, peer down)
};

/// One delivery to a local sink.
struct Delivery {
  Sink sink = 0;
  CallId call = 0;
  DeliveryKind kind = DeliveryKind::message;
  Buffer data;                 ///< the message (open/message)
  bool has_message = false;    ///< open: whether `data` is the first message
  bool end_of_stream = false;  ///< the other side will send nothing more
  bool final = false;          ///< the call is over; the sink hears no more of it
  Error error;                 ///< kind == error
  std::string handle;          ///< open: the handle called
  PeerKey peer;                ///< the other side
  std::string peer_listen_addr;  ///< open: the caller's listen "host:port" ("" for a client)
  std::string peer_id;           ///< open: the caller's PeerID bytes, from its HELLO ("" if unknown)
  pb::RpcKind rpc_kind = pb::UNARY;
  /// open, message: the frame's authorization (Envelope::auth; checked by the gateway).
  std::string auth;
  /// message: its body was written into a Landing the caller posted with the call, and
  /// `data` holds the message's head + tail only (set by the gateway).
  bool landed = false;
};

/// A frame to send.
struct Outgoing {
  PeerKey peer;
  pb::Envelope envelope;
  Buffer payload;
  /// OPEN: the callee's PeerID bytes the caller dialled (its multiaddr's /p2p/), for the
  /// transport to check against the PeerIDs the connection proved; "" when none was named.
  /// Never on the wire.
  std::string callee = {};
};

/// What one input produced, to execute in order: frames first, then deliveries.
struct Effects {
  std::vector<Outgoing> frames;
  std::vector<Delivery> deliveries;
};

/// Counters for diagnostics and tests.
struct EngineStats {
  std::uint64_t calls_opened = 0;
  std::uint64_t calls_served = 0;
  std::uint64_t late_frames = 0;     ///< frames for calls already over (benign races)
  std::uint64_t protocol_errors = 0;
  std::uint64_t deadlines = 0;
};

class Engine {
 public:
  // ---- local commands ----
  /// Opens call `id` (unique among this engine's open calls) to `handle` at `peer`.
  /// `first` is sent with the open (unary and server-stream calls always pass it);
  /// `end` says the caller sends nothing after it. Deliveries go to `sink`. `caller`: the
  /// calling node's PeerID bytes when several share a gateway; `callee`: the PeerID the
  /// caller dialled, if its address named one (Outgoing::callee).
  [[nodiscard]] Effects open(TimePoint now, CallId id, Sink sink, const PeerKey& peer,
                             const std::string& handle, pb::RpcKind kind, Duration timeout,
                             std::optional<Payload> first, bool end, const std::string& caller = {},
                             const std::string& callee = {});
  /// Sends a message on call `id` (either role); `end` closes our direction. A spliced
  /// message's head and tail go in the frame's envelope, its body as the payload.
  [[nodiscard]] Effects send(TimePoint now, CallId id, Payload message, bool end);
  /// Closes our direction of call `id` without a message.
  [[nodiscard]] Effects end(TimePoint now, CallId id);
  /// Callee: fails call `id` with `error`, which reaches the caller as an error frame.
  [[nodiscard]] Effects fail(TimePoint now, CallId id, const Error& error);
  /// Either role: abandons call `id`; the other side is told (CANCEL).
  [[nodiscard]] Effects cancel(TimePoint now, CallId id, const std::string& reason);
  /// Routes calls to `handle` to `sink` (replacing any earlier registration).
  void serve(const std::string& handle, Sink sink);
  /// Stops routing `handle`; later calls to it get "unknown handle".
  void unserve(const std::string& handle);

  // ---- inputs from the transport ----
  /// A frame arrived from `peer`. `payload_error` is set when the transport refused
  /// the payload (e.g. too large).
  [[nodiscard]] Effects on_frame(TimePoint now, const PeerKey& peer, const pb::Envelope& envelope,
                                 Buffer payload, const std::optional<Error>& payload_error);
  /// `peer` is gone: every call with it ends with `why`, as errc::peer_down, unless the
  /// connection was refused (errc::protocol, crypto or malformed: a mode mismatch, a
  /// failed handshake, a forged frame), which keeps its code: calling again will not help.
  [[nodiscard]] Effects on_peer_down(TimePoint now, const PeerKey& peer, const Error& why);
  /// Expires calls whose deadline is at or before `now`.
  [[nodiscard]] Effects on_tick(TimePoint now);
  /// The earliest deadline of an open call, if any.
  [[nodiscard]] std::optional<TimePoint> next_deadline() const;

  /// Number of calls in flight (both roles).
  std::size_t open_calls() const { return calls_.size(); }
  /// Whether call `id` is still open.
  [[nodiscard]] bool has_call(CallId id) const { return calls_.count(id) != 0; }
  const EngineStats& stats() const { return stats_; }

 private:
  struct Call {
    bool caller = false;
    PeerKey peer;
    std::uint64_t wire_id = 0;
    Sink sink = 0;
    pb::RpcKind kind = pb::UNARY;
    std::string handle;
    bool local_end = false;
    bool remote_end = false;
    std::optional<TimePoint> deadline;
  };

  Call* find(CallId id);
  CallId find_inbound(const PeerKey& peer, std::uint64_t wire_id) const;
  void finish(CallId id);
  void set_deadline(CallId id, Call& c, std::optional<TimePoint> at);
  pb::Envelope envelope_for(const Call& c, pb::FrameKind kind) const;
  Delivery delivery_for(CallId id, const Call& c, DeliveryKind kind) const;
  void fail_locally(Effects& fx, CallId id, Call& c, Error error);

  void on_open(TimePoint now, Effects& fx, const PeerKey& peer, const pb::Envelope& env, Buffer payload,
               const std::optional<Error>& payload_error);
  void on_message(Effects& fx, CallId id, Call& c, const pb::Envelope& env, Buffer payload,
                  const std::optional<Error>& payload_error);

  std::unordered_map<CallId, Call> calls_;
  std::map<std::pair<PeerKey, std::uint64_t>, CallId> inbound_;  ///< (peer, wire id) → id
  std::set<std::pair<TimePoint, CallId>> deadlines_;
  std::unordered_map<std::string, Sink> services_;
  CallId next_inbound_ = k_first_served_call;
  EngineStats stats_;
};

/// Largest error message put on the wire, in bytes (keeps envelopes small).
inline constexpr std::size_t k_max_error_message = 1024;
/// Longest handle name accepted, in bytes (keeps envelopes small).
inline constexpr std::size_t k_max_handle_bytes = 512;

}  // namespace apiary::core::rpc
