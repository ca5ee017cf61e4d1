#include "sim/scenarios/ps_client.hpp"

#include <fmt/format.h>

#include <utility>

#include "core/ps/wire.hpp"

namespace apiary::sim::scenarios {

namespace cps = core::ps;

namespace {

/// A session lasts as long as training: its deadline is far beyond any run (one year).
constexpr core::Duration k_session_timeout = std::chrono::hours(24 * 365);

}  // namespace

Result<PsClient> PsClient::create(PsClientConfig config) {
  for (const auto& device : config.plan->servers) {
    if (config.servers.count(device) == 0) {
      return make_error(errc::invalid_argument, "{} {}: expected an address for PS device {}, got none", config.label,
                        config.replica, device);
    }
  }
  auto replica = cps::Replica::create(config.replica, config.plan->variables);
  if (!replica) return replica.error();
  return PsClient(std::move(config), std::move(*replica));
}

PsClient::PsClient(PsClientConfig config, cps::Replica replica)
    : config_(std::move(config)), replica_(std::move(replica)) {}

core::Effects PsClient::open() {
  core::Effects out;
  pb::PsJoinRequest join;
  join.set_replica(config_.replica);
  for (const auto& device : config_.plan->servers) {
    core::Call c = core::unary_call(next_call_, config_.servers.at(device), cps::k_ps_join_handle,
                                    join.SerializeAsString(), k_session_timeout);
    c.stream = true;
    c.last = false;
    sessions_.emplace(next_call_++, device);
    out.push_back(std::move(c));
  }
  return out;
}

const core::PeerAddr& PsClient::target(std::size_t shard, bool pull) const {
  if (pull) {
    if (auto via = config_.pull_via.find(shard); via != config_.pull_via.end()) return via->second;
  }
  return config_.servers.at(config_.plan->shards[shard].device);
}

Status PsClient::call(core::Effects& out, std::size_t shard, bool pull, const char* handle, std::string body,
                      const std::set<core::PeerAddr>& down) {
  const core::PeerAddr& peer = target(shard, pull);
  // A peer whose connection broke answers nothing more: fail now, as a gateway would.
  if (down.count(peer) != 0) {
    return describe(pull ? "pull" : "push", shard, make_error(errc::peer_down, "the connection is closed"));
  }
  calls_.emplace(next_call_, InFlight{shard, pull});
  out.push_back(core::unary_call(next_call_++, peer, handle, std::move(body), config_.call_timeout));
  return ok_status();
}

Result<core::Effects> PsClient::pull(const std::set<core::PeerAddr>& down) {
  auto pulls = replica_.start_pull();
  if (!pulls) return pulls.error();
  core::Effects out;
  for (const auto& p : *pulls) {
    pb::PsPullRequest m;
    m.set_shard(config_.plan->shards[p.shard].config.variable);
    m.set_replica(config_.replica);
    m.set_step(p.step);
    if (auto s = call(out, p.shard, true, cps::k_ps_pull_handle, m.SerializeAsString(), down); !s) return s.error();
  }
  return out;
}

Result<core::Effects> PsClient::push(const std::map<std::string, cps::Gradient>& gradients, double weight,
                                     const std::set<core::PeerAddr>& down) {
  auto pushes = replica_.push(gradients, weight);
  if (!pushes) return pushes.error();
  core::Effects out;
  for (const auto& p : *pushes) {
    auto body = cps::to_pb(config_.plan->shards[p.shard].config.variable, p.push).SerializeAsString();
    if (auto s = call(out, p.shard, false, cps::k_ps_push_handle, std::move(body), down); !s) return s.error();
  }
  return out;
}

Result<PsProgress> PsClient::on_response(core::CallId call, const Result<std::string>& response, bool stopped) {
  if (auto s = sessions_.find(call); s != sessions_.end()) {
    const std::string device = s->second;
    sessions_.erase(s);
    // A session ending early (the PS refused it, died or broke the connection) ends training.
    if (stopped) return PsProgress::none;
    const Error e = response.ok() ? make_error(errc::protocol, "the PS ended the session") : response.error();
    return make_error(e.code, "replica {}: session with PS {} at {} ended: {}", config_.replica, device,
                      config_.servers.at(device), e.message);
  }
  auto it = calls_.find(call);
  if (it == calls_.end() || stopped) return PsProgress::none;
  const InFlight flight = it->second;
  calls_.erase(it);
  const char* what = flight.pull ? "pull" : "push";
  if (!response.ok()) return describe(what, flight.shard, response.error());
  if (flight.pull) {
    pb::PsPullResponse m;
    if (!m.ParseFromString(*response)) {
      return describe(what, flight.shard, make_error(errc::malformed, "not a PsPullResponse"));
    }
    const auto reply = cps::from_pb(m);
    const auto& config = config_.plan->shards[flight.shard].config;
    // The synchronization contract: a synchronous shard answers step s at version >= s - staleness.
    if (config.sync && reply.version < reply.step - config.staleness) {
      return describe(what, flight.shard,
                      make_error(errc::internal, "expected version >= {} (staleness {}), got {}",
                                 reply.step - config.staleness, config.staleness, reply.version));
    }
    auto last = replica_.on_pull_reply(flight.shard, reply);
    if (!last) return describe(what, flight.shard, last.error());
    return *last ? PsProgress::pulled : PsProgress::none;
  }
  pb::PsPushResponse m;
  if (!m.ParseFromString(*response)) {
    return describe(what, flight.shard, make_error(errc::malformed, "not a PsPushResponse"));
  }
  auto last = replica_.on_push_ack(flight.shard, cps::PushAck{m.replica(), m.step()});
  if (!last) return describe(what, flight.shard, last.error());
  return *last ? PsProgress::pushed : PsProgress::none;
}

std::optional<Error> PsClient::lost(const core::PeerAddr& peer) const {
  for (const auto& [call, flight] : calls_) {
    if (target(flight.shard, flight.pull) == peer) {
      return describe(flight.pull ? "pull" : "push", flight.shard,
                      make_error(errc::peer_down, "the connection to {} broke", peer));
    }
  }
  return std::nullopt;
}

core::Effects PsClient::leave() const {
  core::Effects out;
  for (const auto& [call, device] : sessions_) out.push_back(core::Send{call, std::string{}, true});
  return out;
}

core::Effects PsClient::cancel(const Error& why) {
  core::Effects out;
  for (const auto& [call, flight] : calls_) out.push_back(core::Cancel{call, "the replica gave up its step"});
  calls_.clear();
  for (const auto& [call, device] : sessions_) {
    out.push_back(core::Cancel{call, fmt::format("replica {} failed: {}", config_.replica, why.message)});
  }
  sessions_.clear();
  return out;
}

Error PsClient::describe(const char* what, std::size_t shard, const Error& e) const {
  const auto& s = config_.plan->shards[shard];
  const auto via = config_.pull_via.find(shard);
  const std::string proxy =
      std::string(what) == "pull" && via != config_.pull_via.end() ? " through the proxy " + via->second : "";
  return make_error(e.code, "replica {}: {} of shard '{}' (step {}) on PS {} at {}{} failed: {}", config_.replica, what,
                    s.config.variable, replica_.step(), s.device, config_.servers.at(s.device), proxy, e.message);
}

}  // namespace apiary::sim::scenarios
