// AveragerRole's inputs: inbound streams, call answers, timers and DHT results, routed to
// matchmaking or to the current round's runner.
#include <algorithm>
#include <utility>

#include "averaging.pb.h"
#include "core/averaging/averager_role.hpp"

namespace apiary::core::averaging {

AveragerEffects AveragerRole::on_request(TimePoint now, RequestId id, const std::string& handle,
                                         const PeerAddr& from, Buffer body) {
  AveragerEffects out;
  if (handle == k_join_handle) {
    requests_[id] = false;
    absorb(now, matchmaking_.on_request(now, id, from, std::string(body.view())), out);
    return out;
  }
  if (handle != config_.part_handle) return out;
  const std::string group = part_group_id(body.view());
  if (runner_ && group == group_->group.group_id) {
    requests_[id] = true;
    runner_effects(runner_->on_request(now, id, from, std::move(body)), out);
    return out;
  }
  if (!step_ || runner_ || (group_ && group != group_->group.group_id)) {
    // Not a group this peer is in or about to reduce for.
    out.rpc.push_back(Reply{id, make_error(errc::invalid_argument,
                                           "expected a part stream of a group this averager is "
                                           "forming, got one of group {} bytes long while it is {}; "
                                           "the sender keeps its local values",
                                           group.size(), step_ ? "in another round" : "idle"),
                            true});
    return out;
  }
  // The sender's all-reduce began before this peer heard BEGIN_ALLREDUCE (or its trigger).
  requests_[id] = true;
  held_.push_back(Held{id, from, std::move(body), false, true, group});
  return out;
}

AveragerEffects AveragerRole::on_request_message(TimePoint now, RequestId id, Result<Buffer> message,
                                                 bool last) {
  AveragerEffects out;
  auto it = requests_.find(id);
  if (it == requests_.end()) return out;
  const bool part = it->second;
  if (last || !message) requests_.erase(it);
  if (!part) {
    const Result<std::string> text = message ? Result<std::string>(std::string(message->view()))
                                             : Result<std::string>(message.error());
    absorb(now, matchmaking_.on_request_message(now, id, text, last), out);
    return out;
  }
  const bool is_held = std::any_of(held_.begin(), held_.end(), [id](const Held& h) { return h.id == id; });
  if (is_held) {
    held_.push_back(Held{id, PeerAddr{}, std::move(message), last, false, {}});
  } else if (runner_) {
    runner_effects(runner_->on_request_message(now, id, std::move(message), last), out);
  }
  return out;
}

AveragerEffects AveragerRole::on_message(TimePoint now, CallId call, std::string_view message) {
  AveragerEffects out;
  if (call >= config_.id_base && call < config_.id_base + k_round_ids) {
    absorb(now, matchmaking_.on_message(now, call - config_.id_base, std::string(message)), out);
  } else if (runner_id(call)) {
    runner_effects(runner_->on_message(now, call, message), out);
  }
  return out;
}

AveragerEffects AveragerRole::on_response(TimePoint now, CallId call, const Result<std::string>& result) {
  AveragerEffects out;
  if (call >= config_.id_base && call < config_.id_base + k_round_ids) {
    absorb(now, matchmaking_.on_response(now, call - config_.id_base, result), out);
  } else if (runner_id(call)) {
    runner_effects(runner_->on_response(now, call, result), out);
  }
  return out;
}

AveragerEffects AveragerRole::on_timer(TimePoint now, TimerId id) {
  AveragerEffects out;
  if (id >= config_.id_base && id < config_.id_base + k_round_ids) {
    absorb(now, matchmaking_.on_timer(now, id - config_.id_base), out);
  } else if (runner_id(id)) {
    runner_effects(runner_->on_timer(now, id), out);
  }
  return out;
}

AveragerEffects AveragerRole::on_declared(TimePoint now, DhtOpId op, bool ok) {
  AveragerEffects out;
  absorb(now, matchmaking_.on_declared(now, op, ok), out);
  return out;
}

AveragerEffects AveragerRole::on_averagers(TimePoint now, DhtOpId op, std::vector<Averager> active) {
  AveragerEffects out;
  absorb(now, matchmaking_.on_averagers(now, op, std::move(active)), out);
  return out;
}

AveragerEffects AveragerRole::on_reduced(TimePoint now, std::uint64_t job, Result<ReducedPart> result) {
  AveragerEffects out;
  if (runner_id(job)) runner_effects(runner_->on_reduced(now, job, std::move(result)), out);
  return out;
}

}  // namespace apiary::core::averaging
