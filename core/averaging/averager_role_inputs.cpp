// AveragerRole's inputs: inbound streams, call answers, timers and DHT results, routed to
// matchmaking or to the current round's runner.
#include <algorithm>
#include <type_traits>
#include <utility>

#include "averaging.pb.h"
#include "core/averaging/averager_role.hpp"
#include "core/averaging/dht_declarations.hpp"
#include "core/dht/node_role.hpp"

namespace apiary::core::averaging {

AveragerEffects AveragerRole::on_request(TimePoint now, RequestId id, const std::string& handle,
                                         const PeerAddr& from, Buffer body) {
  AveragerEffects out;
  if (handle == config_.join_handle) {
    requests_[id] = false;
    absorb(now, matchmaking_.on_request(now, id, from.multiaddr(), std::string(body.view())), out);
    return out;
  }
  if (handle != config_.part_handle) return out;
  const std::string group = part_group_id(body.view());
  if (runner_ && group == runner_group_) {
    requests_[id] = true;
    runner_effects(runner_->on_request(now, id, from, std::move(body)), out);
    return out;
  }
  if (!step_ || !awaited(group)) {
    // Not a group this peer is in or about to reduce for.
    out.rpc.push_back(Reply{id, make_error(errc::invalid_argument,
                                           "expected a part stream of a group this averager is "
                                           "forming, got one of group {} bytes long while it is {}; "
                                           "the sender keeps its local values",
                                           group.size(), step_ ? "in another round" : "idle"),
                            true});
    return out;
  }
  // The sender's all-reduce began before this peer heard BEGIN_ALLREDUCE (or its trigger,
  // or before this peer finished the step's previous phase).
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

AveragerEffects AveragerRole::on_message(TimePoint now, CallId call, std::string_view message, bool landed) {
  AveragerEffects out;
  if (call < k_round_ids) {
    absorb(now, matchmaking_.on_message(now, call, std::string(message)), out);
  } else if (runner_id(call)) {
    runner_effects(runner_->on_message(now, call, message, landed), out);
  }
  return out;
}

AveragerEffects AveragerRole::on_response(TimePoint now, CallId call, const Result<std::string>& result) {
  AveragerEffects out;
  if (call < k_round_ids) {
    absorb(now, matchmaking_.on_response(now, call, result), out);
  } else if (runner_id(call)) {
    runner_effects(runner_->on_response(now, call, result), out);
  }
  return out;
}

AveragerEffects AveragerRole::on_timer(TimePoint now, TimerId id) {
  AveragerEffects out;
  if (id < k_round_ids) {
    absorb(now, matchmaking_.on_timer(now, id), out);
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

namespace apiary::core::averaging {

Effects AveragerRole::on(TimePoint now, Input input) {
  return std::visit(
      [&](auto& in) -> Effects {
        using T = std::decay_t<decltype(in)>;
        if constexpr (std::is_same_v<T, Request>) {
          return lower(now, on_request(now, in.id, Addressing::base_of(in.handle), in.from, std::move(in.body)));
        } else if constexpr (std::is_same_v<T, RequestMessage>) {
          return lower(now, on_request_message(now, in.id, std::move(in.message), in.last));
        } else if constexpr (std::is_same_v<T, StreamMessage>) {
          return lower(now, on_message(now, in.call, in.message.view(), in.landed));
        } else if constexpr (std::is_same_v<T, Response>) {
          return lower(now, on_response(now, in.call, in.result));
        } else if constexpr (std::is_same_v<T, TimerFired>) {
          return lower(now, on_timer(now, in.id));
        } else if constexpr (std::is_same_v<T, LocalCall>) {
          return local(now, in);
        } else if constexpr (std::is_same_v<T, LocalReply>) {
          return lower(now, answered(now, std::move(in)));
        } else {
          return {};  // Start; a groupmate going down shows as its calls failing
        }
      },
      input);
}

Effects AveragerRole::local(TimePoint now, const LocalCall& c) {
  if (c.method == k_step_method) {
    auto* s = c.args.as<AveragerStep>();
    if (s == nullptr) {
      return {Complete{c.op, make_error(errc::invalid_argument, "the averager's '{}' takes an AveragerStep, got a {}",
                                        k_step_method, c.args.type_name())}};
    }
    if (step_) {
      return {Complete{c.op, make_error(errc::unavailable, "expected one averaging step at a time, but a step is "
                                                           "running; wait for it or cancel it first")}};
    }
    step_op_ = c.op;
    return lower(now, step(now, std::move(*s)));
  }
  if (c.method == k_trigger_method || c.method == k_cancel_method) {
    auto* fresh = c.args.as<std::vector<std::vector<float>>>();
    if (c.method == k_trigger_method && fresh != nullptr && step_ && !runner_) {
      bool same = fresh->size() == step_->tensors.size();
      for (std::size_t t = 0; same && t < fresh->size(); ++t) same = (*fresh)[t].size() == step_->tensors[t].size();
      if (!same) {
        return {Complete{c.op, make_error(errc::invalid_argument,
                                          "the averager's '{}' takes the step's {} tensors at their sizes; got {} "
                                          "tensors, or other sizes (the step waits for a trigger still)",
                                          k_trigger_method, step_->tensors.size(), fresh->size())}};
      }
    }
    Effects fx = lower(now, c.method == k_trigger_method ? trigger(now, fresh) : cancel(now));
    fx.push_back(Complete{c.op, Value{}});
    return fx;
  }
  if (c.method == k_set_weight_method) {
    const auto* weight = c.args.as<double>();
    if (weight == nullptr) {
      return {Complete{c.op, make_error(errc::invalid_argument, "the averager's '{}' takes a double, got a {}",
                                        k_set_weight_method, c.args.type_name())}};
    }
    return {Complete{c.op, Value::of(set_weight(*weight))}};
  }
  return {unknown_method(c, "the averager")};
}

AveragerEffects AveragerRole::answered(TimePoint now, LocalReply reply) {
  auto it = asks_.find(reply.op);
  if (it == asks_.end()) return {};
  const Asked asked = it->second;
  asks_.erase(it);
  if (asked.reduce) {
    Result<ReducedPart> part = make_error(errc::internal, "the device answered a reduction with no ReducedPart");
    if (!reply.result.ok()) {
      part = reply.result.error();
    } else if (auto* p = reply.result->as<ReducedPart>()) {
      part = std::move(*p);
    }
    return on_reduced(now, asked.id, std::move(part));
  }
  const dht::OpResult* r = reply.result.ok() ? reply.result->as<dht::OpResult>() : nullptr;
  if (asked.declare) return on_declared(now, asked.id, r != nullptr && r->status.ok() && !r->stored.empty() && r->stored[0]);
  std::vector<Averager> active;
  if (r != nullptr && !r->found.empty()) active = declared_averagers(r->found[0], to_seconds(now) + config_.dht_epoch);
  return on_averagers(now, asked.id, std::move(active));
}

Effects AveragerRole::lower(TimePoint now, AveragerEffects afx) {
  while (phase_done_ && step_ && !afx.outcome) {  // a PowerSGD phase ended: the next one
    AllReduceOutcome done = std::move(*phase_done_);
    phase_done_.reset();
    for (auto& peer : done.failed_senders) group_->failed_senders.push_back(std::move(peer));
    for (auto& peer : done.failed_reducers) group_->failed_reducers.push_back(std::move(peer));
    begin_phase(now, afx, std::move(done.deltas));
  }
  phase_done_.reset();
  Effects out;
  for (auto& op : afx.dht) {
    const OpId ask = next_ask_++;
    dht::NodeOp run;
    if (auto* d = std::get_if<DhtDeclare>(&op)) {
      asks_[ask] = Asked{false, true, d->op};
      run = [item = declaration_item(*d)](dht::Node& node, TimePoint at, OpId id) { return node.store(at, id, {item}); };
    } else if (auto* g = std::get_if<DhtGetAveragers>(&op)) {
      asks_[ask] = Asked{false, false, g->op};
      run = [key = averagers_key(*g)](dht::Node& node, TimePoint at, OpId id) { return node.get(at, id, {key}, true); };
    }
    out.push_back(Ask{ask, config_.dht_role, dht::k_run_method, Value::of(std::move(run))});
  }
  if (afx.outcome && step_op_) {
    const OpId op = *step_op_;
    step_op_.reset();
    if (afx.outcome->ok()) {
      out.push_back(Complete{op, Value::of(std::move(afx.outcome->value()))});
    } else {
      out.push_back(Complete{op, afx.outcome->error()});
    }
  }
  name_caller(afx.rpc, config_.caller);
  config_.addressing.address(afx.rpc);
  out.insert(out.end(), std::make_move_iterator(afx.rpc.begin()), std::make_move_iterator(afx.rpc.end()));
  // After the calls and replies above: a part's answers must follow those already on their way.
  for (auto& job : afx.reduce) {
    const OpId ask = next_ask_++;
    asks_[ask] = Asked{true, false, job.id};
    out.push_back(Ask{ask, config_.device_role, k_reduce_method, Value::of(std::move(job))});
  }
  return out;
}

}  // namespace apiary::core::averaging
