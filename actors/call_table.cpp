#include "actors/call_table.hpp"

#include "messages/identity/multiaddr.hpp"

namespace apiary::actors {

core::TimePoint core_now() { return std::chrono::steady_clock::now().time_since_epoch(); }

CallTable::CallTable(std::shared_ptr<Gateway> gw, DeliveryTarget me, HostTimers& timers)
    : gw_(std::move(gw)), me_(std::move(me)), timers_(timers) {}

namespace {

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

std::vector<CoreResponse> CallTable::execute(core::Effects fx) {
  fold_stream_ends(fx);
  std::vector<CoreResponse> failed;
  for (auto& effect : fx) {
    if (auto* c = std::get_if<core::Call>(&effect)) {
      call(*c, failed);
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
    } else if (auto* r = std::get_if<core::Reply>(&effect)) {
      reply(*r);
    } else if (auto* cancel_call = std::get_if<core::Cancel>(&effect)) {
      auto it = by_core_.find(cancel_call->call);
      if (it == by_core_.end()) continue;  // over already
      gw_->cancel(it->second, cancel_call->reason);
      forget_call(calls_.find(it->second));
    } else if (auto* set = std::get_if<core::SetTimer>(&effect)) {
      timers_.set(set->id, set->at);
    } else if (auto* cancel = std::get_if<core::CancelTimer>(&effect)) {
      timers_.cancel(cancel->id);
    }
  }
  return failed;
}

void CallTable::call(core::Call& call, std::vector<CoreResponse>& failed) {
  if (call.peer.empty()) {
    failed.push_back(CoreResponse{call.id, make_error(errc::invalid_argument,
                                                      "call to {}: no peer address given", call.handle)});
    return;
  }
  const PeerKey& key = call.peer.key();
  const bool view = !call.stream && call.view_response;
  auto first = payload_of(std::move(call.request), std::move(call.body), std::move(call.tail));
  // The PeerID the caller dialled, for the transport to check against the one proven.
  std::string callee = call.peer.peer() ? call.peer.peer()->bytes() : std::string{};
  const CallId id = call.stream || view
                        ? gw_->open(me_, key, call.handle, call.stream ? pb::BIDI_STREAM : pb::UNARY, call.timeout,
                                    std::move(first), call.last || view, call.caller, std::move(call.landings),
                                    std::move(callee))
                        : gw_->unary(me_, key, call.handle, std::move(first), call.timeout, call.caller,
                                     std::move(callee));
  calls_[id] = OutCall{call.id, call.stream, !call.stream || call.last, view};
  by_core_[call.id] = id;
}

void CallTable::reply(core::Reply& reply) {
  auto it = requests_.find(reply.request);
  if (it == requests_.end()) return;  // the call ended (cancel, deadline) meanwhile
  const InRequest in = it->second;
  if (!reply.response) {
    gw_->fail(in.call, reply.response.error());
    requests_.erase(it);
  } else if (!reply.last && !in.stream) {
    ++anomalies_;  // a unary call has one answer: fail it rather than pass a part off
    gw_->fail(in.call, make_error(errc::internal,
                                  "expected one answer to a unary call, got a stream message "
                                  "(Reply with last = false); the callee's role is faulty"));
    requests_.erase(it);
  } else if (in.stream && reply.last && reply.response->empty() && reply.body.empty() && reply.tail.empty()) {
    gw_->end(in.call);  // an empty last reply ends the stream without a message
    requests_.erase(it);
  } else {
    gw_->send(in.call, payload_of(std::move(*reply.response), std::move(reply.body), std::move(reply.tail)),
              reply.last);
    if (reply.last) requests_.erase(it);
  }
}

void CallTable::forget_call(std::unordered_map<CallId, OutCall>::iterator it) {
  if (it == calls_.end()) return;
  auto core_it = by_core_.find(it->second.core);
  if (core_it != by_core_.end() && core_it->second == it->first) by_core_.erase(core_it);
  partial_.erase(it->first);
  calls_.erase(it);
}

}  // namespace apiary::actors
