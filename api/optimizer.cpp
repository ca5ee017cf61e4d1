#include "api/optimizer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include <msgpack.hpp>

#include "api/startup.hpp"
#include "core/dht/msgpack_value.hpp"
#include "core/optim/epoch.hpp"
#include "messages/log/log.hpp"

namespace apiary {

namespace {

/// The state's metadata: msgpack of the epoch.
std::string pack_epoch(std::int64_t epoch) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, epoch);
  return std::string(buffer.data(), buffer.size());
}

Result<std::int64_t> unpack_epoch(const std::string& metadata) {
  auto handle = core::dht::unpack_one(metadata);
  if (!handle) return handle.error();
  const msgpack::object& o = handle->get();
  if (o.type == msgpack::type::POSITIVE_INTEGER) return static_cast<std::int64_t>(o.via.u64);
  return make_error(errc::malformed, "expected a training state whose metadata is its epoch (a msgpack "
                                     "non-negative integer), got msgpack type {}", static_cast<int>(o.type));
}

Status check(const OptimizerOptions& o) {
  if (o.run_id.empty()) return make_error(errc::invalid_argument, "expected a run_id, got an empty one");
  if (o.params.empty()) return make_error(errc::invalid_argument, "expected at least one parameter tensor");
  for (std::size_t t = 0; t < o.params.size(); ++t) {
    if (o.params[t].empty()) return make_error(errc::invalid_argument, "expected parameter tensor {} non-empty", t);
  }
  if (o.average_state_every < 1) {
    return make_error(errc::invalid_argument, "expected average_state_every >= 1, got {}", o.average_state_every);
  }
  if (!(o.matchmaking_time > 0) || !(o.averaging_timeout > 0) || !(o.load_state_timeout > 0)) {
    return make_error(errc::invalid_argument, "expected positive matchmaking_time, averaging_timeout and "
                                              "load_state_timeout, got {}, {}, {}",
                      o.matchmaking_time, o.averaging_timeout, o.load_state_timeout);
  }
  if (!o.step) {
    if (auto valid = core::ps::validate(o.inner); !valid) return valid;
  }
  core::optim::ProgressConfig tracker = o.tracker;
  tracker.client_mode = o.client_mode;
  return tracker.validate();
}

}  // namespace

Result<std::unique_ptr<Optimizer>> Optimizer::start(Dht& dht, OptimizerOptions options) {
  const api::CafThreadRelease released;
  if (auto valid = check(options); !valid) return valid.error();
  std::unique_ptr<Optimizer> opt(new Optimizer());
  opt->options_ = std::move(options);
  const OptimizerOptions& o = opt->options_;
  opt->params_ = o.params;
  for (const auto& p : opt->params_) {
    opt->acc_.emplace_back(p.size(), 0.0f);
    if (!o.step) opt->inner_.emplace_back(o.inner, p.size(), 1);
  }
  ProgressTrackerOptions tracking;
  tracking.run_id = o.run_id;
  tracking.tracker = o.tracker;
  tracking.tracker.client_mode = o.client_mode;
  tracking.owner_key = o.owner_key;
  auto tracker = ProgressTracker::start(dht, std::move(tracking));
  if (!tracker) return tracker.error();
  opt->tracker_ = std::move(*tracker);

  AveragerOptions common;
  common.mode = o.client_mode ? core::averaging::AveragingMode::client : core::averaging::AveragingMode::node;
  common.target_group_size = o.target_group_size;
  common.min_matchmaking_time = o.matchmaking_time;
  common.request_timeout = o.request_timeout;
  AveragerOptions grads = common;
  grads.prefix = o.run_id + "_grad_averager";
  grads.tensors = opt->acc_;
  grads.codecs = {o.grad_compression};
  auto grad_averager = Averager::start(dht, std::move(grads));
  if (!grad_averager) return grad_averager.error();
  opt->grads_ = std::move(*grad_averager);
  AveragerOptions state = common;
  state.prefix = o.run_id + "_state_averager";
  state.tensors = opt->state_tensors();
  state.codecs = {o.state_compression};
  state.state_codecs = {o.state_compression};
  if (!o.client_mode) state.state_sharing_priority = 0.0;  // a client cannot serve downloads
  auto state_averager = Averager::start(dht, std::move(state));
  if (!state_averager) return state_averager.error();
  opt->state_ = std::move(*state_averager);
  opt->state_->set_state_metadata(pack_epoch(0));
  return opt;
}

Optimizer::~Optimizer() {
  if (scheduled_ && grads_) {
    grads_->cancel();
    scheduled_->wait_for(std::chrono::seconds(5));
  }
}

std::vector<std::vector<float>> Optimizer::state_tensors() const {
  std::vector<std::vector<float>> out = params_;
  for (const auto& inner : inner_) {
    if (!inner.slot_m().empty()) out.push_back(inner.slot_m());
  }
  for (const auto& inner : inner_) {
    if (!inner.slot_v().empty()) out.push_back(inner.slot_v());
  }
  return out;
}

Status Optimizer::take_state(const std::vector<std::vector<float>>& tensors) {
  const std::size_t n = params_.size();
  const std::size_t with_m = inner_.empty() || inner_[0].slot_m().empty() ? 0 : n;
  const std::size_t with_v = inner_.empty() || inner_[0].slot_v().empty() ? 0 : n;
  if (tensors.size() != n + with_m + with_v) {
    return make_error(errc::invalid_argument, "expected a training state of {} tensors, got {}", n + with_m + with_v,
                      tensors.size());
  }
  for (std::size_t t = 0; t < n; ++t) {
    if (tensors[t].size() != params_[t].size()) {
      return make_error(errc::invalid_argument, "expected parameter tensor {} of {} values, got {}", t,
                        params_[t].size(), tensors[t].size());
    }
  }
  for (std::size_t t = 0; t < inner_.size(); ++t) {
    core::ps::Optimizer::State slots = inner_[t].state();
    if (with_m) slots.m = tensors[n + t];
    if (with_v) slots.v = tensors[n + with_m + t];
    if (auto restored = inner_[t].restore(std::move(slots)); !restored) return restored;
  }
  for (std::size_t t = 0; t < n; ++t) params_[t] = tensors[t];
  return ok_status();
}

Status Optimizer::publish_state() {
  auto tensors = state_tensors();
  state_->with_tensors([&](std::vector<std::vector<float>>& held) { held = std::move(tensors); });
  state_->set_state_metadata(pack_epoch(epoch_));
  if (options_.client_mode) return ok_status();
  return state_->set_state_sharing_priority(static_cast<double>(epoch_));
}

Result<OptimizerStep> Optimizer::step(const std::vector<std::vector<float>>& grads, std::int64_t batch_size) {
  if (batch_size <= 0) return make_error(errc::invalid_argument, "expected batch_size > 0, got {}", batch_size);
  if (grads.size() != params_.size()) {
    return make_error(errc::invalid_argument, "expected {} gradient tensors (one per parameter), got {}",
                      params_.size(), grads.size());
  }
  for (std::size_t t = 0; t < grads.size(); ++t) {
    if (grads[t].size() != params_[t].size()) {
      return make_error(errc::invalid_argument, "expected gradient {} of {} values, got {}", t, params_[t].size(),
                        grads[t].size());
    }
  }
  OptimizerStep out;
  auto seen = tracker_->look();
  if (!seen) return seen.error();
  const bool fetched = seen->fetched_this_epoch;
  const bool behind = core::optim::should_load_state(epoch_, seen->global.epoch, check_sync_, fetched);
  if (check_sync_ && fetched) check_sync_ = false;
  if (behind) {
    auto loaded = load_state_from_peers();
    if (!loaded) return loaded.error();
    out.loaded_state = *loaded;
    return out;
  }
  const auto w = static_cast<float>(batch_size);
  for (std::size_t t = 0; t < grads.size(); ++t) {
    for (std::size_t i = 0; i < grads[t].size(); ++i) acc_[t][i] += w * grads[t][i];
  }
  samples_ += batch_size;
  auto progress = tracker_->report(epoch_, samples_);
  if (!progress) return progress.error();
  const double eta = progress->estimated_next_update_time - Dht::now();
  if (core::optim::should_schedule(eta, options_.matchmaking_time, progress->global.num_peers, scheduled_.has_value())) {
    AveragerStepOptions round;
    round.require_trigger = true;
    round.scheduled_in = std::max(0.0, eta);
    round.timeout = options_.averaging_timeout + round.scheduled_in;
    scheduled_ = grads_->step(round);
  }
  if (!progress->ready_to_update_epoch) return out;
  return end_epoch(*progress);
}

Result<OptimizerStep> Optimizer::end_epoch(const ProgressSnapshot& progress) {
  OptimizerStep out;
  out.new_epoch = true;
  out.group_size = 1;
  std::vector<std::vector<float>> averaged = acc_;
  const float scale = samples_ > 0 ? 1.0f / static_cast<float>(samples_) : 0.0f;
  for (auto& tensor : averaged) {
    for (float& v : tensor) v *= scale;
  }
  if (progress.global.num_peers > 1) {
    if (!scheduled_) {
      AveragerStepOptions round;
      round.require_trigger = true;
      round.timeout = options_.averaging_timeout;
      scheduled_ = grads_->step(round);
    }
    grads_->with_tensors([&](std::vector<std::vector<float>>& held) { held = averaged; });
    (void)grads_->set_weight(static_cast<double>(samples_));
    grads_->trigger();
    const auto patience = std::chrono::duration<double>(options_.averaging_timeout + options_.matchmaking_time);
    if (scheduled_->wait_for(patience) != std::future_status::ready) {
      grads_->cancel();
      scheduled_->wait_for(std::chrono::seconds(5));
    } else if (auto report = scheduled_->get(); report) {
      averaged = grads_->tensors();
      out.group_size = report->peers.size();
    } else {
      log::process_logger().log(log::Level::warn, "optimizer.grad_round_failed", "run", options_.run_id, "epoch",
                                epoch_, "error", report.error().what());
    }
  } else if (scheduled_) {
    grads_->cancel();
    scheduled_->wait_for(std::chrono::seconds(5));
  }
  scheduled_.reset();
  if (options_.step) {
    options_.step(params_, averaged, epoch_);
  } else {
    for (std::size_t t = 0; t < params_.size(); ++t) {
      if (auto applied = inner_[t].apply_dense(params_[t], averaged[t]); !applied) return applied.error();
    }
  }
  const std::int64_t next = core::optim::next_epoch(epoch_, progress.global.epoch);
  if (core::optim::should_average_state(next, options_.average_state_every, progress.global.num_peers)) {
    auto tensors = state_tensors();
    state_->with_tensors([&](std::vector<std::vector<float>>& held) { held = std::move(tensors); });
    AveragerStepOptions round;
    round.timeout = options_.averaging_timeout;
    auto report = state_->step(round).get();
    if (report) {
      if (auto taken = take_state(state_->tensors()); !taken) return taken.error();
      out.state_averaged = true;
    } else {
      log::process_logger().log(log::Level::warn, "optimizer.state_round_failed", "run", options_.run_id, "epoch",
                                epoch_, "error", report.error().what());
    }
  }
  ++epoch_;
  for (auto& tensor : acc_) std::fill(tensor.begin(), tensor.end(), 0.0f);
  samples_ = 0;
  check_sync_ = true;
  if (auto moved = tracker_->update_epoch(epoch_); !moved) return moved.error();
  if (auto published = publish_state(); !published) return published.error();
  return out;
}

Result<bool> Optimizer::load_state_from_peers() {
  if (scheduled_) {
    grads_->cancel();
    scheduled_->wait_for(std::chrono::seconds(5));
    scheduled_.reset();
  }
  auto loaded = state_->load_state_from_peers(options_.load_state_timeout).get();
  if (!loaded) {
    if (loaded.error().code == errc::not_found || loaded.error().code == errc::unavailable) {
      log::process_logger().log(log::Level::warn, "optimizer.no_state", "run", options_.run_id, "error",
                                loaded.error().what());
      return false;
    }
    return loaded.error();
  }
  auto epoch = unpack_epoch(loaded->metadata);
  if (!epoch) return epoch.error();
  if (*epoch < epoch_) {
    log::process_logger().log(log::Level::warn, "optimizer.donor_behind", "run", options_.run_id, "donor_epoch",
                              *epoch, "epoch", epoch_);
    return false;
  }
  if (auto taken = take_state(state_->tensors()); !taken) return taken.error();
  epoch_ = *epoch;
  auto seen = tracker_->look();
  if (seen && seen->global.epoch - 1 <= epoch_ && epoch_ < seen->global.epoch) epoch_ = seen->global.epoch;
  for (auto& tensor : acc_) std::fill(tensor.begin(), tensor.end(), 0.0f);
  samples_ = 0;
  check_sync_ = false;
  if (auto reported = tracker_->report(epoch_, 0); !reported) return reported.error();
  if (auto published = publish_state(); !published) return published.error();
  return true;
}

}  // namespace apiary
