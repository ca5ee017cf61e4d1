#pragma once
/// Deliveries in a core's terms, as the call table (actors/call_table.hpp) hands them to a
/// role host: requests, messages either way, and the ends of calls.
#include <string>

#include "actors/gateway.hpp"
#include "core/effects.hpp"

namespace apiary::actors {

/// An inbound request in the core's terms.
struct CoreRequest {
  core::RequestId id = 0;
  std::string handle;
  PeerKey from;
  std::string body;
};

/// An inbound request whose body stays in the received buffer (no copy), for a core
/// that reads large bodies in place.
struct CoreRequestView {
  core::RequestId id = 0;
  std::string handle;
  PeerKey from;
  Buffer body;
};

/// The outcome of a core's call in the core's terms: a unary call's response, or a
/// streaming call's end ("" when the callee ended normally) or error.
struct CoreResponse {
  core::CallId call = 0;
  Result<std::string> result{std::string{}};
  Buffer body{};        ///< a view_response call's answer (core::Response::body)
  bool landed = false;  ///< it went into the call's landing
};

/// Caller side of a streaming call: one message from the callee, for the core's
/// on_message(now, call, message).
struct CoreMessage {
  core::CallId call = 0;
  std::string message;
};

/// Callee side of a streaming request: the caller's next message, the end of its
/// direction (`last`; the message may then be ""), or an error that ends the request
/// (cancelled, deadline, peer down; `last` is then true), for the core's
/// on_request_message(now, request, message, last).
struct CoreRequestMessage {
  core::RequestId request = 0;
  Result<std::string> message{std::string{}};
  bool last = false;
};

/// CoreMessage with the message left in the received buffer.
struct CoreMessageView {
  core::CallId call = 0;
  Buffer message;
  /// The message's body went into a Landing posted with the call (core::Call::landings):
  /// `message` holds its head + tail only.
  bool landed = false;
};

/// CoreRequestMessage with the message left in the received buffer.
struct CoreRequestMessageView {
  core::RequestId request = 0;
  Result<Buffer> message{Buffer{}};
  bool last = false;
};

}  // namespace apiary::actors
