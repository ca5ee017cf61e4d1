#pragma once
/// Helpers over the gateway for the common shapes: unary services as actors, and
/// blocking waits for calls from non-actor code (main, tests, the CLI).
#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/gateway.hpp"
#include "actors/type_ids.hpp"
#include "messages/identity/peer_address.hpp"

namespace apiary::actors {

/// Everything a call delivered, collected.
struct CallOutcome {
  std::vector<Buffer> messages;  ///< messages from the other side, in order
  std::optional<Error> error;    ///< set when the call ended with an error
  bool over = false;             ///< the call ended (final delivery seen)
};

/// Waits on the scoped actor until every call in `ids` is over or `patience` passes
/// (a call still open then gets a deadline_exceeded outcome and is cancelled).
/// Deliveries for other calls are collected too and returned.
std::map<CallId, CallOutcome> await_calls(caf::scoped_actor& self, Gateway& gw, std::set<CallId> ids,
                                          std::chrono::milliseconds patience);

/// A blocking unary call from a scoped actor.
Result<Buffer> call_unary(caf::scoped_actor& self, Gateway& gw, const PeerKey& peer, const std::string& handle,
                          Buffer request, std::chrono::milliseconds timeout);

/// Where a call from non-actor code goes: the peer's key ("host:port") and, when its
/// address named one (/p2p/...), the PeerID dialled, which an encrypted connection must
/// have proven for the call to leave (Gateway::open's `callee`).
struct CallTo {
  CallTo(PeerKey peer) : key(std::move(peer)) {}  // NOLINT(google-explicit-constructor): a bare key names no PeerID
  CallTo(const char* peer) : key(peer) {}         // NOLINT(google-explicit-constructor)
  CallTo(const messages::PeerAddress& addr)       // NOLINT(google-explicit-constructor)
      : key(addr.key()), callee(addr.peer() ? addr.peer()->bytes() : std::string{}) {}
  PeerKey key;
  std::string callee;  ///< PeerID bytes, or "" when none was named
};

/// A unary call in flight from non-actor code (unary_call): its id, to cancel it, and
/// the future of its answer.
struct PendingUnary {
  CallId id = 0;
  std::future<Result<Buffer>> answer;
};

/// Sends a unary call to `handle` at `peer` with no actor: the answer (the response, or
/// the call's error: the callee's, the deadline's, the peer's going down, or
/// errc::cancelled when the gateway stops first) comes as a future, set on the transport
/// thread. The engine enforces `timeout`; the future is always set. `caller` as
/// Gateway::unary's.
PendingUnary unary_call(Gateway& gw, const CallTo& peer, const std::string& handle, Payload request,
                        std::chrono::milliseconds timeout, std::string caller = {});

/// A streaming call in flight from non-actor code (stream_call): its id, to cancel it,
/// and the future of every message the callee sent, in order.
struct PendingStream {
  CallId id = 0;
  std::future<Result<std::vector<Buffer>>> answer;
};

/// Opens a streaming call (pb::BIDI_STREAM) to `handle` at `peer` with no actor, sends
/// `messages` in order (the last one ends the caller's direction; at least one), and
/// collects the callee's messages: the future is set with them once the callee ends its
/// stream, or with the call's error (the callee's, the deadline's, the peer's going down,
/// errc::cancelled when the gateway stops first). The engine enforces `timeout` on the
/// whole call. `caller` as Gateway::unary's.
PendingStream stream_call(Gateway& gw, const CallTo& peer, const std::string& handle, std::vector<Payload> messages,
                          std::chrono::milliseconds timeout, std::string caller = {});

/// What unary_call_then hands a call's answer to: called once, on the transport thread
/// (or on the thread that drops the call's sink when the gateway stops first); it may
/// call the gateway back at once. Keep it short: the transport waits meanwhile.
using UnaryDone = std::function<void(Result<Buffer>)>;

/// unary_call with a callback instead of a future: no thread waits on the answer, so
/// many calls can be in flight from one caller. The answer (or error) reaches `done`
/// exactly once. Returns the call's id (to cancel it).
CallId unary_call_then(Gateway& gw, const CallTo& peer, const std::string& handle, Payload request,
                       std::chrono::milliseconds timeout, std::string caller, UnaryDone done);

/// A unary handler: the request (its caller in `request.peer`) → a response or error.
using UnaryFn = std::function<Result<Buffer>(const Delivery& request)>;

/// Spawns an actor serving `handle` with `fn` and registers it with the gateway.
/// Errors returned and exceptions thrown become error frames for the caller.
caf::actor serve_unary(caf::actor_system& sys, std::shared_ptr<Gateway> gw, const std::string& handle, UnaryFn fn);

/// Serializes a protobuf message into a Buffer.
template <class Message>
Buffer to_buffer(const Message& m) {
  Buffer b = Buffer::allocate(m.ByteSizeLong());
  m.SerializeToArray(b.data(), static_cast<int>(b.size()));
  return b;
}

/// Parses a protobuf message from a Buffer, naming the handle in the error.
template <class Message>
Result<Message> from_buffer(const Buffer& b, const std::string& what) {
  Message m;
  if (!m.ParseFromArray(b.data(), static_cast<int>(b.size()))) {
    return make_error(errc::malformed, "{}: {} bytes are not a valid {}", what, b.size(),
                      Message::descriptor()->full_name());
  }
  return m;
}

/// serve_unary with protobuf types: a malformed request is answered with a clear error.
template <class Request, class Response>
caf::actor serve_proto(caf::actor_system& sys, std::shared_ptr<Gateway> gw, const std::string& handle,
                       std::function<Result<Response>(const PeerKey& from, const Request&)> fn) {
  return serve_unary(sys, std::move(gw), handle, [fn, handle](const Delivery& d) -> Result<Buffer> {
    auto req = from_buffer<Request>(d.data, "request for '" + handle + "'");
    if (!req) return req.error();
    auto resp = fn(d.peer, *req);
    if (!resp) return resp.error();
    return to_buffer(*resp);
  });
}

}  // namespace apiary::actors
