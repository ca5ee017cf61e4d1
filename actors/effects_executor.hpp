#pragma once
/// The call table of an event-based actor: its timers are CAF delayed messages
/// (timer_atom, id, generation) to the actor itself (one due already: a plain message,
/// behind those in its mailbox), and its time is the actor's clock.
#include <memory>
#include <unordered_map>

#include <caf/event_based_actor.hpp>

#include "actors/call_table.hpp"

namespace apiary::actors {

/// A CallTable for `self` (see call_table.hpp for the order deliveries are translated in).
class EffectExecutor final : private HostTimers, public CallTable {
 public:
  EffectExecutor(caf::event_based_actor* self, std::shared_ptr<Gateway> gw);

  /// The actor's time: its actor clock (the steady clock in production, the test
  /// coordinator's virtual clock under CAF's deterministic tests), as core/ sees time.
  [[nodiscard]] core::TimePoint now() const;
  /// Whether a timer message (id, generation) is the timer's current arming.
  /// A timer that fires is forgotten; one pushed later since is re-sent for the rest.
  bool timer_is_current(core::TimerId id, std::uint64_t generation);

 private:
  void set(core::TimerId id, core::TimePoint at) override;
  void cancel(core::TimerId id) override { timers_.erase(id); }

  caf::event_based_actor* self_;
  /// An armed timer: the generation of its pending wake-up message, when it is due, and
  /// when that message arrives. Re-arming it later sends nothing: the wake-up, when it
  /// comes early, sends itself again for the rest (one CAF message per timer at a time,
  /// not one per re-arm: a stream re-arms its timer at every message).
  struct Armed {
    std::uint64_t generation = 0;
    core::TimePoint at{};
    core::TimePoint wake{};
  };
  std::unordered_map<core::TimerId, Armed> timers_;
  std::uint64_t next_generation_ = 1;
};

}  // namespace apiary::actors
