#pragma once
/// The effects a core role returns instead of acting: the shell (an actor over the
/// real gateway, or the simulator) executes them. Payloads are serialized protobuf
/// messages, so a core never depends on how frames travel.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core {

/// Where a peer can be reached: its listen multiaddr, e.g. "/ip4/127.0.0.1/tcp/4100".
using PeerAddr = std::string;

/// Identifies an outbound unary call issued by a core; chosen by the core.
using CallId = std::uint64_t;

/// Identifies an inbound request the core must answer; chosen by the shell.
using RequestId = std::uint64_t;

/// Identifies a timer; chosen by the core.
using TimerId = std::uint64_t;

/// Issue a unary call to `peer`; the answer comes back through the core's on_response.
struct Call {
  CallId id = 0;
  PeerAddr peer;
  std::string handle;   ///< service name, e.g. "apiary.Ping.rpc_ping"
  std::string request;  ///< serialized request message
  Duration timeout{};   ///< deadline relative to now
  /// The calling node's PeerID bytes when several nodes share one gateway (the callee
  /// learns it as the caller's id); empty: the gateway's own.
  std::string caller;
};

/// Answer an inbound request (a serialized response, or an error sent back as an
/// error frame).
struct Reply {
  RequestId request = 0;
  Result<std::string> response{std::string{}};
};

/// Arm (or re-arm) timer `id` to fire at absolute time `at`.
struct SetTimer {
  TimerId id = 0;
  TimePoint at{};
};

/// Disarm timer `id` (no effect if it is not armed).
struct CancelTimer {
  TimerId id = 0;
};

/// One effect.
using Effect = std::variant<Call, Reply, SetTimer, CancelTimer>;

/// The effects of one input, in the order they must be executed.
using Effects = std::vector<Effect>;

}  // namespace apiary::core
