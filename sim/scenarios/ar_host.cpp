#include "sim/scenarios/ar_host.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <utility>

namespace apiary::sim::scenarios {

namespace av = core::averaging;
namespace cc = core::collective;
namespace cps = core::ps;
using core::Effects;
using core::TimePoint;

namespace {

/// The compute timer; every runner's ids lie above it, in (op + 1) << k_op_shift.
constexpr core::TimerId k_compute_timer = 1;
/// A runner uses 2 + 2 * group size ids; 20 bits leave room for any group here.
constexpr int k_op_shift = 20;

void append(Effects& out, Effects more) {
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

Result<std::unique_ptr<ArReplicaHost>> ArReplicaHost::create(ArReplicaSettings settings) {
  if (!settings.plan || !settings.data) {
    return make_error(errc::invalid_argument, "all-reduce replica {}: expected a plan and a data set, got none",
                      settings.rank);
  }
  const auto& plan = *settings.plan;
  if (settings.rank >= plan.replicas.size() || settings.members.size() != plan.replicas.size()) {
    return make_error(errc::invalid_argument,
                      "all-reduce replica: expected a rank below {} and one address per replica, got rank {} and {} "
                      "addresses",
                      plan.replicas.size(), settings.rank, settings.members.size());
  }
  for (const auto& v : plan.variables) {
    if (settings.initial.count(v.name) == 0) {
      return make_error(errc::invalid_argument, "all-reduce replica {}: expected initial values of {}, got none",
                        settings.rank, v.name);
    }
  }
  auto sync = cc::Synchronizer::create(plan);
  if (!sync) return sync.error();
  return std::unique_ptr<ArReplicaHost>(new ArReplicaHost(std::move(settings), std::move(*sync)));
}

ArReplicaHost::ArReplicaHost(ArReplicaSettings settings, cc::Synchronizer sync)
    : settings_(std::move(settings)), sync_(std::move(sync)), params_(settings_.initial) {
  for (const auto& [name, values] : params_) {
    optimizers_.emplace(name, cps::Optimizer(settings_.optimizer, values.size(), 1));
  }
}

std::string ArReplicaHost::handle_of(std::uint64_t op) const {
  return fmt::format("{}/{}::{}", settings_.job, op, av::k_aggregate_part_handle);
}

std::optional<std::uint64_t> ArReplicaHost::op_of(const std::string& handle) const {
  const std::string prefix = settings_.job + "/";
  const std::string suffix = std::string("::") + av::k_aggregate_part_handle;
  if (handle.size() <= prefix.size() + suffix.size() || handle.compare(0, prefix.size(), prefix) != 0 ||
      handle.compare(handle.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  const std::string digits = handle.substr(prefix.size(), handle.size() - prefix.size() - suffix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::strtoull(digits.c_str(), nullptr, 10);
}

std::uint64_t ArReplicaHost::id_base(std::uint64_t op) const { return (op + 1) << k_op_shift; }

std::string ArReplicaHost::names(const std::vector<core::PeerAddr>& peers) const {
  std::string s;
  for (const auto& p : peers) {
    std::size_t rank = 0;
    while (rank < settings_.members.size() && settings_.members[rank] != p) ++rank;
    s += fmt::format("{}rank {} ({})", s.empty() ? "" : ", ", rank, p);
  }
  return s.empty() ? std::string("none") : s;
}

Effects ArReplicaHost::on_start(TimePoint now) { return begin_step(now); }

Effects ArReplicaHost::begin_step(TimePoint now) {
  const auto step = static_cast<std::int64_t>(steps_.size());
  if (step >= settings_.steps) {
    finished_ = true;
    end_ = now;
    return {};
  }
  step_begin_ = now;
  const auto& data = *settings_.data;
  PsReplicaStep record;
  record.step = step;
  record.version = step;
  const auto batch = cps::logistic_batch(data, settings_.plan->replicas.size(), settings_.rank, step, settings_.batch);
  gradients_.clear();
  record.batch_loss = cps::logistic_loss(data, batch, params_, &gradients_);
  if (settings_.full_loss) record.full_loss = cps::logistic_full_loss(data, params_);
  steps_.push_back(record);
  return {core::SetTimer{k_compute_timer, now + settings_.compute}};
}

Effects ArReplicaHost::on_timer(TimePoint now, core::TimerId id) {
  if (error_) return {};
  if (id == k_compute_timer) {
    // One collective per fusion group, each tensor compressed as its synchronizer says.
    auto inputs = sync_.prepare(gradients_);
    if (!inputs) return fail(now, inputs.error());
    inputs_ = std::move(*inputs);
    outputs_.clear();
    return inputs_.empty() ? finish_step(now) : start_op(now);
  }
  if (!runner_ || (id >> k_op_shift) != op_ + 1) return {};
  return advance(now, runner_->on_timer(now, id));
}

Effects ArReplicaHost::start_op(TimePoint now) {
  const auto& in = inputs_[outputs_.size()];
  // A member whose connection broke answers nothing more: fail now, as a gateway would.
  for (std::size_t r = 0; r < settings_.members.size(); ++r) {
    if (r != settings_.rank && down_.count(settings_.members[r]) != 0) {
      return fail(now, make_error(errc::peer_down,
                                  "replica {} at step {} (fusion group {}): expected every member to take part in "
                                  "all-reduce op {} of job {}, but {} went down; the job cannot continue without it",
                                  settings_.rank, steps_.size() - 1, in.group, op_, settings_.job,
                                  names({settings_.members[r]})));
    }
  }
  av::AllReduceConfig c;
  c.group_id = fmt::format("{}/{}", settings_.job, op_);
  c.peers = settings_.members;
  c.self = settings_.rank;
  c.modes.assign(c.peers.size(), av::AveragingMode::node);
  c.weight = static_cast<double>(settings_.batch);
  for (const auto& t : in.tensors) c.tensor_sizes.push_back(static_cast<std::int64_t>(t.size()));
  c.codecs = in.codecs.empty() ? std::vector<pb::CompressionType>{pb::NONE} : in.codecs;
  c.peer_fractions.assign(c.peers.size(), 1.0);
  c.part_size_bytes = settings_.part_size_bytes;
  c.sender_timeout = settings_.timeout;
  c.reducer_timeout = 2 * settings_.timeout;
  c.call_timeout = 4 * settings_.timeout;
  c.handle = handle_of(op_);
  c.id_base = id_base(op_);
  auto runner = av::AllReduceRunner::create(std::move(c), in.tensors);
  if (!runner) return fail(now, runner.error());
  op_tensors_ = in.tensors;
  runner_.emplace(std::move(*runner));
  Effects out = runner_->start(now);
  // Replay the streams that faster members opened before this op began.
  auto held = std::move(held_[op_]);
  held_.erase(op_);
  for (auto& h : held) {
    held_ids_.erase(h.id);
    open_[h.id] = h.from;
    append(out, runner_->on_request(now, h.id, h.from, h.first));
    for (auto& [message, last] : h.messages) {
      if (last || !message.ok()) open_.erase(h.id);
      append(out, runner_->on_request_message(now, h.id, message, last));
    }
  }
  return advance(now, std::move(out));
}

Effects ArReplicaHost::advance(TimePoint now, Effects out) {
  if (!runner_ || !runner_->finished() || error_) return out;
  const av::AllReduceOutcome outcome = runner_->outcome();
  const std::uint64_t op = op_;
  runner_.reset();
  open_.clear();
  ++op_;
  ++done_ops_;
  const auto& in = inputs_[outputs_.size()];
  if (!outcome.status) {
    append(out, fail(now, make_error(outcome.status.error().code, "replica {} at step {} (fusion group {}): {}",
                                     settings_.rank, steps_.size() - 1, in.group, outcome.status.error().message)));
    return out;
  }
  if (!outcome.failed_senders.empty() || !outcome.failed_reducers.empty()) {
    append(out, fail(now, make_error(errc::peer_down,
                                     "replica {} at step {} (fusion group {}): all-reduce op {} of job {}: expected "
                                     "every member to take part, but these failed as reducers: {}; as senders: {} (a "
                                     "member died, or stalled longer than the {} ms timeout)",
                                     settings_.rank, steps_.size() - 1, in.group, op, settings_.job,
                                     names(outcome.failed_reducers), names(outcome.failed_senders),
                                     core::to_seconds(settings_.timeout) * 1e3)));
    return out;
  }
  // The average is the own tensor plus the runner's delta.
  std::vector<std::vector<float>> result = std::move(op_tensors_);
  for (std::size_t t = 0; t < result.size(); ++t) {
    for (std::size_t j = 0; j < result[t].size(); ++j) result[t][j] += outcome.deltas[t][j];
  }
  outputs_.push_back(std::move(result));
  append(out, outputs_.size() < inputs_.size() ? start_op(now) : finish_step(now));
  return out;
}

Effects ArReplicaHost::finish_step(TimePoint now) {
  auto averaged = sync_.assemble(outputs_);
  if (!averaged) return fail(now, averaged.error());
  // Every replica applies the same averaged gradient to its own copy.
  for (auto& [name, values] : params_) {
    if (auto applied = optimizers_.at(name).apply_dense(values, averaged->at(name)); !applied) {
      return fail(now, applied.error());
    }
  }
  steps_.back().time = now - step_begin_;
  return begin_step(now);
}

Effects ArReplicaHost::on_request(TimePoint now, core::RequestId id, const std::string& handle,
                                  const std::string& request) {
  return on_request_from(now, id, handle, core::PeerAddr{}, request);
}

Effects ArReplicaHost::on_request_from(TimePoint now, core::RequestId id, const std::string& handle,
                                       const core::PeerAddr& from, const std::string& request) {
  const auto op = op_of(handle);
  if (!op) {
    return {core::Reply{id,
                        make_error(errc::not_found, "replica {}: expected a part stream of job {}, got a call to '{}'",
                                   settings_.rank, settings_.job, handle),
                        true}};
  }
  if (error_ || finished_ || *op < op_) {
    const std::string why = error_ ? "it failed: " + error_->message : finished_ ? "it finished" : "the op is over";
    return {core::Reply{id,
                        make_error(errc::unavailable, "replica {}: expected a stream of op {} or later, got op {}; {}",
                                   settings_.rank, op_, *op, why),
                        true}};
  }
  if (*op == op_ && runner_) {
    open_[id] = from;
    return advance(now, runner_->on_request(now, id, from, request));
  }
  // An op this replica has not started yet: hold the stream until it does.
  held_ids_[id] = *op;
  held_[*op].push_back(Held{id, from, request, {}});
  return {};
}

Effects ArReplicaHost::on_request_message(TimePoint now, core::RequestId id, const Result<std::string>& message,
                                          bool last) {
  if (auto h = held_ids_.find(id); h != held_ids_.end()) {
    for (auto& held : held_[h->second]) {
      if (held.id == id) held.messages.emplace_back(message, last);
    }
    return {};
  }
  if (open_.count(id) == 0 || !runner_) return {};
  if (last || !message.ok()) open_.erase(id);
  return advance(now, runner_->on_request_message(now, id, message, last));
}

Effects ArReplicaHost::on_response(TimePoint now, core::CallId call, const Result<std::string>& response) {
  if (!runner_ || (call >> k_op_shift) != op_ + 1) return {};
  return advance(now, runner_->on_response(now, call, response));
}

Effects ArReplicaHost::on_message(TimePoint now, core::CallId call, const std::string& message) {
  if (!runner_ || (call >> k_op_shift) != op_ + 1) return {};
  return advance(now, runner_->on_message(now, call, message));
}

Effects ArReplicaHost::peer_down(TimePoint now, const core::PeerAddr& peer) {
  down_.insert(peer);
  if (error_ || finished_) return {};
  for (std::size_t r = 0; r < settings_.members.size(); ++r) {
    if (r == settings_.rank || settings_.members[r] != peer) continue;
    return fail(now, make_error(errc::peer_down,
                                "replica {} at step {}: expected every member to take part in all-reduce op {} of job "
                                "{}, but the connection to {} broke (it went down); the job cannot continue without it",
                                settings_.rank, steps_.size() - 1, op_, settings_.job, names({peer})));
  }
  return {};
}

Effects ArReplicaHost::fail(TimePoint now, Error error) {
  if (error_) return {};
  error_ = std::move(error);
  end_ = now;
  Effects out{core::CancelTimer{k_compute_timer}};
  // Leave the running op (its inbound streams are answered CANCELLED) and refuse the
  // held ones, so that no member waits for this replica.
  if (runner_) append(out, runner_->cancel(now));
  runner_.reset();
  open_.clear();
  for (const auto& [op, held] : held_) {
    for (const auto& h : held) {
      out.push_back(core::Reply{
          h.id, make_error(errc::unavailable, "replica {} failed: {}", settings_.rank, error_->message), true});
    }
  }
  held_.clear();
  held_ids_.clear();
  return out;
}

}  // namespace apiary::sim::scenarios
