#pragma once
/// Where the gateway (actors/gateway.hpp) hands a call's deliveries: an actor, one
/// message each, or a DirectSink that lives on the transport thread (no hand-off).
#include <memory>
#include <optional>
#include <type_traits>

#include <caf/actor.hpp>
#include <caf/actor_cast.hpp>

#include "core/rpc/engine.hpp"

namespace apiary::actors {

using core::rpc::Delivery;

/// A receiver of deliveries that lives on the gateway's transport thread (the
/// transport-thread role host). The gateway calls it there, never while the engine is
/// in the middle of a step, so it may call the gateway back at once.
class DirectSink {
 public:
  virtual ~DirectSink() = default;
  /// One delivery for a call it opened or a handle it serves.
  virtual void deliver(Delivery d) = 0;
  /// Its earliest timer, if any (attached sinks only).
  virtual std::optional<core::TimePoint> next_wakeup() = 0;
  /// The transport thread's tick: fires its timers due by `now` (attached sinks only).
  virtual void on_tick(core::TimePoint now) = 0;
  /// The gateway stopped and its transport thread is gone (attached sinks only; called
  /// on the thread that stopped it): nothing will run on that thread any more, so work
  /// posted there (its own stop included) never will either. Drop what holds the gateway.
  virtual void on_gateway_stopped() {}
};

/// Where a call's deliveries go: an actor (one message each) or a DirectSink.
struct DeliveryTarget {
  /// An actor: anything caf::actor_cast makes a caf::actor of (an actor, a scoped actor).
  template <class A, class = std::enable_if_t<!std::is_convertible_v<A, std::shared_ptr<DirectSink>>>>
  DeliveryTarget(const A& a) : actor(caf::actor_cast<caf::actor>(a)) {}  // NOLINT: implicit by design
  DeliveryTarget(std::shared_ptr<DirectSink> s) : direct(std::move(s)) {}  // NOLINT
  caf::actor actor;
  std::shared_ptr<DirectSink> direct;
};

}  // namespace apiary::actors
