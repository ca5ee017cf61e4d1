#include "core/train/replica_role.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/collective/ar_step.hpp"
#include "core/collective/barrier_role.hpp"
#include "core/collective/group_roles.hpp"
#include "core/collective/synchronizer.hpp"
#include "core/ps/partition.hpp"
#include "core/train/allreduce_role.hpp"
#include "core/train/ps_client_role.hpp"

namespace apiary::core::train {

namespace {

constexpr const char* k_name = "the replica";
constexpr const char* k_ps = "ps";
constexpr const char* k_ar = "allreduce";
constexpr const char* k_barrier = "barrier";
constexpr const char* k_ring = "ring";

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
      meet_on_leave_(config.meet_on_leave),
      optimizers_(std::move(optimizers)) {
  if (config.ps) ps_variables_ = config.ps->variables;
  for (const auto& [name, optimizer] : optimizers_) params_[name] = config.initial.at(name);
  config_learning_rate_ = config.optimizer.learning_rate;
  for (const auto& v : ps_variables_) {
    if (v.sparse) sparse_widths_[v.name] = ps::ShardLayout{v.shape}.row_width();
  }
  if (config.ar) {
    for (const auto& sp : config.ar->sparse) sparse_widths_[sp.name] = sp.row_width;
  }
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
  if (m == "optimizer_states" && (!has_ps_ || failure_)) {
    if (failure_) {
      out.push_back(Complete{call.op, *failure_});
      return out;
    }
    out.push_back(Complete{call.op, Value::of(own_states())});
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
  if (m != "pull" && m != "push" && m != "leave" && m != "join" && m != "optimizer_states") {
    out.push_back(unknown_method(call, k_name));
    return out;
  }
  if (failure_) {
    out.push_back(Complete{call.op, *failure_});
    return out;
  }
  const bool ready = (m == "pull" && phase_ == Phase::idle) || (m == "push" && phase_ == Phase::pulled) ||
                     (m == "optimizer_states" && (phase_ == Phase::idle || phase_ == Phase::pulled)) ||
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
    return push(call.op, *grads);
  }
  running_ = call.op;
  if (m == "optimizer_states") {
    // The PS variables' states from their shards, the all-reduced ones' from here.
    back_to_ = phase_;
    phase_ = Phase::reading;
    asked_ = next_ask_;
    out.push_back(Ask{next_ask_++, k_ps, "optimizer_states", Value{}});
    return out;
  }
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
  // The caller's storage from the last pull, if it lends it: the PS variables' vectors
  // receive this pull, the others take this replica's copy.
  storage_.clear();
  direct_.clear();
  if (auto* lent = call.args.as<std::map<std::string, std::vector<float>>>()) storage_ = std::move(*lent);
  if (auto* into = call.args.as<ReplicaPullInto>()) {
    storage_ = std::move(into->storage);
    direct_ = std::move(into->direct);
  }
  if (has_ps_) {
    PsPullArgs pull;
    for (const auto& v : ps_variables_) {
      auto it = storage_.find(v.name);
      if (it == storage_.end()) continue;
      pull.storage.emplace(v.name, std::move(it->second));
      storage_.erase(it);
    }
    phase_ = Phase::pulling;
    asked_ = next_ask_;
    out.push_back(Ask{next_ask_++, k_ps, "pull", Value::of(std::move(pull))});
    return out;
  }
  // Nothing to pull: the step's parameters are this replica's own copy.
  phase_ = Phase::pulled;
  version_ = step_;
  finish(out, Value::of(parameters({})));
  return out;
}

ReplicaParams ReplicaRole::parameters(std::map<std::string, std::vector<float>> pulled) {
  ReplicaParams out{step_, version_, std::move(pulled)};
  for (const auto& [name, values] : params_) {
    if (auto d = direct_.find(name); d != direct_.end() && d->second.data != nullptr && d->second.count == values.size()) {
      if (!values.empty()) std::memcpy(d->second.data, values.data(), values.size() * sizeof(float));
      storage_.erase(name);
      continue;
    }
    auto& mine = out.params[name];
    auto lent = storage_.find(name);
    if (lent != storage_.end()) mine = std::move(lent->second);
    mine.assign(values.begin(), values.end());
  }
  storage_.clear();
  direct_.clear();
  return out;
}

Effects ReplicaRole::push(OpId op, ReplicaGradients& grads) {
  Effects out;
  // Every gradient is checked before any leaves: a refused push sends nothing and gives
  // nothing up (the caller may retry), and a collective begun with a wrong gradient
  // would fail every replica's step.
  auto check = [&](const std::string& name, std::size_t want) -> Status {
    auto rows = grads.sparse.find(name);
    auto width = sparse_widths_.find(name);
    if (rows != grads.sparse.end() && width != sparse_widths_.end()) {
      const std::size_t w = width->second;
      const auto& g = rows->second;
      if (g.values.size() != g.rows.size() * w) {
        return make_error(errc::invalid_argument,
                          "replica {} at step {}: expected {} values for the {} rows of {}'s gradient ({} per row), got {}",
                          replica_, step_, g.rows.size() * w, g.rows.size(), name, w, g.values.size());
      }
      for (auto row : g.rows) {
        if (row < 0 || static_cast<std::size_t>(row) * w >= want) {
          return make_error(errc::invalid_argument, "replica {} at step {}: row {} of {}'s gradient is outside its {} rows",
                            replica_, step_, row, name, want / w);
        }
      }
      return ok_status();
    }
    if (rows != grads.sparse.end()) {
      return make_error(errc::invalid_argument, "replica {} at step {}: {} is dense; expected its gradient whole, got rows",
                        replica_, step_, name);
    }
    auto it = grads.gradients.find(name);
    if (it != grads.gradients.end() && it->second.size() == want) return ok_status();
    return make_error(errc::invalid_argument, "replica {} at step {}: expected a gradient of {} with {} values, got {}",
                      replica_, step_, name, want,
                      it == grads.gradients.end() ? std::string("none") : std::to_string(it->second.size()));
  };
  if (!(grads.learning_rate >= 0.0F) || !std::isfinite(grads.learning_rate)) {
    out.push_back(Complete{op, make_error(errc::invalid_argument,
                                          "replica {} at step {}: expected a learning rate > 0 (or 0: the configured "
                                          "one), got {}",
                                          replica_, step_, grads.learning_rate)});
    return out;
  }
  for (const auto& v : ps_variables_) {
    if (auto st = check(v.name, ps::ShardLayout{v.shape}.size()); !st) {
      out.push_back(Complete{op, st.error()});
      return out;
    }
  }
  for (const auto& [name, values] : params_) {
    if (auto st = check(name, values.size()); !st) {
      out.push_back(Complete{op, st.error()});
      return out;
    }
  }
  running_ = op;
  samples_ = grads.samples;
  learning_rate_ = grads.learning_rate;
  PsPushArgs pushed;
  pushed.samples = grads.samples;
  pushed.learning_rate = grads.learning_rate;
  for (const auto& v : ps_variables_) {
    // A sparse variable's gradient goes as the rows it touched (its dense tensor stays
    // with the others); a dense one as it lies, lent to the push.
    if (auto rows = grads.sparse.find(v.name); rows != grads.sparse.end()) {
      pushed.gradients.emplace(v.name, std::move(rows->second));
      grads.sparse.erase(rows);
      continue;
    }
    auto it = grads.gradients.find(v.name);
    if (v.sparse) {
      pushed.gradients.emplace(v.name, collective::touched_rows(it->second, ps::ShardLayout{v.shape}.row_width()));
    } else {
      pushed.gradients.emplace(v.name, std::move(it->second));
      grads.gradients.erase(it);
    }
  }
  lent_ = std::move(grads.gradients);
  rows_ = std::move(grads.sparse);  // the all-reduced sparse variables' rows
  if (has_ps_) {
    phase_ = Phase::pushing;
    asked_ = next_ask_;
    out.push_back(Ask{next_ask_++, k_ps, "push", Value::of(std::move(pushed))});
    return out;
  }
  return average(std::move(out));
}

void ReplicaRole::reclaim(const Value& pushed) {
  auto* args = pushed.as<PsPushArgs>();
  if (args == nullptr) return;
  // A call still viewing them (after a failure, a frame in flight) keeps its own: copy.
  const bool mine = !pushed.shared();
  for (auto& [name, gradient] : args->gradients) {
    if (auto* dense = std::get_if<std::vector<float>>(&gradient)) lent_[name] = mine ? std::move(*dense) : *dense;
  }
}

Effects ReplicaRole::average(Effects out) {
  if (!has_ar_) {
    rows_.clear();
    ++step_;
    phase_ = Phase::idle;
    finish(out, Value::of(ReplicaGradients{std::exchange(lent_, {}), samples_, {}}));
    return out;
  }
  phase_ = Phase::averaging;
  asked_ = next_ask_;
  // The gradients' buffers go through the all-reduce and come back with its averages.
  out.push_back(Ask{next_ask_++, k_ar, "step",
                    Value::of(ArStepArgs{step_, std::exchange(lent_, {}), samples_, std::exchange(rows_, {})})});
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
      version_ = pulled->version;
      // Without all-reduced variables the PS steps are the replica's: a replica that
      // rejoined a running job starts where the job is.
      if (!has_ar_) step_ = pulled->step;
      phase_ = Phase::pulled;
      finish(out, Value::of(parameters(std::move(pulled->params))));
      return out;
    }
    case Phase::pushing:
      reclaim(*reply.result);
      return average(std::move(out));
    case Phase::averaging: {
      auto* averages = reply.result->as<collective::ArAverages>();
      if (averages == nullptr) return fail(make_error(errc::internal, "replica {}: the all-reduce gave no averages", replica_));
      // Every replica applies the same averages to its own copy (sparse ones to the
      // touched rows only), at the step's learning rate.
      for (auto& [name, optimizer] : optimizers_) {
        (void)optimizer.set_learning_rate(learning_rate_ > 0.0F ? learning_rate_ : config_learning_rate_);
      }
      if (auto applied = collective::apply_averages(*averages, optimizers_, params_); !applied) {
        return fail(applied.error());
      }
      ++step_;
      phase_ = Phase::idle;
      // The caller's buffers back: the averaged ones (applied above) and the others.
      ReplicaGradients back{{}, samples_, {}};
      const bool mine = !reply.result->shared();
      back.gradients = mine ? std::move(averages->rest) : averages->rest;
      for (auto& [name, values] : averages->dense) back.gradients[name] = mine ? std::move(values) : values;
      for (auto& [name, values] : lent_) back.gradients[name] = std::move(values);
      lent_.clear();
      finish(out, Value::of(std::move(back)));
      return out;
    }
    case Phase::reading: {
      phase_ = back_to_;
      auto* states = reply.result->as<std::map<std::string, ps::Optimizer::State>>();
      if (states == nullptr) return fail(make_error(errc::internal, "replica {}: the PS gave no optimizer states", replica_));
      for (auto& [name, state] : own_states()) (*states)[name] = std::move(state);
      finish(out, Value::of(std::move(*states)));
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
  if (!meet_ || !meet_on_leave_) {
    phase_ = Phase::left;
    finish(out, Value{});
    return out;
  }
  phase_ = Phase::meeting;
  return meet(std::move(out), static_cast<std::uint64_t>(step_));
}

std::map<std::string, ps::Optimizer::State> ReplicaRole::own_states() const {
  std::map<std::string, ps::Optimizer::State> states;
  for (const auto& [name, optimizer] : optimizers_) states.emplace(name, optimizer.state());
  return states;
}

void ReplicaRole::finish(Effects& out, Result<Value> result) {
  out.push_back(Complete{*std::exchange(running_, std::nullopt), std::move(result)});
}

Status add_replica_roles(Mux& mux, const ReplicaConfig& config) {
  if (config.ps) {
    auto client = PsClientRole::create(PsClientConfig{config.replica, config.ps, config.servers, config.pull_via,
                                                      config.call_timeout, config.label, config.ps_restart_wait,
                                                      config.replay_steps});
    if (!client) return client.error();
    if (auto added = mux.add(k_ps, std::move(*client)); !added) return added.error();
  }
  if (config.ar) {
    if (config.replica < 0) {
      return make_error(errc::invalid_argument, "{}: expected a replica id >= 0, got {}", config.label, config.replica);
    }
    auto ar = AllReduceRole::create(AllReduceConfig{config.ar, config.members, static_cast<std::size_t>(config.replica),
                                                    config.job, config.exchange_timeout, config.label,
                                                    config.nccl_role, config.stream_ring ? k_ring : ""});
    if (!ar) return ar.error();
    if (auto added = mux.add(k_ar, std::move(*ar)); !added) return added.error();
    if (config.stream_ring) {
      collective::GroupConfig gc;
      gc.job = config.job + "/ring";
      gc.rank = static_cast<std::size_t>(config.replica);
      gc.members = config.members;
      gc.timeout = config.exchange_timeout;
      if (auto added = mux.add(k_ring, std::make_unique<collective::GroupAllReduceRole>(std::move(gc))); !added) {
        return added.error();
      }
    }
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
