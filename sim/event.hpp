#pragma once
/// One entry of the World's event queue. Events are ordered by (at, arrived, seq); seq
/// grows by one per scheduled event, so equal times keep their scheduling order, and an
/// event that waited for its busy node keeps the time it came (`arrived`), so events
/// that wait for the same node are handled in the order they came.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::sim {

class World;

/// What an event does when it is processed.
enum class EventKind : std::uint8_t {
  start = 1,     ///< Host::on_start of `node`
  request = 2,   ///< a call from `peer` arrives at `node`
  response = 3,  ///< the outcome of `node`'s call `call` arrives
  deadline = 4,  ///< `node`'s call `call` reaches its timeout
  timer = 5,     ///< `node`'s timer `timer` fires (if still at `generation`)
  kill = 6,      ///< `node` crashes
  action = 7,    ///< a scenario's callback
  call_message = 8,      ///< streaming: a caller's later message, end or cancel reaches callee `node`
  reply_message = 9,     ///< streaming: a callee's message, end or error reaches caller `node`
  request_deadline = 10, ///< streaming: callee `node`'s request of call `serial` reaches its timeout
};

/// A scheduled event; fields a kind does not use stay at their defaults.
struct Event {
  core::TimePoint at{};    ///< virtual time it is due (ns)
  std::uint64_t seq = 0;   ///< tie-breaker: scheduling order
  /// When it first came due (== at unless it waited for its node or machine): orders
  /// events due at the same time before seq does.
  core::TimePoint arrived{};
  EventKind kind = EventKind::action;
  std::size_t node = 0;    ///< the node it happens at
  std::size_t peer = 0;    ///< request: the caller
  core::CallId call = 0;   ///< request/response/deadline: the caller's call id
  std::uint64_t serial = 0;      ///< request/response/deadline: world-unique call serial
  core::TimerId timer = 0;       ///< timer: the id
  std::uint64_t generation = 0;  ///< timer: which arming this firing belongs to
  std::string handle;            ///< request: the service handle
  Result<std::string> payload{std::string{}};  ///< request bytes, a stream message, or an outcome
  bool stream = false;           ///< the event belongs to a streaming call
  bool last = false;             ///< stream: the sender's direction ends with this message
  core::Duration timeout{};      ///< stream request: the call's timeout (the callee's side too)
  /// Set by the World as a placed node handles it: the node had nothing to do when it
  /// came (its threads asleep, to be woken), for the node's CpuCost.
  bool woke = false;
  /// Set by the World as a placed node handles a message: it came from a node of the same
  /// process (World::share_process), so it never crossed the transport.
  bool local = false;
  std::function<void(World&)> action;          ///< action: what to run
};

}  // namespace apiary::sim
