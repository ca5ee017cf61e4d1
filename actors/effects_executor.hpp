#pragma once
/// The one shared effect executor: runs what a core returns (calls, replies, timers)
/// on behalf of an event-based actor, over the gateway. It also translates the
/// gateway's deliveries back into the core's terms (requests and responses).
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <caf/event_based_actor.hpp>

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

/// The outcome of a core's call in the core's terms.
struct CoreResponse {
  core::CallId call = 0;
  Result<std::string> result{std::string{}};
};

/// The time core/ sees in this process: the steady clock since its epoch.
core::TimePoint core_now();

/// "host:port" for a core peer address (a multiaddr such as /ip4/127.0.0.1/tcp/4100).
Result<PeerKey> peer_key_of(const core::PeerAddr& addr);

class EffectExecutor {
 public:
  EffectExecutor(caf::event_based_actor* self, std::shared_ptr<Gateway> gw);

  /// Executes `fx`. Calls that cannot even be issued (bad address) come back at once as
  /// failed responses, for the actor to feed to its core.
  [[nodiscard]] std::vector<CoreResponse> execute(core::Effects fx);

  /// A delivery that opens a request to this actor's core, translated.
  std::optional<CoreRequest> request_of(Delivery& d);
  /// A delivery that ends one of the core's calls, translated.
  std::optional<CoreResponse> response_of(Delivery& d);
  /// Whether a timer message (id, generation) is the timer's current arming.
  bool timer_is_current(core::TimerId id, std::uint64_t generation) const;

 private:
  caf::event_based_actor* self_;
  std::shared_ptr<Gateway> gw_;
  std::unordered_map<CallId, core::CallId> calls_;      ///< gateway call → core call
  std::unordered_map<core::RequestId, CallId> requests_;  ///< core request → gateway call
  std::unordered_map<CallId, Buffer> partial_;          ///< responses awaiting their end
  std::unordered_map<core::TimerId, std::uint64_t> timers_;  ///< current generation per timer
  std::uint64_t next_generation_ = 1;
};

}  // namespace apiary::actors
