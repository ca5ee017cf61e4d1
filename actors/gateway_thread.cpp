// The gateway's transport-thread side: frames, peers, ticks and the deliveries they
// make (the thread-safe API that posts work here is in gateway.cpp).
#include <algorithm>

#include "actors/gateway.hpp"
#include "actors/type_ids.hpp"
#include "messages/log/log.hpp"

namespace apiary::actors {

void Gateway::run_on_thread(std::function<void()> fn) {
  if (!on_thread()) {
    transport_->post(std::move(fn));  // the transport ticks after its posted work: on_tick drains
    return;
  }
  // A call made here may be answered at once (a call to a node behind this gateway, a
  // peer known to be down): its deliveries wait until the caller has the call's id,
  // and go when the transport thread is back in drain() or in its next tick.
  ++held_;
  fn();
  --held_;
}

void Gateway::attach(std::shared_ptr<DirectSink> sink) {
  run_on_thread([this, sink = std::move(sink)] { attached_.push_back(sink); });
}

void Gateway::detach(const std::shared_ptr<DirectSink>& sink) {
  run_on_thread([this, sink] {
    attached_.erase(std::remove(attached_.begin(), attached_.end(), sink), attached_.end());
  });
}

void Gateway::on_frame(const PeerKey& from, transport::Frame frame) {
  const CallId call = frame.envelope.call_id();
  auto fx = engine_.on_frame(now(), from, frame.envelope, std::move(frame.payload), frame.payload_error);
  if (frame.landed > 0) {
    for (auto& d : fx.deliveries) d.landed = d.call == call && d.kind == DeliveryKind::message && d.has_message;
  }
  execute(std::move(fx));
}

Buffer Gateway::landing_for(const PeerKey& from, const pb::Envelope& env, std::size_t body) {
  // Every message of the callee on a call with landings takes the next one, whether it
  // lands there or not: the n-th landing is for the n-th message.
  if (env.kind() != pb::MESSAGE || env.from_caller() || !env.has_message()) return Buffer{};
  auto it = landings_.find(env.call_id());
  if (it == landings_.end() || it->second.peer != from) return Buffer{};
  Landing next = std::move(it->second.next.front());
  it->second.next.pop_front();
  if (it->second.next.empty()) landings_.erase(it);
  if (next.zone.size() != body || (!next.any_head && next.head != env.payload_head()) ||
      next.tail != env.payload_tail()) {
    return Buffer{};
  }
  return std::move(next.zone);
}

void Gateway::on_peer_down(const PeerKey& peer, const Error& why) {
  log::process_logger().log(log::Level::info, "gateway.peer_down", "peer", peer, "why", why.message);
  execute(engine_.on_peer_down(now(), peer, why));
}

void Gateway::on_tick(transport::Clock::time_point t) {
  execute(engine_.on_tick(now_of(t)));  // also drains what posted work held back
  if (attached_.empty()) return;
  const auto sinks = attached_;  // a sink may detach while it runs
  for (const auto& s : sinks) s->on_tick(now_of(t));
  drain();
}

std::optional<transport::Clock::time_point> Gateway::next_wakeup() {
  auto d = engine_.next_deadline();
  for (const auto& s : attached_) {
    if (auto w = s->next_wakeup(); w && (!d || *w < *d)) d = w;
  }
  if (!d) return std::nullopt;
  return transport::Clock::time_point(std::chrono::duration_cast<transport::Clock::duration>(*d));
}

void Gateway::execute(core::rpc::Effects fx) {
  // Frames to our own address (several nodes behind this gateway calling each other) are
  // handed straight back to the engine as if received: the caller's side sees them come
  // from self_key_, the callee's side from k_loop_key, and answers travel the same way.
  std::vector<core::rpc::Outgoing> frames = std::move(fx.frames);
  for (std::size_t i = 0; i < frames.size(); ++i) {
    auto& out = frames[i];
    const bool to_self = !self_key_.empty() && out.peer == self_key_;
    if (!to_self && out.peer != k_loop_key) {
      transport::Frame frame;
      frame.envelope = std::move(out.envelope);
      frame.payload = std::move(out.payload);
      frame.expect_peer = std::move(out.callee);
      transport_->send(out.peer, std::move(frame));
      continue;
    }
    pb::Envelope& env = out.envelope;
    out.payload = transport::join_spliced(env, std::move(out.payload));
    env.set_payload_size(out.payload.size());
    if (to_self && env.kind() == pb::OPEN) {
      env.set_listen_addr(self_key_);
      if (env.peer_id().empty()) env.set_peer_id(self_peer_id_);
    }
    auto more = engine_.on_frame(now(), to_self ? k_loop_key : self_key_, env, std::move(out.payload), std::nullopt);
    for (auto& f : more.frames) frames.push_back(std::move(f));
    for (auto& d : more.deliveries) fx.deliveries.push_back(std::move(d));
  }
  // Authorization: served calls refused, and opened calls whose answer was refused.
  std::vector<std::pair<CallId, Error>> refused;
  std::vector<CallId> answer_refused;
  for (auto& d : fx.deliveries) {
    if (!authorizers_.empty()) {
      if (d.kind == DeliveryKind::open) {
        if (auto ok = check_open(d); !ok) {
          refused.emplace_back(d.call, ok.error());
          continue;
        }
      } else if (d.kind == DeliveryKind::message && !answers_to_check_.empty()) {
        if (auto why = check_answer(d)) {  // the caller hears of a refusal, not the answer
          if (!d.final) answer_refused.push_back(d.call);
          d.kind = DeliveryKind::error;
          d.error = std::move(*why);
          d.data = Buffer{};
          d.has_message = false;
          d.final = true;
        }
      }
      if (d.final) {
        answers_to_sign_.erase(d.call);
        answers_to_check_.erase(d.call);
      }
    }
    auto it = sinks_.find(d.sink);
    if (it == sinks_.end()) continue;  // the service was unregistered meanwhile
    DeliveryTarget target = it->second;
    // Caller-side sinks (and landings) live as long as their call.
    if (d.final && d.sink == d.call) {
      sinks_.erase(it);
      landings_.erase(d.call);
    }
    if (target.direct) {
      direct_queue_.emplace_back(std::move(target.direct), std::move(d));
    } else {
      caf::anon_send(target.actor, std::move(d));
    }
  }
  for (auto& [call, why] : refused) execute(engine_.fail(now(), call, why));
  for (CallId call : answer_refused) {
    execute(engine_.cancel(now(), call, "its answer was refused by authorization"));
    forget_if_over(call);
  }
  drain();
}

void Gateway::drain() {
  // Outside every engine step, so a sink may call the gateway back at once; what those
  // calls deliver joins the queue this loop is draining.
  if (draining_ || held_ > 0) return;
  draining_ = true;
  while (!direct_queue_.empty()) {
    auto [sink, d] = std::move(direct_queue_.front());
    direct_queue_.pop_front();
    sink->deliver(std::move(d));
  }
  draining_ = false;
}

}  // namespace apiary::actors
