#include "sim/scenarios/ar_host.hpp"

#include <fmt/format.h>

#include <utility>

namespace apiary::sim::scenarios {

namespace cps = core::ps;
using core::Effects;
using core::TimePoint;

namespace {

/// The compute timer; the exchange's ids lie above it, from k_ar_member_id_base.
constexpr core::TimerId k_compute_timer = 1;

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
  auto member = ArMember::create(ArMemberConfig{settings.plan, settings.members, settings.rank, settings.job,
                                                settings.timeout, settings.optimizer, "all-reduce replica"},
                                 settings.initial);
  if (!member) return member.error();
  return std::unique_ptr<ArReplicaHost>(new ArReplicaHost(std::move(settings), std::move(*member)));
}

ArReplicaHost::ArReplicaHost(ArReplicaSettings settings, ArMember member)
    : settings_(std::move(settings)), member_(std::move(member)), params_(settings_.initial) {}

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
    auto begun = member_.begin(now, steps_.size() - 1, gradients_, static_cast<double>(settings_.batch), down_);
    if (!begun) return fail(now, begun.error());
    return advance(now, std::move(*begun));
  }
  if (!member_.step().owns_timer(id)) return {};
  return advance(now, member_.step().on_timer(now, id));
}

Effects ArReplicaHost::advance(TimePoint now, Effects out) {
  if (!member_.step().done() || error_) return out;
  if (auto applied = member_.apply(steps_.size() - 1, params_); !applied) {
    append(out, fail(now, applied.error()));
    return out;
  }
  steps_.back().time = now - step_begin_;
  append(out, begin_step(now));
  return out;
}

Effects ArReplicaHost::on_request(TimePoint now, core::RequestId id, const std::string& handle,
                                  const std::string& request) {
  return on_request_from(now, id, handle, core::PeerAddr{}, request);
}

Effects ArReplicaHost::on_request_from(TimePoint now, core::RequestId id, const std::string& handle,
                                       const core::PeerAddr&, const std::string& request) {
  return advance(now, member_.on_request(now, id, handle, request));
}

Effects ArReplicaHost::on_request_message(TimePoint, core::RequestId, const Result<std::string>&, bool) { return {}; }

Effects ArReplicaHost::on_response(TimePoint now, core::CallId call, const Result<std::string>& response) {
  if (!member_.step().owns_call(call)) return {};
  return advance(now, member_.step().on_response(now, call, response));
}

Effects ArReplicaHost::on_message(TimePoint, core::CallId, const std::string&) { return {}; }

Effects ArReplicaHost::peer_down(TimePoint now, const core::PeerAddr& peer) {
  down_.insert(peer);
  if (error_ || finished_) return {};
  if (auto lost = member_.lost(peer, steps_.size() - 1)) return fail(now, std::move(*lost));
  return {};
}

Effects ArReplicaHost::fail(TimePoint now, Error error) {
  if (error_) return {};
  error_ = std::move(error);
  end_ = now;
  Effects out{core::CancelTimer{k_compute_timer}};
  // Leave the running op and refuse every held and later part, so that no member waits
  // for this replica.
  append(out, member_.stop(*error_));
  return out;
}

}  // namespace apiary::sim::scenarios
