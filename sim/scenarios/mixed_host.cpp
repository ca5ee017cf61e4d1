#include "sim/scenarios/mixed_host.hpp"

#include <fmt/format.h>

#include <utility>

#include "core/ps/wire.hpp"

namespace apiary::sim::scenarios {

namespace cc = core::collective;
namespace cps = core::ps;
using core::Effects;
using core::TimePoint;

namespace {

/// The compute timer; the exchange's timer and call ids lie above k_ar_member_id_base,
/// the PS calls' below it.
constexpr core::TimerId k_compute_timer = 1;
/// A session lasts as long as training: its deadline is far beyond any run (one year).
constexpr core::Duration k_session_timeout = std::chrono::hours(24 * 365);

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
  for (const auto& device : ps.servers) {
    if (settings.servers.count(device) == 0) {
      return make_error(errc::invalid_argument, "mixed replica {}: expected an address for PS device {}, got none",
                        settings.replica, device);
    }
  }
  auto replica = cps::Replica::create(settings.replica, ps.variables);
  if (!replica) return replica.error();
  auto member = ArMember::create(ArMemberConfig{settings.ar_plan, settings.members,
                                                static_cast<std::size_t>(settings.replica), settings.job,
                                                settings.timeout, settings.optimizer, "mixed replica"},
                                 settings.initial);
  if (!member) return member.error();
  return std::unique_ptr<MixedReplicaHost>(
      new MixedReplicaHost(std::move(settings), std::move(*replica), std::move(*member)));
}

MixedReplicaHost::MixedReplicaHost(MixedReplicaSettings settings, cps::Replica replica, ArMember member)
    : settings_(std::move(settings)), replica_(std::move(replica)), member_(std::move(member)),
      params_(settings_.initial) {}

Effects MixedReplicaHost::on_start(TimePoint now) {
  // A session per PS device, open while this replica trains.
  Effects out;
  pb::PsJoinRequest join;
  join.set_replica(settings_.replica);
  for (const auto& device : settings_.ps_plan->servers) {
    core::Call c = core::unary_call(next_call_, settings_.servers.at(device), cps::k_ps_join_handle,
                                    join.SerializeAsString(), k_session_timeout);
    c.stream = true;
    c.last = false;
    sessions_.emplace(next_call_++, device);
    out.push_back(std::move(c));
  }
  append(out, start_pull(now));
  return out;
}

Effects MixedReplicaHost::start_pull(TimePoint now) {
  step_begin_ = now;
  auto pulls = replica_.start_pull();
  if (!pulls) return fail(now, pulls.error());
  Effects out;
  for (const auto& p : *pulls) {
    const auto& shard = settings_.ps_plan->shards[p.shard];
    // A PS whose connection broke answers nothing more: fail now, as a gateway would.
    if (down_.count(settings_.servers.at(shard.device)) != 0) {
      return fail(now, describe("pull", p.shard, make_error(errc::peer_down, "the connection is closed")));
    }
    pb::PsPullRequest m;
    m.set_shard(shard.config.variable);
    m.set_replica(settings_.replica);
    m.set_step(p.step);
    calls_.emplace(next_call_, std::make_pair(p.shard, true));
    out.push_back(core::unary_call(next_call_++, settings_.servers.at(shard.device), cps::k_ps_pull_handle,
                                   m.SerializeAsString(), settings_.call_timeout));
  }
  return out;
}

Effects MixedReplicaHost::on_response(TimePoint now, core::CallId call, const Result<std::string>& response) {
  if (member_.step().owns_call(call)) return advance(now, member_.step().on_response(now, call, response));
  return on_ps_response(now, call, response);
}

Effects MixedReplicaHost::on_ps_response(TimePoint now, core::CallId call, const Result<std::string>& response) {
  if (auto s = sessions_.find(call); s != sessions_.end()) {
    const std::string device = s->second;
    sessions_.erase(s);
    // A session ending early (the PS refused it, died or broke the connection) ends training.
    if (finished_ || error_) return {};
    const Error e = response.ok() ? make_error(errc::protocol, "the PS ended the session") : response.error();
    return fail(now, make_error(e.code, "replica {}: session with PS {} at {} ended: {}", settings_.replica, device,
                                settings_.servers.at(device), e.message));
  }
  auto it = calls_.find(call);
  if (it == calls_.end() || error_) return {};
  const auto [shard, pull] = it->second;
  calls_.erase(it);
  const char* what = pull ? "pull" : "push";
  if (!response.ok()) return fail(now, describe(what, shard, response.error()));
  if (pull) {
    pb::PsPullResponse m;
    if (!m.ParseFromString(*response)) {
      return fail(now, describe(what, shard, make_error(errc::malformed, "not a PsPullResponse")));
    }
    auto last = replica_.on_pull_reply(shard, cps::from_pb(m));
    if (!last) return fail(now, describe(what, shard, last.error()));
    return *last ? on_pulled(now) : Effects{};
  }
  pb::PsPushResponse m;
  if (!m.ParseFromString(*response)) {
    return fail(now, describe(what, shard, make_error(errc::malformed, "not a PsPushResponse")));
  }
  auto last = replica_.on_push_ack(shard, cps::PushAck{m.replica(), m.step()});
  if (!last) return fail(now, describe(what, shard, last.error()));
  return *last ? start_allreduce(now) : Effects{};
}

Effects MixedReplicaHost::on_pulled(TimePoint now) {
  auto pulled = replica_.parameters();
  if (!pulled) return fail(now, pulled.error());
  for (auto& [name, values] : *pulled) params_[name] = std::move(values);
  if (static_cast<std::int64_t>(steps_.size()) >= settings_.steps) {
    // The final pull: the PS parameters after every step.
    final_version_ = replica_.min_version();
    return leave(now);
  }
  const auto& data = *settings_.data;
  PsReplicaStep record;
  record.step = static_cast<std::int64_t>(steps_.size());
  record.version = replica_.min_version();
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
  auto pushes = replica_.push(gradients, static_cast<double>(settings_.batch));
  if (!pushes) return fail(now, pushes.error());
  Effects out;
  for (const auto& p : *pushes) {
    const auto& shard = settings_.ps_plan->shards[p.shard];
    if (down_.count(settings_.servers.at(shard.device)) != 0) {
      return fail(now, describe("push", p.shard, make_error(errc::peer_down, "the connection is closed")));
    }
    calls_.emplace(next_call_, std::make_pair(p.shard, false));
    out.push_back(core::unary_call(next_call_++, settings_.servers.at(shard.device), cps::k_ps_push_handle,
                                   cps::to_pb(shard.config.variable, p.push).SerializeAsString(),
                                   settings_.call_timeout));
  }
  return out;
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
  Effects out;
  for (const auto& [call, device] : sessions_) out.push_back(core::Send{call, std::string{}, true});
  return out;
}

Effects MixedReplicaHost::peer_down(TimePoint now, const core::PeerAddr& peer) {
  down_.insert(peer);
  if (error_ || finished_) return {};
  for (const auto& [call, flight] : calls_) {
    const auto& shard = settings_.ps_plan->shards[flight.first];
    if (settings_.servers.at(shard.device) == peer) {
      return fail(now, describe(flight.second ? "pull" : "push", flight.first,
                                make_error(errc::peer_down, "the connection to {} broke", peer)));
    }
  }
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
  for (const auto& [call, flight] : calls_) out.push_back(core::Cancel{call, "the replica gave up its step"});
  calls_.clear();
  for (const auto& [call, device] : sessions_) {
    out.push_back(core::Cancel{call, fmt::format("replica {} failed: {}", settings_.replica, error_->message)});
  }
  sessions_.clear();
  append(out, member_.stop(*error_));
  return out;
}

Error MixedReplicaHost::describe(const char* what, std::size_t shard, const Error& e) const {
  const auto& s = settings_.ps_plan->shards[shard];
  return make_error(e.code, "replica {}: {} of shard '{}' (step {}) on PS {} at {} failed: {}", settings_.replica,
                    what, s.config.variable, replica_.step(), s.device, settings_.servers.at(s.device), e.message);
}

}  // namespace apiary::sim::scenarios
