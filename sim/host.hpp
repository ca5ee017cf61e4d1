#pragma once
/// The adapter between the World and a core role: the World feeds a node's inputs to
/// its Host and executes the effects the Host returns. A Host usually owns one core
/// object and forwards to it.
#include <string>

#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::sim {

/// One simulated node's role, as the World sees it.
class Host {
 public:
  virtual ~Host() = default;

  /// The node starts at `now` (World::start_node); returns its first effects.
  [[nodiscard]] virtual core::Effects on_start(core::TimePoint now) = 0;

  /// A request for service `handle` arrived; answer with a Reply effect carrying `id`
  /// (now or from a later input).
  [[nodiscard]] virtual core::Effects on_request(core::TimePoint now, core::RequestId id,
                                                 const std::string& handle,
                                                 const std::string& request) = 0;

  /// As on_request, also naming the caller: `from` is the address of the node that made
  /// the call. The World calls this one; the default forgets `from` and forwards to
  /// on_request, so a role that does not care who called overrides on_request only.
  [[nodiscard]] virtual core::Effects on_request_from(core::TimePoint now, core::RequestId id,
                                                      const std::string& handle,
                                                      const core::PeerAddr& from,
                                                      const std::string& request) {
    (void)from;
    return on_request(now, id, handle, request);
  }

  /// The outcome of this node's call `call`: the reply, the callee's error, or
  /// errc::deadline_exceeded when nothing came back before the call's timeout. Handed
  /// over (answers of hundreds of kilobytes are common): keep it by moving it.
  [[nodiscard]] virtual core::Effects on_response(core::TimePoint now, core::CallId call,
                                                  Result<std::string> response) = 0;

  /// Timer `id` fired.
  [[nodiscard]] virtual core::Effects on_timer(core::TimePoint now, core::TimerId id) = 0;

  /// Caller of streaming call `call`: one message the callee sent (a Reply), in order
  /// (an empty Reply with last is no message). The call's end follows through
  /// on_response: "" when the callee ended normally, else the error. The default ignores
  /// it (roles that make no streaming calls).
  [[nodiscard]] virtual core::Effects on_message(core::TimePoint now, core::CallId call,
                                                 const std::string& message) {
    (void)now, (void)call, (void)message;
    return {};
  }

  /// The World's failure detector says `peer` went down (World::set_peer_down_detection).
  /// The default ignores it.
  [[nodiscard]] virtual core::Effects on_peer_down(core::TimePoint now, const core::PeerAddr& peer) {
    (void)now, (void)peer;
    return {};
  }

  /// Callee of streaming request `id`: the caller's next message (Send), in order;
  /// `last` when the caller's direction ended (the message is then "" if the caller's
  /// first message was already its last). An error (cancelled, deadline_exceeded) ends
  /// the request: later Replies to it are ignored. Never called for unary requests. The
  /// default ignores it (roles that serve no streaming calls).
  [[nodiscard]] virtual core::Effects on_request_message(core::TimePoint now, core::RequestId id,
                                                         const Result<std::string>& message,
                                                         bool last) {
    (void)now, (void)id, (void)message, (void)last;
    return {};
  }
};

}  // namespace apiary::sim
