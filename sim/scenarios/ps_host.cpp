#include "sim/scenarios/ps_host.hpp"

#include <fmt/format.h>

#include <utility>

#include "core/ps/wire.hpp"

namespace apiary::sim::scenarios {

namespace cps = core::ps;
using core::Effects;
using core::TimePoint;

namespace {

/// The only timer of a replica: its compute for the current step is done.
constexpr core::TimerId k_compute_timer = 1;
/// A session lasts as long as training: its deadline is far beyond any run (one year).
constexpr core::Duration k_session_timeout = std::chrono::hours(24 * 365);

}  // namespace

// ---- PsServerHost ----

Effects PsServerHost::on_start(TimePoint /*now*/) { return {}; }

Effects PsServerHost::on_request(TimePoint now, core::RequestId id, const std::string& handle,
                                 const std::string& request) {
  return on_request_from(now, id, handle, core::PeerAddr{}, request);
}

Effects PsServerHost::on_request_from(TimePoint now, core::RequestId id, const std::string& handle,
                                      const core::PeerAddr& from, const std::string& request) {
  if (handle == cps::k_ps_join_handle) sessions_[id] = from;
  return server_.on_request(now, id, handle, from, request);
}

Effects PsServerHost::on_response(TimePoint /*now*/, core::CallId /*call*/, const Result<std::string>& /*response*/) {
  return {};  // a PS makes no calls
}

Effects PsServerHost::on_timer(TimePoint /*now*/, core::TimerId /*id*/) { return {}; }

Effects PsServerHost::on_request_message(TimePoint now, core::RequestId id, const Result<std::string>& message,
                                         bool last) {
  if (last || !message.ok()) sessions_.erase(id);
  return server_.on_request_message(now, id, message, last);
}

Effects PsServerHost::peer_down(TimePoint now, const core::PeerAddr& peer) {
  Effects out;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second != peer) {
      ++it;
      continue;
    }
    const core::RequestId id = it->first;
    it = sessions_.erase(it);
    auto fx =
        server_.on_request_message(now, id, make_error(errc::peer_down, "the connection to {} broke", peer), true);
    out.insert(out.end(), std::make_move_iterator(fx.begin()), std::make_move_iterator(fx.end()));
  }
  return out;
}

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
  for (const auto& device : plan.servers) {
    if (settings.servers.count(device) == 0) {
      return make_error(errc::invalid_argument, "replica {}: expected an address for PS device {}, got none",
                        settings.replica, device);
    }
  }
  auto replica = cps::Replica::create(settings.replica, plan.variables);
  if (!replica) return replica.error();
  return std::unique_ptr<PsReplicaHost>(new PsReplicaHost(std::move(settings), std::move(*replica)));
}

PsReplicaHost::PsReplicaHost(PsReplicaSettings settings, cps::Replica replica)
    : settings_(std::move(settings)), replica_(std::move(replica)) {}

Effects PsReplicaHost::on_start(TimePoint now) {
  // A session per PS process, open while this replica trains.
  Effects out;
  pb::PsJoinRequest join;
  join.set_replica(settings_.replica);
  for (const auto& device : settings_.plan->servers) {
    core::Call c = core::unary_call(next_call_, settings_.servers.at(device), cps::k_ps_join_handle, join.SerializeAsString(),
                                    k_session_timeout);
    c.stream = true;
    c.last = false;
    sessions_.emplace(next_call_++, device);
    out.push_back(std::move(c));
  }
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

const core::PeerAddr& PsReplicaHost::target(std::size_t shard, bool pull) const {
  if (pull) {
    if (auto via = settings_.pull_via.find(shard); via != settings_.pull_via.end()) return via->second;
  }
  return settings_.servers.at(settings_.plan->shards[shard].device);
}

void PsReplicaHost::call(Effects& out, std::size_t shard, bool pull, const char* handle, std::string body) {
  const core::PeerAddr& peer = target(shard, pull);
  calls_.emplace(next_call_, InFlight{shard, pull});
  out.push_back(core::unary_call(next_call_++, peer, handle, std::move(body), settings_.call_timeout));
}

Effects PsReplicaHost::start_pull(TimePoint now) {
  step_begin_ = now;
  auto pulls = replica_.start_pull();
  if (!pulls) return fail(now, pulls.error());
  Effects out;
  for (const auto& p : *pulls) {
    // A PS whose connection broke answers nothing more: fail now, as a gateway would.
    if (down_.count(target(p.shard, true)) != 0) {
      return fail(now, describe("pull", p.shard, make_error(errc::peer_down, "the connection is closed")));
    }
    pb::PsPullRequest m;
    m.set_shard(settings_.plan->shards[p.shard].config.variable);
    m.set_replica(settings_.replica);
    m.set_step(p.step);
    call(out, p.shard, true, cps::k_ps_pull_handle, m.SerializeAsString());
  }
  return out;
}

Effects PsReplicaHost::on_response(TimePoint now, core::CallId call, const Result<std::string>& response) {
  if (auto s = sessions_.find(call); s != sessions_.end()) {
    const std::string device = s->second;
    sessions_.erase(s);
    // A session ending early (the PS refused it, died or broke the connection) ends training.
    if (!finished_ && !error_) {
      const Error e = response.ok() ? make_error(errc::protocol, "the PS ended the session") : response.error();
      return fail(now, make_error(e.code, "replica {}: session with PS {} at {} ended: {}", settings_.replica, device,
                                  settings_.servers.at(device), e.message));
    }
    return {};
  }
  auto it = calls_.find(call);
  if (it == calls_.end() || error_) return {};
  const InFlight flight = it->second;
  calls_.erase(it);
  const char* what = flight.pull ? "pull" : "push";
  if (!response.ok()) return fail(now, describe(what, flight.shard, response.error()));
  if (flight.pull) {
    pb::PsPullResponse m;
    if (!m.ParseFromString(*response)) {
      return fail(now, describe(what, flight.shard, make_error(errc::malformed, "not a PsPullResponse")));
    }
    const auto reply = cps::from_pb(m);
    const auto& config = settings_.plan->shards[flight.shard].config;
    // The synchronization contract: a synchronous shard answers step s at version >= s - staleness.
    if (config.sync && reply.version < reply.step - config.staleness) {
      return fail(now, describe(what, flight.shard,
                                make_error(errc::internal, "expected version >= {} (staleness {}), got {}",
                                           reply.step - config.staleness, config.staleness, reply.version)));
    }
    auto last = replica_.on_pull_reply(flight.shard, reply);
    if (!last) return fail(now, describe(what, flight.shard, last.error()));
    return *last ? on_pulled(now) : Effects{};
  }
  pb::PsPushResponse m;
  if (!m.ParseFromString(*response)) {
    return fail(now, describe(what, flight.shard, make_error(errc::malformed, "not a PsPushResponse")));
  }
  auto last = replica_.on_push_ack(flight.shard, cps::PushAck{m.replica(), m.step()});
  if (!last) return fail(now, describe(what, flight.shard, last.error()));
  if (!*last) return {};
  steps_.back().time = now - step_begin_;
  return start_pull(now);
}

Effects PsReplicaHost::on_pulled(TimePoint now) {
  auto params = replica_.parameters();
  if (!params) return fail(now, params.error());
  if (replica_.step() >= settings_.steps) {
    // The final pull: the parameters after every step.
    final_ = std::move(*params);
    final_version_ = replica_.min_version();
    return leave(now);
  }
  const auto& data = *settings_.data;
  PsReplicaStep record;
  record.step = replica_.step();
  record.version = replica_.min_version();
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
  auto pushes = replica_.push(gradients, static_cast<double>(settings_.batch));
  if (!pushes) return fail(now, pushes.error());
  Effects out;
  for (const auto& p : *pushes) {
    if (down_.count(target(p.shard, false)) != 0) {
      return fail(now, describe("push", p.shard, make_error(errc::peer_down, "the connection is closed")));
    }
    call(out, p.shard, false, cps::k_ps_push_handle,
         cps::to_pb(settings_.plan->shards[p.shard].config.variable, p.push).SerializeAsString());
  }
  return out;
}

Effects PsReplicaHost::leave(TimePoint now) {
  finished_ = true;
  end_ = now;
  Effects out;
  for (const auto& [call, device] : sessions_) out.push_back(core::Send{call, std::string{}, true});
  return out;
}

Effects PsReplicaHost::peer_down(TimePoint now, const core::PeerAddr& peer) {
  down_.insert(peer);
  if (error_ || finished_) return {};
  for (const auto& [call, flight] : calls_) {
    if (target(flight.shard, flight.pull) == peer) {
      return fail(now, describe(flight.pull ? "pull" : "push", flight.shard,
                                make_error(errc::peer_down, "the connection to {} broke", peer)));
    }
  }
  return {};
}

Effects PsReplicaHost::fail(TimePoint now, Error error) {
  if (error_) return {};
  error_ = std::move(error);
  end_ = now;
  // Abandon the step, and leave every session with the reason: the PS processes then
  // fail the synchronous steps that wait for this replica.
  Effects out;
  for (const auto& [call, flight] : calls_) out.push_back(core::Cancel{call, "the replica gave up its step"});
  calls_.clear();
  for (const auto& [call, device] : sessions_) {
    out.push_back(core::Cancel{call, fmt::format("replica {} failed: {}", settings_.replica, error_->message)});
  }
  sessions_.clear();
  out.push_back(core::CancelTimer{k_compute_timer});
  return out;
}

Error PsReplicaHost::describe(const char* what, std::size_t shard, const Error& e) const {
  const auto& s = settings_.plan->shards[shard];
  const auto via = settings_.pull_via.find(shard);
  const std::string proxy =
      std::string(what) == "pull" && via != settings_.pull_via.end() ? " through the proxy " + via->second : "";
  return make_error(e.code, "replica {}: {} of shard '{}' (step {}) on PS {} at {}{} failed: {}", settings_.replica,
                    what, s.config.variable, replica_.step(), s.device, settings_.servers.at(s.device), proxy,
                    e.message);
}

}  // namespace apiary::sim::scenarios
