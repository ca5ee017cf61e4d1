// How the World executes a node's effects and moves calls and replies over the network.
#include <algorithm>
#include <utility>
#include <variant>

#include "sim/world.hpp"

namespace apiary::sim {

void World::execute(std::size_t node, core::Effects effects) {
  Node& n = nodes_[node];
  if (n.machine && handling_ != nullptr && handling_->kind != EventKind::action && handling_->node == node) {
    // The node spends the event's cost on one core; what it did leaves after the part
    // before it (what it does later in the same event joins it, in order), and the node
    // stays busy for the rest.
    const CpuCharge charge = n.cost(*handling_, effects);
    const Duration before = std::max(Duration::zero(), charge.before);
    const Duration cost = before + std::max(Duration::zero(), charge.after);
    if (machines_[*n.machine].sharing == CoreSharing::time_slices) {
      // The event's work is an item on the time-sliced cores: its effects leave when the
      // part before them is done, the node works on until the rest is (share_*()).
      n.busy += cost;
      machines_[*n.machine].busy += cost;
      charge_aside(n, charge.aside);
      if (handled_) {
        handled_->insert(handled_->end(), std::make_move_iterator(effects.begin()),
                         std::make_move_iterator(effects.end()));
        share_grow(*n.machine, n.job, before);
        n.after += std::max(Duration::zero(), charge.after);
        return;
      }
      if (cost > Duration::zero()) {
        const std::uint64_t incarnation = n.incarnation;
        handled_ = std::make_shared<core::Effects>(std::move(effects));
        n.working = true;
        n.after = std::max(Duration::zero(), charge.after);
        n.job = share_add(*n.machine, node, before, [node, incarnation, held = handled_](World& w) {
          w.share_effects_done(node, incarnation, held);
        });
        return;
      }
    } else {
      if (handled_) {
        handled_->insert(handled_->end(), std::make_move_iterator(effects.begin()),
                         std::make_move_iterator(effects.end()));
        n.busy_until += cost;
        n.busy += cost;
        machines_[*n.machine].busy += cost;
        charge_aside(n, charge.aside);
        return;
      }
      if (cost > Duration::zero()) {
        Machine& machine = machines_[*n.machine];
        auto core = std::min_element(machine.cores.begin(), machine.cores.end());
        *core = now_ + cost;
        n.busy_until = now_ + cost;
        n.busy += cost;
        machine.busy += cost;
        charge_aside(n, charge.aside);
        const std::uint64_t incarnation = n.incarnation;
        handled_ = std::make_shared<core::Effects>(std::move(effects));
        schedule(now_ + before, [node, incarnation, held = handled_](World& w) {
          const Node& later = w.nodes_[node];
          if (later.state == NodeState::running && later.incarnation == incarnation) w.execute(node, std::move(*held));
        });
        return;
      }
      charge_aside(n, charge.aside);
    }
  }
  for (auto& effect : effects) {
    if (auto* call = std::get_if<core::Call>(&effect)) {
      // A spliced message travels whole: the simulated network moves strings.
      if (!call->body.empty() || !call->tail.empty()) call->request = core::whole_message(*call);
      execute_call(node, std::move(*call));
    } else if (auto* send = std::get_if<core::Send>(&effect)) {
      if (!send->body.empty() || !send->tail.empty()) send->message = core::whole_message(*send);
      execute_send(node, std::move(*send));
    } else if (auto* reply = std::get_if<core::Reply>(&effect)) {
      if (reply->response && (!reply->body.empty() || !reply->tail.empty())) {
        reply->response = core::whole_message(*reply);
      }
      execute_reply(node, std::move(*reply));
    } else if (auto* cancel_call = std::get_if<core::Cancel>(&effect)) {
      execute_cancel(node, std::move(*cancel_call));
    } else if (auto* set = std::get_if<core::SetTimer>(&effect)) {
      // Re-arming replaces the earlier arming: the old event finds a newer generation.
      const std::uint64_t generation = ++next_serial_;
      nodes_[node].timers[set->id] = generation;
      Event event;
      event.at = set->at;
      event.kind = EventKind::timer;
      event.node = node;
      event.timer = set->id;
      event.generation = generation;
      push(std::move(event));
    } else if (auto* cancel = std::get_if<core::CancelTimer>(&effect)) {
      nodes_[node].timers.erase(cancel->id);
    }
  }
}

void World::execute_call(std::size_t node, core::Call call) {
  stats_.calls += 1;
  Node& caller = nodes_[node];
  if (caller.calls.count(call.id) != 0) {
    anomaly(make_error(errc::invalid_argument,
                       "expected a fresh call id from '{}', got {} which is still in flight; "
                       "the call was dropped, pick unique ids", caller.addr, call.id));
    return;
  }
  const std::uint64_t serial = ++next_serial_;
  auto callee = by_addr_.find(call.peer);
  if (callee == by_addr_.end()) {
    // Nobody listens there: the call is refused at once (and needs no deadline).
    PendingCall& refused = caller.calls[call.id];
    refused.serial = serial;
    refused.stream = call.stream;
    refused.local_end = !call.stream || call.last;  // Sends until the refusal go nowhere
    Event refusal;
    refusal.at = now_;
    refusal.kind = EventKind::response;
    refusal.node = node;
    refusal.peer = node;
    refusal.call = call.id;
    refusal.serial = serial;
    refusal.payload = make_error(errc::unavailable,
                                 "expected a node listening on '{}', got none; check the "
                                 "address", call.peer);
    push(std::move(refusal));
    return;
  }
  const std::size_t callee_idx = callee->second;
  PendingCall& pending = caller.calls[call.id];
  pending.serial = serial;
  pending.stream = call.stream;
  pending.local_end = !call.stream || call.last;
  pending.callee = callee_idx;
  pending.fifo = now_;

  // The deadline fires unless an outcome arrives first.
  push_deadline(std::max(call.timeout, Duration::zero()), node, callee_idx, call.id, serial);

  // The request crosses the link (or is lost and the deadline will fire).
  stats_.bytes += call.request.size();
  auto delay = network_.transit(caller.addr, call.peer, call.request.size(), now_, rng_);  // joined above
  if (!delay) {
    stats_.lost += 1;  // a lost open: a stream's later messages find no request either
    return;
  }
  Event request;
  request.at = now_ + *delay;
  pending.fifo = request.at;  // a stream's later messages arrive after its open
  request.stream = call.stream;
  request.last = call.stream && call.last;
  if (call.stream) request.timeout = call.timeout;
  request.kind = EventKind::request;
  request.node = callee_idx;
  request.peer = node;
  request.call = call.id;
  request.serial = serial;
  request.handle = std::move(call.handle);
  request.payload = std::move(call.request);
  push(std::move(request));
}

void World::execute_reply(std::size_t node, core::Reply reply) {
  Node& callee = nodes_[node];
  auto it = callee.inbound.find(reply.request);
  if (it == callee.inbound.end() && callee.ended.count(reply.request) != 0) return;  // caller ended it
  if (it == callee.inbound.end()) {
    anomaly(make_error(errc::not_found,
                       "expected a reply to an open request at '{}', got one to request {} "
                       "which is unknown or already answered; answer each request once",
                       callee.addr, reply.request));
    return;
  }
  if (it->second.stream) {
    execute_stream_reply(node, reply.request, it->second, std::move(reply));
    return;
  }
  const InboundRequest inbound = it->second;
  callee.inbound.erase(it);
  if (!reply.last && reply.response.ok()) {
    // A unary call has one answer: fail it rather than pass a part off as the whole.
    anomaly(make_error(errc::invalid_argument,
                       "expected Reply{{last = true}} to unary request {} at '{}', got last = false; "
                       "the call was failed, stream only on a Call with stream = true",
                       reply.request, callee.addr));
    reply.response = make_error(errc::internal,
                                "expected one answer from '{}' to a unary call, got a stream "
                                "message; the callee's role is faulty", callee.addr);
  }
  send_response(node, inbound.caller, inbound.call, inbound.serial, std::move(reply.response));
}

void World::send_response(std::size_t from, std::size_t to, core::CallId call,
                          std::uint64_t serial, Result<std::string> payload) {
  stats_.bytes += payload.ok() ? payload->size() : 0;
  auto delay = network_.transit(nodes_[from].addr, nodes_[to].addr, payload.ok() ? payload->size() : 0, now_, rng_);
  if (!delay) {
    stats_.lost += 1;
    return;
  }
  Event response;
  response.at = now_ + *delay;
  response.kind = EventKind::response;
  response.node = to;
  response.peer = from;
  response.call = call;
  response.serial = serial;
  response.payload = std::move(payload);
  push(std::move(response));
}

bool World::lost_to_dead(const Event& event) {
  if (nodes_[event.node].state != NodeState::dead) return false;
  stats_.to_dead += 1;
  return true;
}

void World::deliver_request(Event& event) {
  if (lost_to_dead(event)) return;  // a crashed node answers nothing: the caller times out
  Node& callee = nodes_[event.node];
  if (callee.state == NodeState::added) {
    send_response(event.node, event.peer, event.call, event.serial,
                  make_error(errc::unavailable,
                             "expected '{}' to be listening, got a node not started yet; "
                             "retry later", callee.addr));
    return;
  }
  stats_.requests += 1;
  const core::RequestId id = next_request_++;
  InboundRequest& inbound = callee.inbound[id];
  inbound.caller = event.peer;
  inbound.call = event.call;
  inbound.serial = event.serial;
  if (event.stream) {
    open_stream_request(event, id);
    return;
  }
  execute(event.node, in_host([&] {
            return callee.host->on_request_from(now_, id, event.handle, nodes_[event.peer].addr,
                                                event.payload.value());
          }));
}

void World::deliver_response(Event& event) {
  Node& caller = nodes_[event.node];
  if (caller.state != NodeState::running) return;
  auto it = caller.calls.find(event.call);
  if (it == caller.calls.end() || it->second.serial != event.serial) {
    stats_.late += 1;  // the call already timed out
    return;
  }
  caller.calls.erase(it);
  stats_.responses += 1;
  execute(event.node, in_host([&] { return caller.host->on_response(now_, event.call, std::move(event.payload)); }));
}

}  // namespace apiary::sim
