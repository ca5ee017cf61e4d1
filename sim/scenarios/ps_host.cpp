#include "sim/scenarios/ps_host.hpp"

#include <utility>

#include "core/ps/wire.hpp"

namespace apiary::sim::scenarios {

namespace cps = core::ps;
using core::Effects;
using core::TimePoint;

namespace {

/// The only timer of a replica: its compute for the current step is done.
constexpr core::TimerId k_compute_timer = 1;

}  // namespace

// ---- PsReplicaHost ----

Result<std::unique_ptr<PsReplicaHost>> PsReplicaHost::create(PsReplicaSettings settings) {
  if (!settings.plan || !settings.data) {
    return make_error(errc::invalid_argument, "replica {}: expected a plan and a data set, got none", settings.replica);
  }
  const auto& plan = *settings.plan;
  if (settings.replica < 0 || static_cast<std::size_t>(settings.replica) >= plan.replicas.size()) {
    return make_error(errc::invalid_argument, "replica id: expected 0..{} (the plan's replicas), got {}",
                      static_cast<std::int64_t>(plan.replicas.size()) - 1, settings.replica);
  }
  auto client = PsClient::create(PsClientConfig{settings.replica, settings.plan, settings.servers, settings.pull_via,
                                                settings.call_timeout, "replica"});
  if (!client) return client.error();
  return std::unique_ptr<PsReplicaHost>(new PsReplicaHost(std::move(settings), std::move(*client)));
}

PsReplicaHost::PsReplicaHost(PsReplicaSettings settings, PsClient client)
    : settings_(std::move(settings)), client_(std::move(client)) {}

Effects PsReplicaHost::on_start(TimePoint now) {
  // A session per PS process, open while this replica trains.
  Effects out = client_.open();
  auto first = start_pull(now);
  out.insert(out.end(), std::make_move_iterator(first.begin()), std::make_move_iterator(first.end()));
  return out;
}

Effects PsReplicaHost::on_request(TimePoint /*now*/, core::RequestId id, const std::string& handle,
                                  const std::string& /*request*/) {
  return {core::Reply{
      id, make_error(errc::not_found, "replica {}: expected no calls, got one to '{}'", settings_.replica, handle),
      true}};
}

Effects PsReplicaHost::start_pull(TimePoint now) {
  step_begin_ = now;
  auto pulls = client_.pull(down_);
  if (!pulls) return fail(now, pulls.error());
  return std::move(*pulls);
}

Effects PsReplicaHost::on_response(TimePoint now, core::CallId call, const Result<std::string>& response) {
  auto progress = client_.on_response(call, response, finished_ || error_.has_value());
  if (!progress) return fail(now, progress.error());
  if (*progress == PsProgress::pulled) return on_pulled(now);
  if (*progress != PsProgress::pushed) return {};
  steps_.back().time = now - step_begin_;
  return start_pull(now);
}

Effects PsReplicaHost::on_pulled(TimePoint now) {
  auto params = client_.replica().parameters();
  if (!params) return fail(now, params.error());
  if (client_.replica().step() >= settings_.steps) {
    // The final pull: the parameters after every step.
    final_ = std::move(*params);
    final_version_ = client_.replica().min_version();
    return leave(now);
  }
  const auto& data = *settings_.data;
  PsReplicaStep record;
  record.step = client_.replica().step();
  record.version = client_.replica().min_version();
  const auto batch = cps::logistic_batch(data, settings_.plan->replicas.size(),
                                         static_cast<std::size_t>(settings_.replica), record.step, settings_.batch);
  gradients_.clear();
  record.batch_loss = cps::logistic_loss(data, batch, *params, &gradients_);
  if (settings_.full_loss) record.full_loss = cps::logistic_full_loss(data, *params);
  steps_.push_back(record);
  return {core::SetTimer{k_compute_timer, now + settings_.compute}};
}

Effects PsReplicaHost::on_timer(TimePoint now, core::TimerId id) {
  if (id != k_compute_timer || error_) return {};
  return push(now);
}

Effects PsReplicaHost::push(TimePoint now) {
  std::map<std::string, cps::Gradient> gradients(gradients_.begin(), gradients_.end());
  auto pushes = client_.push(gradients, static_cast<double>(settings_.batch), down_);
  if (!pushes) return fail(now, pushes.error());
  return std::move(*pushes);
}

Effects PsReplicaHost::leave(TimePoint now) {
  finished_ = true;
  end_ = now;
  return client_.leave();
}

Effects PsReplicaHost::peer_down(TimePoint now, const core::PeerAddr& peer) {
  down_.insert(peer);
  if (error_ || finished_) return {};
  if (auto lost = client_.lost(peer)) return fail(now, std::move(*lost));
  return {};
}

Effects PsReplicaHost::fail(TimePoint now, Error error) {
  if (error_) return {};
  error_ = std::move(error);
  end_ = now;
  // Abandon the step, and leave every session with the reason: the PS processes then
  // fail the synchronous steps that wait for this replica.
  Effects out = client_.cancel(*error_);
  out.push_back(core::CancelTimer{k_compute_timer});
  return out;
}

}  // namespace apiary::sim::scenarios
