#include "actors/effects_executor.hpp"

#include "actors/type_ids.hpp"

namespace apiary::actors {

EffectExecutor::EffectExecutor(caf::event_based_actor* self, std::shared_ptr<Gateway> gw)
    : CallTable(std::move(gw), caf::actor_cast<caf::actor>(self), *this), self_(self) {}

void EffectExecutor::set(core::TimerId id, core::TimePoint at) {
  auto armed = timers_.find(id);
  if (armed != timers_.end() && armed->second.wake <= at) {
    // A wake-up is already due no later: it re-sends itself for the rest of the time.
    armed->second.at = at;
    return;
  }
  const auto gen = next_generation_++;
  timers_[id] = Armed{gen, at, at};
  const auto delay = at - now();
  if (delay <= core::Duration::zero()) {
    // Due now: straight into the mailbox, behind the messages already there (the clock
    // thread's hop would add its latency for nothing).
    self_->send(self_, timer_atom::value, id, gen);
    return;
  }
  self_->delayed_send(self_, delay, timer_atom::value, id, gen);
}

core::TimePoint EffectExecutor::now() const {
  return std::chrono::duration_cast<core::Duration>(self_->clock().now().time_since_epoch());
}

bool EffectExecutor::timer_is_current(core::TimerId id, std::uint64_t generation) {
  auto it = timers_.find(id);
  if (it == timers_.end() || it->second.generation != generation) return false;  // cancelled or re-armed
  const core::TimePoint t = now();
  if (t < it->second.at) {
    // Pushed later since this wake-up was sent: wake again at the new time.
    it->second.wake = it->second.at;
    self_->delayed_send(self_, it->second.at - t, timer_atom::value, id, generation);
    return false;
  }
  timers_.erase(it);
  return true;
}

}  // namespace apiary::actors
