#include "sim/scenarios/mixed_host.hpp"

#include <utility>

namespace apiary::sim::scenarios {

namespace cc = core::collective;
namespace cps = core::ps;
using core::Effects;
using core::TimePoint;

namespace {

/// The compute timer; the exchange's timer and call ids lie above k_ar_member_id_base,
/// the PS calls' below it.
constexpr core::TimerId k_compute_timer = 1;

void append(Effects& out, Effects more) {
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

Result<std::unique_ptr<MixedReplicaHost>> MixedReplicaHost::create(MixedReplicaSettings settings) {
  if (!settings.ps_plan || !settings.ar_plan || !settings.data) {
    return make_error(errc::invalid_argument, "mixed replica {}: expected two plans and a data set, got none",
                      settings.replica);
  }
  const auto& ps = *settings.ps_plan;
  const auto& ar = *settings.ar_plan;
  if (settings.replica < 0 || static_cast<std::size_t>(settings.replica) >= ar.replicas.size() ||
      settings.members.size() != ar.replicas.size() || ps.replicas != ar.replicas) {
    return make_error(errc::invalid_argument,
                      "mixed replica: expected a replica id below {}, one address per replica and the same replicas "
                      "in both plans, got id {} and {} addresses",
                      ar.replicas.size(), settings.replica, settings.members.size());
  }
  auto client = PsClient::create(
      PsClientConfig{settings.replica, settings.ps_plan, settings.servers, {}, settings.call_timeout, "mixed replica"});
  if (!client) return client.error();
  auto member = ArMember::create(ArMemberConfig{settings.ar_plan, settings.members,
                                                static_cast<std::size_t>(settings.replica), settings.job,
                                                settings.timeout, settings.optimizer, "mixed replica"},
                                 settings.initial);
  if (!member) return member.error();
  return std::unique_ptr<MixedReplicaHost>(
      new MixedReplicaHost(std::move(settings), std::move(*client), std::move(*member)));
}

MixedReplicaHost::MixedReplicaHost(MixedReplicaSettings settings, PsClient client, ArMember member)
    : settings_(std::move(settings)), client_(std::move(client)), member_(std::move(member)),
      params_(settings_.initial) {}

Effects MixedReplicaHost::on_start(TimePoint now) {
  // A session per PS device, open while this replica trains.
  Effects out = client_.open();
  append(out, start_pull(now));
  return out;
}

Effects MixedReplicaHost::start_pull(TimePoint now) {
  step_begin_ = now;
  auto pulls = client_.pull(down_);
  if (!pulls) return fail(now, pulls.error());
  return std::move(*pulls);
}

Effects MixedReplicaHost::on_response(TimePoint now, core::CallId call, const Result<std::string>& response) {
  if (member_.step().owns_call(call)) return advance(now, member_.step().on_response(now, call, response));
  auto progress = client_.on_response(call, response, finished_ || error_.has_value());
  if (!progress) return fail(now, progress.error());
  if (*progress == PsProgress::pulled) return on_pulled(now);
  if (*progress == PsProgress::pushed) return start_allreduce(now);
  return {};
}

Effects MixedReplicaHost::on_pulled(TimePoint now) {
  auto pulled = client_.replica().parameters();
  if (!pulled) return fail(now, pulled.error());
  for (auto& [name, values] : *pulled) params_[name] = std::move(values);
  if (static_cast<std::int64_t>(steps_.size()) >= settings_.steps) {
    // The final pull: the PS parameters after every step.
    final_version_ = client_.replica().min_version();
    return leave(now);
  }
  const auto& data = *settings_.data;
  PsReplicaStep record;
  record.step = static_cast<std::int64_t>(steps_.size());
  record.version = client_.replica().min_version();
  const auto batch = cps::logistic_batch(data, settings_.ar_plan->replicas.size(),
                                         static_cast<std::size_t>(settings_.replica), record.step, settings_.batch);
  gradients_.clear();
  record.batch_loss = cps::logistic_loss(data, batch, params_, &gradients_);
  if (settings_.full_loss) record.full_loss = cps::logistic_full_loss(data, params_);
  steps_.push_back(record);
  return {core::SetTimer{k_compute_timer, now + settings_.compute}};
}

Effects MixedReplicaHost::on_timer(TimePoint now, core::TimerId id) {
  if (error_) return {};
  if (id == k_compute_timer) return push(now);
  if (!member_.step().owns_timer(id)) return {};
  return advance(now, member_.step().on_timer(now, id));
}

Effects MixedReplicaHost::push(TimePoint now) {
  // The PS variables' gradients: whole tensors, or the rows a sparse one touched.
  std::map<std::string, cps::Gradient> gradients;
  for (const auto& v : settings_.ps_plan->variables) {
    std::size_t width = 1;
    for (std::size_t d = 1; d < v.shape.size(); ++d) width *= static_cast<std::size_t>(v.shape[d]);
    if (v.sparse) {
      gradients.emplace(v.name, cc::touched_rows(gradients_[v.name], width));
    } else {
      gradients.emplace(v.name, gradients_[v.name]);
    }
  }
  auto pushes = client_.push(gradients, static_cast<double>(settings_.batch), down_);
  if (!pushes) return fail(now, pushes.error());
  return std::move(*pushes);
}

Effects MixedReplicaHost::start_allreduce(TimePoint now) {
  // The all-reduced variables only (the step ignores the PS ones): dense ones by fusion
  // group, sparse ones as rows.
  auto begun = member_.begin(now, steps_.size() - 1, gradients_, static_cast<double>(settings_.batch), down_);
  if (!begun) return fail(now, begun.error());
  return advance(now, std::move(*begun));
}

Effects MixedReplicaHost::advance(TimePoint now, Effects out) {
  if (!member_.step().done() || error_) return out;
  if (auto applied = member_.apply(steps_.size() - 1, params_); !applied) {
    append(out, fail(now, applied.error()));
    return out;
  }
  steps_.back().time = now - step_begin_;
  append(out, start_pull(now));
  return out;
}

Effects MixedReplicaHost::on_request(TimePoint now, core::RequestId id, const std::string& handle,
                                     const std::string& request) {
  return on_request_from(now, id, handle, core::PeerAddr{}, request);
}

Effects MixedReplicaHost::on_request_from(TimePoint now, core::RequestId id, const std::string& handle,
                                          const core::PeerAddr&, const std::string& request) {
  return advance(now, member_.on_request(now, id, handle, request));
}

Effects MixedReplicaHost::on_message(TimePoint, core::CallId, const std::string&) { return {}; }

Effects MixedReplicaHost::on_request_message(TimePoint, core::RequestId, const Result<std::string>&, bool) {
  return {};
}

Effects MixedReplicaHost::leave(TimePoint now) {
  finished_ = true;
  end_ = now;
  return client_.leave();
}

Effects MixedReplicaHost::peer_down(TimePoint now, const core::PeerAddr& peer) {
  down_.insert(peer);
  if (error_ || finished_) return {};
  if (auto lost = client_.lost(peer)) return fail(now, std::move(*lost));
  if (auto lost = member_.lost(peer, steps_.size() - 1)) return fail(now, std::move(*lost));
  return {};
}

Effects MixedReplicaHost::fail(TimePoint now, Error error) {
  if (error_) return {};
  error_ = std::move(error);
  end_ = now;
  // Abandon the step, leave every PS session with the reason (the PS devices then fail
  // the synchronous steps that wait for this replica), and leave the running op,
  // refusing every held and later part, so that no member waits for this replica.
  Effects out{core::CancelTimer{k_compute_timer}};
  append(out, client_.cancel(*error_));
  append(out, member_.stop(*error_));
  return out;
}

}  // namespace apiary::sim::scenarios
