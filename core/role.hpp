#pragma once
/// The role contract: what every protocol role implements, so that any host (the CAF
/// actor of actors/role_actor.hpp, the simulator's RoleHost, a unit test) can run any role,
/// and a Mux (core/mux.hpp) can put several roles in one host. A role takes one Input
/// with `now` and returns Effects (core/effects.hpp), in order; nothing else reaches it
/// and nothing else leaves it.
#include <string>
#include <variant>
#include <vector>

#include "core/effects.hpp"
#include "core/time.hpp"
#include "core/value.hpp"
#include "messages/buffer.hpp"
#include "messages/result.hpp"

namespace apiary::core {

/// The host started the role (once, before any other input).
struct Start {};

/// An inbound request for `handle`, one the role serves: answer it with Reply{id}, now
/// or after later inputs. `from` is the caller's listen multiaddr ("" when the caller
/// cannot be reached back, e.g. a client). A streaming request's later messages come as
/// RequestMessage with the same id.
struct Request {
  RequestId id = 0;
  std::string handle;
  PeerAddr from;
  Buffer body;  ///< the (first) message; a view of the received bytes, no copy
};

/// The end of the role's call `call`: a unary call's answer, or a streaming call's end
/// ("" when the callee ended normally) or error (deadline, peer down, the callee's error).
struct Response {
  CallId call = 0;
  Result<std::string> result{std::string{}};
  /// A unary call made with Call::view_response, answered by a host that can: the
  /// answer's bytes, a view of the received message (`result` is then ""), received
  /// into the call's Landing when `landed` (`body` holds head + tail only). A host that
  /// cannot (the simulator) puts the answer in `result` as for any call.
  Buffer body{};
  bool landed = false;
};

/// Caller of streaming call `call`: one message the callee sent, in order.
struct StreamMessage {
  CallId call = 0;
  Buffer message;
  /// The message's body went into a Landing posted with the call (Call::landings), and
  /// `message` holds its head + tail only.
  bool landed = false;
};

/// Callee of streaming request `id`: the caller's next message, the end of its direction
/// (`last`; the message may then be empty), or an error that ends the request
/// (cancelled, deadline, peer down; Replies to it are then ignored).
struct RequestMessage {
  RequestId id = 0;
  Result<Buffer> message{Buffer{}};
  bool last = false;
};

/// Timer `id`, armed by a SetTimer of this role, fired.
struct TimerFired {
  TimerId id = 0;
};

/// The host learned that `peer` went away (its connection failed, or the simulator
/// killed it). Every role of a host hears it.
struct PeerDown {
  PeerAddr peer;
};

/// A local operation asked of the role: by its host's API (a facade's method) or by
/// another role of the same process (an Ask). `role` names the target in a Mux ("" for
/// a host of one role). The role answers with exactly one Complete{op}, now or later;
/// an unknown method is answered with an errc::not_found error.
struct LocalCall {
  OpId op = 0;
  std::string role;
  std::string method;
  Value args{};
};

/// The answer to this role's Ask{op}.
struct LocalReply {
  OpId op = 0;
  Result<Value> result{Value{}};
};

/// One input of a role.
using Input = std::variant<Start, Request, Response, StreamMessage, RequestMessage, TimerFired, PeerDown, LocalCall,
                           LocalReply>;

/// Which host runs a role in a process: a CAF actor of its own, or the transport's thread
/// itself (no hand-off per message; for roles whose work per message is short). A
/// process's configuration, not the role's: every role runs on either.
enum class HostKind { actor, transport_thread };

/// What every role implements.
class Role {
 public:
  virtual ~Role() = default;
  /// The service handles the role serves: a host routes requests for them to it and
  /// registers them with its transport. Fixed for the role's life.
  [[nodiscard]] virtual std::vector<std::string> handles() const = 0;
  /// Takes one input at `now`; returns its effects, in the order they must be executed.
  [[nodiscard]] virtual Effects on(TimePoint now, Input input) = 0;
};

/// The local effects of a role's output, for its host.
struct LocalEffects {
  std::vector<Complete> completed;  ///< finished local operations, in order
  std::vector<Ask> asks;            ///< calls to roles the host must find, in order
};

/// Moves the Completes and Asks out of `fx`, which keeps its other effects in order.
/// Allocates nothing when there are none (the common case on a hot path).
[[nodiscard]] LocalEffects take_local(Effects& fx);

/// Names `caller` (PeerID bytes) as the caller of every Call in `fx` (when several nodes
/// share one transport); "" leaves them as they are.
void name_caller(Effects& fx, const std::string& caller);

/// The answer to an Ask for a role its host does not have.
[[nodiscard]] LocalReply no_such_role(const Ask& ask);

/// A LocalCall's Complete with an error: `method` is not one the role knows.
[[nodiscard]] inline Complete unknown_method(const LocalCall& call, const char* role) {
  return Complete{call.op, make_error(errc::not_found, "{} has no local method '{}'", role, call.method)};
}

}  // namespace apiary::core
