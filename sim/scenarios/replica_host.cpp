#include "sim/scenarios/replica_host.hpp"

#include <algorithm>
#include <utility>

#include "core/train/allreduce_role.hpp"

namespace apiary::sim::scenarios {

namespace cps = core::ps;
namespace ct = core::train;
using core::Effects;
using core::TimePoint;

namespace {

/// The trainer's only timer: its compute for the current step is done.
constexpr core::TimerId k_compute_timer = 1;

}  // namespace

Effects LogisticTrainer::ask(const char* method, core::Value args) {
  asked_.emplace(next_op_, method);
  return {core::Ask{next_op_++, "replica", method, std::move(args)}};
}

Effects LogisticTrainer::on(TimePoint now, core::Input input) {
  if (std::holds_alternative<core::Start>(input)) {
    step_begin_ = now;
    Effects out = ask("watch");
    auto pull = ask("pull", core::Value::of(std::move(spare_)));
    out.insert(out.end(), pull.begin(), pull.end());
    return out;
  }
  if (auto* t = std::get_if<core::TimerFired>(&input)) {
    if (t->id != k_compute_timer || error_) return {};
    return ask("push",
               core::Value::of(ct::ReplicaGradients{std::move(gradients_), static_cast<double>(settings_.batch), {}}));
  }
  auto* reply = std::get_if<core::LocalReply>(&input);
  if (reply == nullptr) return {};
  auto it = asked_.find(reply->op);
  if (it == asked_.end()) return {};
  const std::string method = it->second;
  asked_.erase(it);
  if (error_ || finished_) return {};
  if (!reply->result.ok()) return fail(now, reply->result.error());
  if (method == "pull") {
    auto* params = reply->result->as<ct::ReplicaParams>();
    if (params == nullptr) return fail(now, make_error(errc::internal, "replica {}: a pull without parameters", replica_));
    return pulled(now, std::move(*params));
  }
  if (method == "optimizer_states") {
    auto* states = reply->result->as<std::map<std::string, cps::Optimizer::State>>();
    if (states == nullptr) {
      return fail(now, make_error(errc::internal, "replica {}: optimizer states of another type", replica_));
    }
    *settings_.checkpoint = SimCheckpoint{pulled_step_, params_, std::move(*states)};
    return compute(now, pulled_step_, pulled_version_);
  }
  if (method == "push") {
    if (auto* pushed = reply->result->as<ct::ReplicaGradients>()) gradients_ = std::move(pushed->gradients);
    steps_.back().time = now - step_begin_;
    step_begin_ = now;
    return ask("pull", core::Value::of(std::move(spare_)));
  }
  if (method == "leave") {
    finished_ = true;
    end_ = now;
  }
  return {};
}

Effects LogisticTrainer::pulled(TimePoint now, ct::ReplicaParams params) {
  spare_ = std::exchange(params_, std::move(params.params));
  if (params.step >= settings_.steps) {
    // The final pull: the parameters after every step.
    final_version_ = params.version;
    return ask("leave");
  }
  if (settings_.checkpoint && settings_.save_every > 0 && params.step > 0 && params.step % settings_.save_every == 0) {
    pulled_step_ = params.step;
    pulled_version_ = params.version;
    return ask("optimizer_states");
  }
  return compute(now, params.step, params.version);
}

Effects LogisticTrainer::compute(TimePoint now, std::int64_t step, std::int64_t version) {
  const auto& data = *settings_.data;
  PsReplicaStep record;
  record.step = step;
  record.version = version;
  const auto batch = cps::logistic_batch(data, settings_.replicas, static_cast<std::size_t>(replica_), record.step,
                                         settings_.batch);
  record.batch_loss = cps::logistic_loss(data, batch, params_, &gradients_);
  if (settings_.count_touched) {
    const auto& w = gradients_.at(cps::k_logreg_weights);
    record.touched = static_cast<std::size_t>(std::count_if(w.begin(), w.end(), [](float v) { return v != 0.0F; }));
  }
  if (settings_.full_loss) record.full_loss = cps::logistic_full_loss(data, params_);
  steps_.push_back(record);
  return {core::SetTimer{k_compute_timer, now + settings_.compute}};
}

Effects LogisticTrainer::fail(TimePoint now, Error error) {
  error_ = std::move(error);
  end_ = now;
  return {core::CancelTimer{k_compute_timer}};
}

Result<std::unique_ptr<ReplicaHost>> ReplicaHost::create(const ct::ReplicaConfig& config, TrainerSettings settings) {
  if (!settings.data) {
    return make_error(errc::invalid_argument, "{} {}: expected a data set, got none", config.label, config.replica);
  }
  core::Mux mux;
  if (auto st = ct::add_replica_roles(mux, config); !st) return st.error();
  if (auto added = mux.add("trainer", std::make_unique<LogisticTrainer>(config.replica, std::move(settings))); !added) {
    return added.error();
  }
  return std::unique_ptr<ReplicaHost>(new ReplicaHost(std::move(mux), config.replica));
}

ReplicaHost::ReplicaHost(core::Mux mux, std::int32_t id) : RoleHost<core::Mux>(std::move(mux)), id_(id) {
  trainer_ = static_cast<const LogisticTrainer*>(role().find("trainer"));
  allreduce_ = role().find("allreduce");
}

std::uint64_t ReplicaHost::ops() const {
  return allreduce_ != nullptr ? static_cast<const ct::AllReduceRole*>(allreduce_)->ops() : 0;
}

}  // namespace apiary::sim::scenarios
