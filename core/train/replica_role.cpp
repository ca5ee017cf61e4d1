#include "core/train/replica_role.hpp"

#include <algorithm>
#include <utility>

#include "core/collective/ar_step.hpp"
#include "core/collective/barrier_role.hpp"
#include "core/collective/synchronizer.hpp"
#include "core/train/allreduce_role.hpp"
#include "core/train/ps_client_role.hpp"

namespace apiary::core::train {

namespace {

constexpr const char* k_name = "the replica";
constexpr const char* k_ps = "ps";
constexpr const char* k_ar = "allreduce";
constexpr const char* k_barrier = "barrier";

/// Values per row of axis 0 of `shape` (1 for a vector or a scalar).
std::size_t row_width(const std::vector<std::int64_t>& shape) {
  std::size_t width = 1;
  for (std::size_t d = 1; d < shape.size(); ++d) width *= static_cast<std::size_t>(shape[d]);
  return width;
}

}  // namespace

Result<std::unique_ptr<ReplicaRole>> ReplicaRole::create(const ReplicaConfig& config) {
  if (!config.ps && !config.ar) {
    return make_error(errc::invalid_argument, "{} {}: expected a PS plan, an all-reduce plan or both, got neither",
                      config.label, config.replica);
  }
  std::map<std::string, ps::Optimizer> optimizers;
  if (config.ar) {
    auto add = [&](const std::string& name, std::size_t width) -> Status {
      auto it = config.initial.find(name);
      if (it == config.initial.end()) {
        return make_error(errc::invalid_argument,
                          "{} {}: expected initial values of the all-reduced variable {}, got none; is the strategy "
                          "for this model?",
                          config.label, config.replica, name);
      }
      optimizers.emplace(name, ps::Optimizer(config.optimizer, it->second.size(), width));
      return ok_status();
    };
    for (const auto& v : config.ar->variables) {
      if (auto st = add(v.name, 1); !st) return st.error();
    }
    for (const auto& sp : config.ar->sparse) {
      if (auto st = add(sp.name, sp.row_width); !st) return st.error();
    }
  }
  return std::unique_ptr<ReplicaRole>(new ReplicaRole(config, std::move(optimizers)));
}

ReplicaRole::ReplicaRole(const ReplicaConfig& config, std::map<std::string, ps::Optimizer> optimizers)
    : replica_(config.replica), has_ps_(config.ps != nullptr), has_ar_(config.ar != nullptr), meet_(config.meet),
      optimizers_(std::move(optimizers)) {
  if (config.ps) ps_variables_ = config.ps->variables;
  for (const auto& [name, optimizer] : optimizers_) params_[name] = config.initial.at(name);
}

Effects ReplicaRole::on(TimePoint /*now*/, Input input) {
  if (std::holds_alternative<Start>(input)) {
    // Hear the other roles' failures between calls.
    Effects out;
    auto watch = [&](const char* role) {
      watching_.push_back(next_ask_);
      out.push_back(Ask{next_ask_++, role, "watch", Value{}});
    };
    if (has_ps_) watch(k_ps);
    if (has_ar_) watch(k_ar);
    return out;
  }
  if (auto* c = std::get_if<LocalCall>(&input)) return on_call(std::move(*c));
  if (auto* r = std::get_if<LocalReply>(&input)) return on_reply(std::move(*r));
  return {};
}

Effects ReplicaRole::on_call(LocalCall call) {
  Effects out;
  const std::string& m = call.method;
  if (m == "watch") {
    if (failure_) {
      out.push_back(Complete{call.op, *failure_});
    } else {
      watch_ = call.op;
    }
    return out;
  }
  if (m == "optimizer_states") {
    std::map<std::string, ps::Optimizer::State> states;
    for (const auto& [name, optimizer] : optimizers_) states.emplace(name, optimizer.state());
    out.push_back(Complete{call.op, Value::of(std::move(states))});
    return out;
  }
  if (m == "restore_optimizers") {
    const auto* states = call.args.as<std::map<std::string, ps::Optimizer::State>>();
    Result<Value> result{Value{}};
    if (states == nullptr) result = make_error(errc::invalid_argument, "restore_optimizers: expected optimizer states");
    for (auto it = optimizers_.begin(); states != nullptr && it != optimizers_.end() && result.ok(); ++it) {
      auto found = states->find(it->first);
      if (found == states->end()) {
        result = make_error(errc::invalid_argument, "expected the optimizer state of {}, got none", it->first);
      } else if (auto st = it->second.restore(found->second); !st) {
        result = make_error(st.error().code, "{}: {}", it->first, st.error().message);
      }
    }
    out.push_back(Complete{call.op, std::move(result)});
    return out;
  }
  if (m != "pull" && m != "push" && m != "leave" && m != "join") {
    out.push_back(unknown_method(call, k_name));
    return out;
  }
  if (failure_) {
    out.push_back(Complete{call.op, *failure_});
    return out;
  }
  const bool ready = (m == "pull" && phase_ == Phase::idle) || (m == "push" && phase_ == Phase::pulled) ||
                     (m == "leave" && (phase_ == Phase::idle || phase_ == Phase::pulled)) ||
                     (m == "join" && phase_ == Phase::idle && step_ == 0);
  if (!ready) {
    out.push_back(Complete{call.op, make_error(errc::protocol,
                                               "replica {}: '{}' out of turn at step {} (a step is pull, then push; "
                                               "one call at a time; nothing after leave)",
                                               replica_, m, step_)});
    return out;
  }
  if (m == "push") {
    auto* grads = call.args.as<ReplicaGradients>();
    if (grads == nullptr) {
      out.push_back(Complete{call.op, make_error(errc::invalid_argument, "push: expected ReplicaGradients, got {}",
                                                 call.args.type_name())});
      return out;
    }
    return push(call.op, std::move(*grads));
  }
  running_ = call.op;
  if (m == "join" || m == "leave") {
    const auto* patience = call.args.as<Duration>();
    patience_ = patience != nullptr ? *patience : std::chrono::seconds(30);
  }
  if (m == "join") {
    if (!meet_) {
      finish(out, Value{});
      return out;
    }
    phase_ = Phase::joining;
    return meet(std::move(out), 0);
  }
  if (m == "leave") {
    phase_ = Phase::leaving;
    if (has_ps_) {
      asked_ = next_ask_;
      out.push_back(Ask{next_ask_++, k_ps, "leave", Value{}});
      return out;
    }
    return left(std::move(out));
  }
  if (has_ps_) {
    phase_ = Phase::pulling;
    asked_ = next_ask_;
    out.push_back(Ask{next_ask_++, k_ps, "pull", Value{}});
    return out;
  }
  // Nothing to pull: the step's parameters are this replica's own copy.
  phase_ = Phase::pulled;
  version_ = step_;
  finish(out, Value::of(ReplicaParams{step_, version_, params_}));
  return out;
}

Effects ReplicaRole::push(OpId op, ReplicaGradients grads) {
  Effects out;
  PsPushArgs pushed;
  pushed.samples = grads.samples;
  for (const auto& v : ps_variables_) {
    auto it = grads.gradients.find(v.name);
    if (it == grads.gradients.end()) {
      out.push_back(Complete{op, make_error(errc::invalid_argument,
                                            "replica {} at step {}: expected a gradient of {}, got none", replica_,
                                            step_, v.name)});
      return out;
    }
    // A sparse variable's gradient goes as the rows it touched.
    if (v.sparse) {
      pushed.gradients.emplace(v.name, collective::touched_rows(it->second, row_width(v.shape)));
    } else {
      pushed.gradients.emplace(v.name, std::move(it->second));
    }
    grads.gradients.erase(it);
  }
  // The all-reduced variables' gradients are checked here: a collective begun with a
  // wrong one would fail every replica's step.
  for (const auto& [name, optimizer] : optimizers_) {
    auto it = grads.gradients.find(name);
    const std::size_t want = params_.at(name).size();
    if (it == grads.gradients.end() || it->second.size() != want) {
      out.push_back(Complete{op, make_error(errc::invalid_argument,
                                            "replica {} at step {}: expected a gradient of {} with {} values, got {}",
                                            replica_, step_, name, want,
                                            it == grads.gradients.end() ? std::string("none")
                                                                        : std::to_string(it->second.size()))});
      return out;
    }
  }
  running_ = op;
  ar_gradients_ = std::move(grads.gradients);
  samples_ = grads.samples;
  if (has_ps_) {
    phase_ = Phase::pushing;
    asked_ = next_ask_;
    out.push_back(Ask{next_ask_++, k_ps, "push", Value::of(std::move(pushed))});
    return out;
  }
  return average(std::move(out));
}

Effects ReplicaRole::average(Effects out) {
  if (!has_ar_) {
    ++step_;
    phase_ = Phase::idle;
    finish(out, Value{});
    return out;
  }
  phase_ = Phase::averaging;
  asked_ = next_ask_;
  out.push_back(Ask{next_ask_++, k_ar, "step", Value::of(ArStepArgs{step_, std::move(ar_gradients_), samples_})});
  ar_gradients_.clear();
  return out;
}

Effects ReplicaRole::on_reply(LocalReply reply) {
  if (std::find(watching_.begin(), watching_.end(), reply.op) != watching_.end()) {
    if (!reply.result.ok()) return fail(reply.result.error());
    return {};
  }
  if (!running_ || reply.op != asked_ || failure_) return {};
  if (!reply.result.ok()) return fail(reply.result.error());
  Effects out;
  switch (phase_) {
    case Phase::pulling: {
      auto* pulled = reply.result->as<PsPulled>();
      if (pulled == nullptr) return fail(make_error(errc::internal, "replica {}: the PS client's pull gave no parameters", replica_));
      for (auto& [name, values] : pulled->params) params_[name] = std::move(values);
      version_ = pulled->version;
      phase_ = Phase::pulled;
      finish(out, Value::of(ReplicaParams{step_, version_, params_}));
      return out;
    }
    case Phase::pushing:
      return average(std::move(out));
    case Phase::averaging: {
      auto* averages = reply.result->as<collective::ArAverages>();
      if (averages == nullptr) return fail(make_error(errc::internal, "replica {}: the all-reduce gave no averages", replica_));
      // Every replica applies the same averages to its own copy (sparse ones to the
      // touched rows only).
      if (auto applied = collective::apply_averages(*averages, optimizers_, params_); !applied) {
        return fail(applied.error());
      }
      ++step_;
      phase_ = Phase::idle;
      finish(out, Value{});
      return out;
    }
    case Phase::joining:
      phase_ = Phase::idle;
      finish(out, Value{});
      return out;
    case Phase::leaving:
      return left(std::move(out));
    case Phase::meeting:
      phase_ = Phase::left;
      finish(out, Value{});
      return out;
    default:
      return out;
  }
}

Effects ReplicaRole::fail(Error error) {
  Effects out;
  if (failure_) return out;
  failure_ = std::move(error);
  // Stop every side with the reason: the PS sessions end (the PS devices fail the steps
  // that wait for this replica) and the exchange refuses every later part.
  if (has_ps_) out.push_back(Ask{next_ask_++, k_ps, "stop", Value::of(*failure_)});
  if (has_ar_) out.push_back(Ask{next_ask_++, k_ar, "stop", Value::of(*failure_)});
  if (running_) finish(out, *failure_);
  if (watch_) out.push_back(Complete{*std::exchange(watch_, std::nullopt), *failure_});
  return out;
}

Effects ReplicaRole::meet(Effects out, std::uint64_t level) {
  asked_ = next_ask_;
  out.push_back(Ask{next_ask_++, k_barrier, "meet", Value::of(collective::BarrierMeet{level, patience_})});
  return out;
}

Effects ReplicaRole::left(Effects out) {
  if (!meet_) {
    phase_ = Phase::left;
    finish(out, Value{});
    return out;
  }
  phase_ = Phase::meeting;
  return meet(std::move(out), static_cast<std::uint64_t>(step_));
}

void ReplicaRole::finish(Effects& out, Result<Value> result) {
  out.push_back(Complete{*std::exchange(running_, std::nullopt), std::move(result)});
}

Status add_replica_roles(Mux& mux, const ReplicaConfig& config) {
  if (config.ps) {
    auto client = PsClientRole::create(PsClientConfig{config.replica, config.ps, config.servers, config.pull_via,
                                                      config.call_timeout, config.label});
    if (!client) return client.error();
    if (auto added = mux.add(k_ps, std::move(*client)); !added) return added.error();
  }
  if (config.ar) {
    if (config.replica < 0) {
      return make_error(errc::invalid_argument, "{}: expected a replica id >= 0, got {}", config.label, config.replica);
    }
    auto ar = AllReduceRole::create(AllReduceConfig{config.ar, config.members, static_cast<std::size_t>(config.replica),
                                                    config.job, config.exchange_timeout, config.label,
                                                    config.nccl_role});
    if (!ar) return ar.error();
    if (auto added = mux.add(k_ar, std::move(*ar)); !added) return added.error();
  }
  if (config.meet) {
    if (config.replica < 0 || static_cast<std::size_t>(config.replica) >= config.members.size()) {
      return make_error(errc::invalid_argument, "{} {}: expected one address per replica to meet at, got {}",
                        config.label, config.replica, config.members.size());
    }
    collective::BarrierConfig bc;
    bc.peers = config.members;
    bc.self = static_cast<std::size_t>(config.replica);
    bc.handle = config.job + "::Collective.rpc_barrier";
    if (auto added = mux.add(k_barrier, std::make_unique<collective::BarrierRole>(std::move(bc))); !added) {
      return added.error();
    }
  }
  auto replica = ReplicaRole::create(config);
  if (!replica) return replica.error();
  if (auto added = mux.add("replica", std::move(*replica)); !added) return added.error();
  return ok_status();
}

}  // namespace apiary::core::train
