#include "sim/scenarios/ar_host.hpp"

#include <fmt/format.h>

#include <utility>

namespace apiary::sim::scenarios {

namespace cc = core::collective;
namespace cps = core::ps;
using core::Effects;
using core::TimePoint;

namespace {

/// The compute timer; the exchange's ids lie above it, from k_exchange_base.
constexpr core::TimerId k_compute_timer = 1;
constexpr std::uint64_t k_exchange_base = std::uint64_t{1} << 20;

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
  cc::ExchangeConfig ec;
  ec.peers = settings.members;
  ec.self = settings.rank;
  ec.handle = settings.job + "::Collective.rpc_exchange";
  ec.id_base = k_exchange_base;
  ec.timeout = settings.timeout;
  auto step = cc::ArStep::create(plan, std::move(ec));
  if (!step) return step.error();
  return std::unique_ptr<ArReplicaHost>(new ArReplicaHost(std::move(settings), std::move(*step)));
}

ArReplicaHost::ArReplicaHost(ArReplicaSettings settings, cc::ArStep step)
    : settings_(std::move(settings)), step_(std::move(step)), params_(settings_.initial) {
  for (const auto& [name, values] : params_) {
    std::size_t width = 1;
    for (const auto& sp : settings_.plan->sparse) width = sp.name == name ? sp.row_width : width;
    optimizers_.emplace(name, cps::Optimizer(settings_.optimizer, values.size(), width));
  }
}

std::string ArReplicaHost::handle() const { return settings_.job + "::Collective.rpc_exchange"; }

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
    // A member whose connection broke answers nothing more: fail now, as a gateway would.
    if (auto peer = step_.first_down(down_)) {
      return fail(now, make_error(errc::peer_down,
                                  "replica {} at step {}: expected every member to take part in collective op "
                                  "{} of job {}, but {} went down; the job cannot continue without it",
                                  settings_.rank, steps_.size() - 1, step_.ops(), settings_.job,
                                  step_.name_of(*peer)));
    }
    return advance(now, step_.begin(now, gradients_, static_cast<double>(settings_.batch)));
  }
  if (!step_.owns_timer(id)) return {};
  return advance(now, step_.on_timer(now, id));
}

Effects ArReplicaHost::advance(TimePoint now, Effects out) {
  if (!step_.done() || error_) return out;
  auto averaged = step_.take();
  if (!averaged) {
    append(out, fail(now, make_error(averaged.error().code, "replica {} at step {}: {}", settings_.rank,
                                     steps_.size() - 1, averaged.error().message)));
    return out;
  }
  // Every replica applies the same averaged gradient to its own copy (sparse ones to the
  // touched rows only).
  if (auto applied = cc::apply_averages(*averaged, optimizers_, params_); !applied) {
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
  if (handle != this->handle()) {
    return {core::Reply{id,
                        make_error(errc::not_found, "replica {}: expected a call to {}, got a call to '{}'",
                                   settings_.rank, this->handle(), handle),
                        true}};
  }
  return advance(now, step_.on_request(now, id, request));
}

Effects ArReplicaHost::on_request_message(TimePoint, core::RequestId, const Result<std::string>&, bool) { return {}; }

Effects ArReplicaHost::on_response(TimePoint now, core::CallId call, const Result<std::string>& response) {
  if (!step_.owns_call(call)) return {};
  return advance(now, step_.on_response(now, call, response));
}

Effects ArReplicaHost::on_message(TimePoint, core::CallId, const std::string&) { return {}; }

Effects ArReplicaHost::peer_down(TimePoint now, const core::PeerAddr& peer) {
  down_.insert(peer);
  if (error_ || finished_) return {};
  for (std::size_t r = 0; r < settings_.members.size(); ++r) {
    if (r == settings_.rank || settings_.members[r] != peer) continue;
    return fail(now, make_error(errc::peer_down,
                                "replica {} at step {}: expected every member to take part in collective op {} of job "
                                "{}, but the connection to {} broke (it went down); the job cannot continue without it",
                                settings_.rank, steps_.size() - 1, step_.ops(), settings_.job, step_.name_of(peer)));
  }
  return {};
}

Effects ArReplicaHost::fail(TimePoint now, Error error) {
  if (error_) return {};
  error_ = std::move(error);
  end_ = now;
  Effects out{core::CancelTimer{k_compute_timer}};
  // Leave the running op and refuse every held and later part, so that no member waits
  // for this replica.
  append(out, step_.stop(make_error(errc::unavailable, "replica {} failed: {}", settings_.rank, error_->message)));
  return out;
}

}  // namespace apiary::sim::scenarios
