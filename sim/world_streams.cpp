// How the World runs streaming calls: the caller's later messages (Send), the callee's
// messages (Reply{last = false}) and both ends travel as messages over the links, in
// order per call and direction; cancels, errors and deadlines end the call on both sides.
#include <algorithm>
#include <utility>

#include "sim/world.hpp"

namespace apiary::sim {

void World::send_stream(EventKind kind, std::size_t from, std::size_t to, core::CallId call,
                        std::uint64_t serial, Result<std::string> payload, bool last,
                        TimePoint& fifo) {
  // A message after the open rides the call's connection: it is delayed like any other
  // but never lost, and never overtakes the previous one (equal times keep push order).
  const LinkModel link = network_.link(nodes_[from].addr, nodes_[to].addr);
  Duration delay = link.latency;
  if (link.jitter > Duration::zero()) {
    delay += Duration(static_cast<Duration::rep>(
        rng_.uniform(static_cast<std::uint64_t>(link.jitter.count()) + 1)));
  }
  const std::size_t bytes = payload.ok() ? payload->size() : 0;
  stats_.bytes += bytes;
  const TimePoint sent = link.bandwidth > 0.0 ? network_.occupy(nodes_[from].addr, nodes_[to].addr, bytes, now_) : now_;
  Event event;
  event.at = std::max({sent + delay, fifo, network_.clog_end(nodes_[from].addr, nodes_[to].addr, now_)});
  fifo = event.at;
  event.kind = kind;
  event.node = to;
  event.peer = from;
  event.call = call;
  event.serial = serial;
  event.payload = std::move(payload);
  event.stream = true;
  event.last = last;
  push(std::move(event));
}

void World::open_stream_request(Event& event, core::RequestId id) {
  Node& callee = nodes_[event.node];
  callee.inbound.at(id).stream = true;
  callee.streams.emplace(event.serial, id);
  // The callee gives up on its side at the call's timeout, counted from the open's arrival
  // (the caller's cancel on its own deadline usually comes first).
  Event expiry;
  expiry.at = now_ + std::max(event.timeout, Duration::zero());
  expiry.kind = EventKind::request_deadline;
  expiry.node = event.node;
  expiry.peer = event.peer;
  expiry.call = event.call;
  expiry.serial = event.serial;
  expiry.stream = true;
  push(std::move(expiry));
  execute(event.node, in_host([&] {
            return callee.host->on_request_from(now_, id, event.handle, nodes_[event.peer].addr,
                                                event.payload.value());
          }));
  // A first message that was also the caller's last: say so, unless the host already ended
  // the request.
  if (event.last && callee.state == NodeState::running && callee.inbound.count(id) != 0) {
    stats_.stream_messages += 1;
    execute(event.node, in_host([&] { return callee.host->on_request_message(now_, id, std::string{}, true); }));
  }
}

void World::execute_send(std::size_t node, core::Send send) {
  Node& caller = nodes_[node];
  auto it = caller.calls.find(send.call);
  const char* wrong = it == caller.calls.end() ? "a call not in flight"
                      : !it->second.stream     ? "a unary call"
                      : it->second.local_end   ? "a call whose caller side already ended (last)"
                                               : nullptr;
  if (wrong != nullptr) {
    anomaly(make_error(errc::invalid_argument,
                       "expected Send on an open streaming call of '{}', got call {} which is {}; "
                       "the message was dropped, send only between Call{{stream, last = false}} "
                       "and the first Send with last", caller.addr, send.call, wrong));
    return;
  }
  PendingCall& call = it->second;
  call.local_end = send.last;
  if (call.callee == k_no_node) return;  // refused at once: its error is on the way
  send_stream(EventKind::call_message, node, call.callee, send.call, call.serial,
              std::move(send.message), send.last, call.fifo);
}

void World::execute_cancel(std::size_t node, core::Cancel cancel) {
  Node& caller = nodes_[node];
  auto it = caller.calls.find(cancel.call);
  if (it == caller.calls.end()) return;  // already over: nothing to abandon
  PendingCall call = it->second;
  caller.calls.erase(it);
  stats_.cancels += 1;
  // A unary callee is not told (its reply will come late); a streaming callee is.
  if (!call.stream || call.callee == k_no_node) return;
  send_stream(EventKind::call_message, node, call.callee, cancel.call, call.serial,
              make_error(errc::cancelled, "the caller '{}' cancelled call {}: {}", caller.addr,
                         cancel.call, cancel.reason),
              true, call.fifo);
}

void World::cancel_stream_on_deadline(std::size_t node, const Event& deadline, const PendingCall& call) {
  TimePoint fifo = call.fifo;
  send_stream(EventKind::call_message, node, call.callee, deadline.call, call.serial,
              make_error(errc::deadline_exceeded,
                         "the caller '{}' gave up on call {} at its deadline ({} ns); answer "
                         "faster or ask for a longer timeout", nodes_[node].addr, deadline.call,
                         now_.count()),
              true, fifo);
}

void World::execute_stream_reply(std::size_t node, core::RequestId id, InboundRequest& inbound,
                                 core::Reply reply) {
  Node& callee = nodes_[node];
  const bool ends = reply.last || !reply.response.ok();
  if (!ends) {
    send_stream(EventKind::reply_message, node, inbound.caller, inbound.call, inbound.serial,
                std::move(reply.response), false, inbound.fifo);
    return;
  }
  InboundRequest done = inbound;
  callee.streams.erase(done.serial);
  callee.inbound.erase(id);
  send_stream(EventKind::reply_message, node, done.caller, done.call, done.serial,
              std::move(reply.response), true, done.fifo);
}

void World::end_stream_request(Node& callee, core::RequestId id) {
  auto it = callee.inbound.find(id);
  if (it == callee.inbound.end()) return;
  callee.streams.erase(it->second.serial);
  callee.inbound.erase(it);
  callee.ended.insert(id);
}

void World::deliver_call_message(Event& event) {
  if (lost_to_dead(event)) return;
  Node& callee = nodes_[event.node];
  auto it = callee.streams.find(event.serial);
  if (callee.state != NodeState::running || it == callee.streams.end()) {
    stats_.late += 1;  // the request is over (answered, expired) or its open was lost
    return;
  }
  const core::RequestId id = it->second;
  if (!event.payload.ok()) end_stream_request(callee, id);  // cancelled or the caller gave up
  stats_.stream_messages += 1;
  execute(event.node, in_host([&] {
            return callee.host->on_request_message(now_, id, event.payload, event.last || !event.payload.ok());
          }));
}

void World::deliver_reply_message(Event& event) {
  if (lost_to_dead(event)) return;
  Node& caller = nodes_[event.node];
  auto it = caller.calls.find(event.call);
  if (caller.state != NodeState::running || it == caller.calls.end() ||
      it->second.serial != event.serial) {
    stats_.late += 1;  // the call already ended (deadline, cancel)
    return;
  }
  stats_.stream_messages += 1;
  if (!event.payload.ok()) {  // the callee's error ends the call
    caller.calls.erase(it);
    stats_.responses += 1;
    execute(event.node, in_host([&] { return caller.host->on_response(now_, event.call, std::move(event.payload)); }));
    return;
  }
  // An empty last reply ends the call without a message.
  if (!event.last || !event.payload.value().empty()) {
    execute(event.node, in_host([&] { return caller.host->on_message(now_, event.call, event.payload.value()); }));
  }
  if (!event.last) return;
  // The callee ended: the call is over, unless the host abandoned it meanwhile.
  auto again = caller.calls.find(event.call);
  if (caller.state != NodeState::running || again == caller.calls.end() ||
      again->second.serial != event.serial) {
    return;
  }
  caller.calls.erase(again);
  stats_.responses += 1;
  execute(event.node, in_host([&] { return caller.host->on_response(now_, event.call, std::string{}); }));
}

void World::expire_request(Event& event) {
  Node& callee = nodes_[event.node];
  if (callee.state != NodeState::running) return;
  auto it = callee.streams.find(event.serial);
  if (it == callee.streams.end()) return;  // over already
  const core::RequestId id = it->second;
  end_stream_request(callee, id);
  stats_.stream_messages += 1;
  Result<std::string> late = make_error(errc::deadline_exceeded,
                                        "expected the caller '{}' to finish call {} within its timeout, got no end by "
                                        "{} ns; the caller may be down",
                                        nodes_[event.peer].addr, event.call, now_.count());
  execute(event.node, in_host([&] { return callee.host->on_request_message(now_, id, late, true); }));
}

}  // namespace apiary::sim
