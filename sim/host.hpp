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

  /// The outcome of this node's call `call`: the reply, the callee's error, or
  /// errc::deadline_exceeded when nothing came back before the call's timeout.
  [[nodiscard]] virtual core::Effects on_response(core::TimePoint now, core::CallId call,
                                                  const Result<std::string>& response) = 0;

  /// Timer `id` fired.
  [[nodiscard]] virtual core::Effects on_timer(core::TimePoint now, core::TimerId id) = 0;
};

}  // namespace apiary::sim
