#pragma once
/// The fault timers of one actor behind a single pending wake-up (internal to the
/// all-reduce benchmark's apiary rank, `--one-timer`).
///
/// actors::EffectExecutor hands every SetTimer to CAF as its own delayed message, and
/// CAF 0.17's clock thread is woken for each: the runner re-arms a timer per part and
/// per answer, so a 4 KiB all-reduce pays about two clock-thread hand-offs per op and
/// rank. Here deadlines are kept in the actor, and CAF holds one delayed message: the
/// earliest deadline. A deadline that moves later (the runner's re-arms always do)
/// needs no new message; the wake-up finds it not yet due and sleeps again.
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/effects.hpp"

namespace apiary::bench {

class DeadlineSet {
 public:
  /// Arms (or re-arms) timer `id` for `at`. Returns the time of a new wake-up the actor
  /// must schedule (tagged with generation()), or nothing when the pending one comes first.
  std::optional<core::TimePoint> arm(core::TimerId id, core::TimePoint at) {
    deadlines_[id] = at;
    return schedule_if_earlier(at);
  }
  /// Disarms timer `id` (nothing if it is not armed).
  void disarm(core::TimerId id) { deadlines_.erase(id); }

  /// The wake-up tagged `generation` fired at `now`. Returns the timers due (disarmed
  /// now), in no particular order; empty for a superseded wake-up. Call next_wake()
  /// afterwards.
  std::vector<core::TimerId> fired(std::uint64_t generation, core::TimePoint now) {
    std::vector<core::TimerId> due;
    if (!pending_ || generation != generation_) return due;
    pending_.reset();
    for (auto it = deadlines_.begin(); it != deadlines_.end();) {
      if (it->second <= now) {
        due.push_back(it->first);
        it = deadlines_.erase(it);
      } else {
        ++it;
      }
    }
    return due;
  }

  /// After fired(): the next wake-up to schedule (the earliest deadline left), if any.
  std::optional<core::TimePoint> next_wake() {
    std::optional<core::TimePoint> earliest;
    for (const auto& [id, at] : deadlines_)
      if (!earliest || at < *earliest) earliest = at;
    return earliest ? schedule_if_earlier(*earliest) : std::nullopt;
  }

  /// Tag of the latest wake-up handed out.
  [[nodiscard]] std::uint64_t generation() const { return generation_; }

 private:
  std::optional<core::TimePoint> schedule_if_earlier(core::TimePoint at) {
    if (pending_ && *pending_ <= at) return std::nullopt;
    pending_ = at;
    ++generation_;
    return at;
  }

  std::unordered_map<core::TimerId, core::TimePoint> deadlines_;
  std::optional<core::TimePoint> pending_;  ///< time of the wake-up CAF holds
  std::uint64_t generation_ = 0;
};

}  // namespace apiary::bench
