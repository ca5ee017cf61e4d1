#pragma once
/// The effects a core role returns instead of acting: the shell (an actor over the
/// real gateway, or the simulator) executes them. Payloads are serialized protobuf
/// messages, so a core never depends on how frames travel.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/time.hpp"
#include "core/value.hpp"
#include "messages/buffer.hpp"
#include "messages/identity/peer_address.hpp"
#include "messages/result.hpp"

namespace apiary::core {

/// Where a peer can be reached: its listen address (host, port, optional PeerID), parsed
/// once where it entered (messages/identity/peer_address.hpp).
using PeerAddr = messages::PeerAddress;

/// Identifies an outbound unary call issued by a core; chosen by the core.
using CallId = std::uint64_t;

/// Identifies an inbound request the core must answer; chosen by the shell.
using RequestId = std::uint64_t;

/// Identifies a timer; chosen by the core.
using TimerId = std::uint64_t;

/// Identifies a local operation: a call into a role from its host's API, or from one
/// role to another of the same process (Ask); chosen by whoever starts it.
using OpId = std::uint64_t;

/// Issue a call to `peer`.
///
/// Unary (`stream == false`): `request` is the one message; the answer (or an error)
/// comes back through the core's on_response(call, result).
///
/// Streaming (`stream == true`): `request` is the caller's first message; unless `last`,
/// the caller sends more with Send. Every message the callee sends comes back through
/// on_message(call, message), in order; the end comes through on_response(call, result):
/// an empty string when the callee ended normally, else the error (deadline, peer down,
/// the callee's error, cancel).
struct Call {
  CallId id = 0;
  PeerAddr peer;
  std::string handle;   ///< service name, e.g. "apiary.Ping.rpc_ping"
  std::string request;  ///< serialized request message (a stream's first message)
  Duration timeout{};   ///< deadline relative to now (of the whole call)
  /// The calling node's PeerID bytes when several nodes share one gateway (the callee
  /// learns it as the caller's id); empty: the gateway's own.
  std::string caller;
  bool stream = false;  ///< a streaming call (see above)
  bool last = true;     ///< streaming: `request` is the caller's only message
  /// A first message too large to copy: with a `body`, the message is request + body +
  /// tail, sent in those pieces (Payload); the body may be a view of a core's memory.
  Buffer body{};
  std::string tail{};
  /// Streaming: memory posted for the callee's messages, one per message in order
  /// (messages/buffer.hpp): a shell that can receives a matching message's body straight
  /// into the zone and hands the message over as head + tail, marked landed
  /// (on_message's `landed`); a shell that cannot (the simulator) ignores them and
  /// delivers whole messages. Unary, with view_response: memory for the answer.
  std::vector<Landing> landings{};
  /// Unary: the answer comes as Response::body, a view of the received bytes (no copy),
  /// into the first of `landings` when it matches (Response::landed).
  bool view_response = false;
};

/// A unary call (the other fields at their defaults).
inline Call unary_call(CallId id, PeerAddr peer, std::string handle, std::string request, Duration timeout) {
  Call c;
  c.id = id;
  c.peer = std::move(peer);
  c.handle = std::move(handle);
  c.request = std::move(request);
  c.timeout = timeout;
  return c;
}

/// Caller: one more message on open streaming call `call`; `last` ends the caller's
/// direction (the callee's on_request_message sees last = true). After `last`, or on a
/// unary call, it is an anomaly.
struct Send {
  CallId call = 0;
  std::string message;
  bool last = false;
  /// With a `body`, the message is message + body + tail, sent in those pieces (as Call's).
  Buffer body{};
  std::string tail{};
};

/// Callee: answer inbound request `request`. With `last` (always, for a unary call) the
/// call ends: the response is its final message (on a streaming call, an empty response
/// is no message: the caller only sees the end, on_response ""). Without `last` (only
/// for a request of a streaming call) one message goes to the caller and the call stays
/// open. An error always ends the call and reaches the caller's on_response.
struct Reply {
  RequestId request = 0;
  Result<std::string> response{std::string{}};
  bool last = true;
  /// With a `body` (and a response, not an error), the message is response + body +
  /// tail, sent in those pieces (as Call's).
  Buffer body{};
  std::string tail{};
};

/// The whole message of a Call (its request) or of a Send, pieces joined (a copy when spliced).
inline std::string whole_message(const Call& c) {
  return c.body.empty() && c.tail.empty() ? c.request : Payload{c.request, c.body, c.tail}.joined();
}
inline std::string whole_message(const Send& s) {
  return s.body.empty() && s.tail.empty() ? s.message : Payload{s.message, s.body, s.tail}.joined();
}
/// The whole response of a Reply that carries one (not an error).
inline std::string whole_message(const Reply& r) {
  return r.body.empty() && r.tail.empty() ? *r.response : Payload{*r.response, r.body, r.tail}.joined();
}

/// Caller: abandon call `call`; the callee's on_request_message sees errc::cancelled
/// with `reason`. The core hears nothing more of the call.
struct Cancel {
  CallId call = 0;
  std::string reason;
};

/// Arm (or re-arm) timer `id` to fire at absolute time `at`. One due already (at or
/// before now) fires after the inputs the host holds at that moment, not before them: a
/// role can gather what has arrived before acting on it.
struct SetTimer {
  TimerId id = 0;
  TimePoint at{};
};

/// Disarm timer `id` (no effect if it is not armed).
struct CancelTimer {
  TimerId id = 0;
};

/// A local operation this role was asked to run (core/role.hpp: LocalCall) is over:
/// `result` goes back to whoever started `op` (the host's API caller, or the role that
/// asked, as a LocalReply). Each op completes once.
struct Complete {
  OpId op = 0;
  Result<Value> result{Value{}};
};

/// Asks role `role` of the same process (by the name it has in its host's Mux) to run
/// `method` with `args`: it arrives there as a LocalCall and its Complete comes back to
/// this role as a LocalReply with the same `op`. An unknown role or method is answered
/// at once with an errc::not_found error.
struct Ask {
  OpId op = 0;
  std::string role;
  std::string method;
  Value args{};
};

/// One effect.
using Effect = std::variant<Call, Send, Reply, Cancel, SetTimer, CancelTimer, Complete, Ask>;

// Inputs of a core that takes streaming calls, besides on_request / on_response /
// on_timer (names by convention, not an interface):
//   on_message(now, CallId, std::string message)            caller: a callee's message
//   on_request_message(now, RequestId, Result<std::string> message, bool last)
//       callee: the caller's next message of a streaming call (`last`: the caller's
//       direction ended, the message may then be empty), or an error when the caller
//       cancelled or went away (the request is over: Reply to it is ignored).

/// The effects of one input, in the order they must be executed.
using Effects = std::vector<Effect>;

}  // namespace apiary::core
