#include "actors/effects_executor.hpp"

#include "actors/type_ids.hpp"
#include "messages/identity/multiaddr.hpp"

namespace apiary::actors {

core::TimePoint core_now() { return std::chrono::steady_clock::now().time_since_epoch(); }

Result<PeerKey> peer_key_of(const core::PeerAddr& addr) {
  auto m = messages::Multiaddr::parse(addr);
  if (!m) return m.error();
  return m->host_port();
}

EffectExecutor::EffectExecutor(caf::event_based_actor* self, std::shared_ptr<Gateway> gw)
    : self_(self), gw_(std::move(gw)) {}

namespace {

/// Marks every part of `d` as taken: no translator finds anything in it any more (no
/// call has id 0).
void take_all(Delivery& d) {
  d.call = 0;
  d.has_message = false;
  d.data = Buffer{};
}

/// Leaves only the end of stream in `d` once its message is taken.
void leave_end(Delivery& d) {
  d.kind = DeliveryKind::end;
  d.has_message = false;
  d.data = Buffer{};
}

/// An effect's message as the gateway sends it: spliced when it has a body.
Payload payload_of(std::string message, Buffer body, std::string tail) {
  if (body.empty() && tail.empty()) return Buffer::adopt(std::move(message));
  return Payload{std::move(message), std::move(body), std::move(tail)};
}

}  // namespace

void fold_stream_ends(core::Effects& fx) {
  // Compacts in place: fx[0, kept) are the effects kept so far.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < fx.size(); ++i) {
    auto* send = std::get_if<core::Send>(&fx[i]);
    auto* reply = std::get_if<core::Reply>(&fx[i]);
    const bool empty_end = (send && send->last && send->message.empty() && send->body.empty() && send->tail.empty()) ||
                           (reply && reply->last && reply->response && reply->response->empty() &&
                            reply->body.empty() && reply->tail.empty());
    bool folded = false;
    // The latest earlier effect on the same stream (effects on other streams and timers
    // may sit in between; moving an end before them changes nothing for them).
    for (std::size_t j = kept; empty_end && j-- > 0;) {
      if (send) {
        if (auto* c = std::get_if<core::Call>(&fx[j]); c && c->id == send->call) {
          folded = c->stream && !c->last;
          if (folded) c->last = true;
          break;
        }
        if (auto* s = std::get_if<core::Send>(&fx[j]); s && s->call == send->call) {
          folded = !s->last;
          if (folded) s->last = true;
          break;
        }
      } else if (auto* r = std::get_if<core::Reply>(&fx[j]); r && r->request == reply->request) {
        folded = !r->last && r->response.ok();
        if (folded) r->last = true;
        break;
      }
    }
    if (folded) continue;
    if (kept != i) fx[kept] = std::move(fx[i]);
    ++kept;
  }
  fx.resize(kept);
}

std::vector<CoreResponse> EffectExecutor::execute(core::Effects fx) {
  fold_stream_ends(fx);
  std::vector<CoreResponse> failed;
  for (auto& effect : fx) {
    if (auto* call = std::get_if<core::Call>(&effect)) {
      auto cached = keys_.find(call->peer);
      if (cached == keys_.end()) {
        auto parsed = peer_key_of(call->peer);
        if (!parsed) {
          failed.push_back(CoreResponse{call->id, parsed.error()});
          continue;
        }
        cached = keys_.emplace(call->peer, std::move(*parsed)).first;
      }
      const PeerKey* key = &cached->second;
      const auto me = caf::actor_cast<caf::actor>(self_);
      const bool view = !call->stream && call->view_response;
      const CallId id =
          call->stream || view
              ? gw_->open(me, *key, call->handle, call->stream ? pb::BIDI_STREAM : pb::UNARY, call->timeout,
                          payload_of(std::move(call->request), std::move(call->body), std::move(call->tail)),
                          call->last || view, call->caller, std::move(call->landings))
              : gw_->unary(me, *key, call->handle,
                           payload_of(std::move(call->request), std::move(call->body), std::move(call->tail)),
                           call->timeout, call->caller);
      calls_[id] = OutCall{call->id, call->stream, !call->stream || call->last, view};
      by_core_[call->id] = id;
    } else if (auto* send = std::get_if<core::Send>(&effect)) {
      auto it = by_core_.find(send->call);
      if (it == by_core_.end()) continue;  // the call is over (its end may be on the way)
      OutCall& out = calls_.at(it->second);
      if (!out.stream || out.local_end) {
        ++anomalies_;  // Send on a unary call or after `last`: dropped
        continue;
      }
      out.local_end = send->last;
      gw_->send(it->second, payload_of(std::move(send->message), std::move(send->body), std::move(send->tail)),
                send->last);
    } else if (auto* reply = std::get_if<core::Reply>(&effect)) {
      auto it = requests_.find(reply->request);
      if (it == requests_.end()) continue;  // the call ended (cancel, deadline) meanwhile
      const InRequest in = it->second;
      if (!reply->response) {
        gw_->fail(in.call, reply->response.error());
        requests_.erase(it);
      } else if (!reply->last && !in.stream) {
        ++anomalies_;  // a unary call has one answer: fail it rather than pass a part off
        gw_->fail(in.call, make_error(errc::internal,
                                      "expected one answer to a unary call, got a stream message "
                                      "(Reply with last = false); the callee's role is faulty"));
        requests_.erase(it);
      } else if (in.stream && reply->last && reply->response->empty() && reply->body.empty() && reply->tail.empty()) {
        gw_->end(in.call);  // an empty last reply ends the stream without a message
        requests_.erase(it);
      } else {
        gw_->send(in.call, payload_of(std::move(*reply->response), std::move(reply->body), std::move(reply->tail)),
                  reply->last);
        if (reply->last) requests_.erase(it);
      }
    } else if (auto* cancel_call = std::get_if<core::Cancel>(&effect)) {
      auto it = by_core_.find(cancel_call->call);
      if (it == by_core_.end()) continue;  // over already
      gw_->cancel(it->second, cancel_call->reason);
      forget_call(calls_.find(it->second));
    } else if (auto* set = std::get_if<core::SetTimer>(&effect)) {
      auto armed = timers_.find(set->id);
      if (armed != timers_.end() && armed->second.wake <= set->at) {
        // A wake-up is already due no later: it re-sends itself for the rest of the time.
        armed->second.at = set->at;
        continue;
      }
      const auto gen = next_generation_++;
      timers_[set->id] = Armed{gen, set->at, set->at};
      const auto delay = std::max(core::Duration::zero(), set->at - now());
      self_->delayed_send(self_, delay, timer_atom::value, set->id, gen);
    } else if (auto* cancel = std::get_if<core::CancelTimer>(&effect)) {
      timers_.erase(cancel->id);
    }
  }
  return failed;
}

void EffectExecutor::forget_call(std::unordered_map<CallId, OutCall>::iterator it) {
  if (it == calls_.end()) return;
  auto core_it = by_core_.find(it->second.core);
  if (core_it != by_core_.end() && core_it->second == it->first) by_core_.erase(core_it);
  partial_.erase(it->first);
  calls_.erase(it);
}

std::optional<CoreRequest> EffectExecutor::request_of(Delivery& d) {
  auto v = request_view_of(d);
  if (!v) return std::nullopt;
  return CoreRequest{v->id, std::move(v->handle), std::move(v->from), std::string(v->body.view())};
}

std::optional<CoreRequestView> EffectExecutor::request_view_of(Delivery& d) {
  if (d.call < core::rpc::k_first_served_call) return std::nullopt;  // not a served call
  if (d.kind == DeliveryKind::error) {
    // A unary request that ends in an error (cancel, deadline) is dropped quietly; a
    // streaming one's error is request_message_of's to tell.
    auto it = requests_.find(d.call);
    if (it != requests_.end() && !it->second.stream) {
      requests_.erase(it);
      take_all(d);
    }
    return std::nullopt;
  }
  if (d.kind != DeliveryKind::open) return std::nullopt;
  const core::RequestId id = d.call;  // unique while the call is open
  const bool stream = d.rpc_kind != pb::UNARY;
  requests_[id] = InRequest{d.call, stream};
  CoreRequestView r{id, d.handle, d.peer, std::move(d.data)};
  if (stream && d.end_of_stream) {
    leave_end(d);  // the first message was the caller's last: request_message_of says so
  } else {
    take_all(d);
  }
  return r;
}

std::optional<CoreRequestMessage> EffectExecutor::request_message_of(Delivery& d) {
  auto v = request_message_view_of(d);
  if (!v) return std::nullopt;
  CoreRequestMessage m{v->request, std::string{}, v->last};
  if (v->message) m.message = std::string(v->message->view());
  else m.message = std::move(v->message.error());
  return m;
}

std::optional<CoreRequestMessageView> EffectExecutor::request_message_view_of(Delivery& d) {
  if (d.call < core::rpc::k_first_served_call || d.kind == DeliveryKind::open) return std::nullopt;
  auto it = requests_.find(d.call);
  if (it == requests_.end()) {
    take_all(d);  // the core already ended the request: the rest is not its business
    return std::nullopt;
  }
  if (!it->second.stream) return std::nullopt;
  CoreRequestMessageView m{d.call, Buffer{}, true};
  if (d.kind == DeliveryKind::message) {
    m.message = std::move(d.data);
    m.last = d.end_of_stream;
  } else if (d.kind == DeliveryKind::error) {
    m.message = d.error;
    requests_.erase(it);
  }
  take_all(d);
  return m;
}

std::optional<CoreMessage> EffectExecutor::message_of(Delivery& d) {
  auto v = message_view_of(d);
  if (!v) return std::nullopt;
  return CoreMessage{v->call, std::string(v->message.view())};
}

std::optional<CoreMessageView> EffectExecutor::message_view_of(Delivery& d) {
  if (d.call == 0 || d.call >= core::rpc::k_first_served_call || !d.has_message) return std::nullopt;
  auto it = calls_.find(d.call);
  if (it == calls_.end() || !it->second.stream) return std::nullopt;
  if (d.end_of_stream && d.data.size() == 0) {
    leave_end(d);  // an empty last message is no message (as the simulator has it)
    return std::nullopt;
  }
  CoreMessageView m{it->second.core, std::move(d.data), d.landed};
  if (d.end_of_stream) {
    leave_end(d);  // the callee's last message: response_of ends the call
  } else {
    take_all(d);
  }
  return m;
}

std::optional<CoreResponse> EffectExecutor::response_of(Delivery& d) {
  auto it = calls_.find(d.call);
  if (it == calls_.end()) return std::nullopt;
  CoreResponse r{it->second.core, std::string{}};
  if (it->second.stream) {
    // The end of a streaming call: the callee's error, or its end of stream.
    if (d.kind != DeliveryKind::error && (!d.end_of_stream || d.has_message)) return std::nullopt;
    if (d.kind == DeliveryKind::error) {
      r.result = d.error;
    } else if (!it->second.local_end) {
      gw_->end(d.call);  // the callee finished first: close our direction too
    }
    forget_call(it);
    take_all(d);
    return r;
  }
  if (d.has_message) {
    partial_[d.call] = std::move(d.data);
    it->second.landed = d.landed;
  }
  if (!d.final) return std::nullopt;
  if (d.kind == DeliveryKind::error) {
    r.result = d.error;
  } else if (auto p = partial_.find(d.call); p != partial_.end()) {
    if (it->second.view) {
      r.body = std::move(p->second);
      r.landed = it->second.landed;
      partial_.erase(p);
    } else {
      r.result = std::string(p->second.view());
    }
  } else {
    r.result = make_error(errc::protocol, "call ended without a response");
  }
  forget_call(it);
  take_all(d);
  return r;
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
