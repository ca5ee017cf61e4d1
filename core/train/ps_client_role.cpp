#include "core/train/ps_client_role.hpp"

#include <fmt/format.h>

#include <utility>

#include "core/ps/wire.hpp"

namespace apiary::core::train {

namespace {

/// A session lasts as long as training: its deadline is far beyond any run (one year).
constexpr Duration k_session_timeout = std::chrono::hours(24 * 365);

constexpr const char* k_name = "the PS client";

}  // namespace

Result<std::unique_ptr<PsClientRole>> PsClientRole::create(PsClientConfig config) {
  if (!config.plan) return make_error(errc::invalid_argument, "{} {}: expected a PS plan, got none", config.label, config.replica);
  for (const auto& device : config.plan->servers) {
    if (config.servers.count(device) == 0) {
      return make_error(errc::invalid_argument, "{} {}: expected an address for PS device {}, got none", config.label,
                        config.replica, device);
    }
  }
  auto replica = ps::Replica::create(config.replica, config.plan->variables);
  if (!replica) return replica.error();
  return std::unique_ptr<PsClientRole>(new PsClientRole(std::move(config), std::move(*replica)));
}

Effects PsClientRole::on(TimePoint /*now*/, Input input) {
  if (std::holds_alternative<Start>(input)) return open();
  if (auto* c = std::get_if<LocalCall>(&input)) return on_call(std::move(*c));
  if (auto* r = std::get_if<Response>(&input)) return on_response(*r);
  if (auto* d = std::get_if<PeerDown>(&input)) return on_peer_down(d->peer);
  if (auto* r = std::get_if<Request>(&input)) {
    return {Reply{r->id, make_error(errc::not_found, "replica {}: expected no calls, got one to '{}'", config_.replica,
                                    r->handle)}};
  }
  return {};
}

Effects PsClientRole::open() {
  Effects out;
  pb::PsJoinRequest join;
  join.set_replica(config_.replica);
  for (const auto& device : config_.plan->servers) {
    Call c = unary_call(next_call_, config_.servers.at(device), ps::k_ps_join_handle, join.SerializeAsString(),
                        k_session_timeout);
    c.stream = true;
    c.last = false;
    sessions_.emplace(next_call_++, device);
    out.push_back(std::move(c));
  }
  return out;
}

Effects PsClientRole::on_call(LocalCall call) {
  Effects out;
  if (call.method == "watch") {
    if (failure_) {
      out.push_back(Complete{call.op, *failure_});
    } else {
      watch_ = call.op;
    }
    return out;
  }
  if (call.method == "stop") {
    const Error* why = call.args.as<Error>();
    if (!failure_) failure_ = why != nullptr ? *why : make_error(errc::cancelled, "the replica stopped");
    cancel(out, *failure_);
    if (running_) finish(out, *failure_);
    if (watch_) out.push_back(Complete{*std::exchange(watch_, std::nullopt), *failure_});
    out.push_back(Complete{call.op, Value{}});
    return out;
  }
  if (call.method != "pull" && call.method != "push" && call.method != "leave") {
    out.push_back(unknown_method(call, k_name));
    return out;
  }
  if (failure_) {
    out.push_back(Complete{call.op, *failure_});
    return out;
  }
  if (running_ || stopped_) {
    out.push_back(Complete{call.op, make_error(errc::protocol, "replica {}: '{}' {}", config_.replica, call.method,
                                               stopped_ ? "after the replica left" : "while a pull or push still runs")});
    return out;
  }
  if (call.method == "leave") {
    stopped_ = true;
    for (const auto& [id, device] : sessions_) out.push_back(Send{id, std::string{}, true});
    out.push_back(Complete{call.op, Value{}});
    return out;
  }
  running_ = call.op;
  Status started = ok_status();
  if (call.method == "pull") {
    started = pull(out);
  } else if (const auto* args = call.args.as<PsPushArgs>()) {
    started = push(out, *args);
  } else {
    running_.reset();
    out.push_back(Complete{call.op, make_error(errc::invalid_argument, "push: expected PsPushArgs, got {}",
                                               call.args.type_name())});
    return out;
  }
  if (!started) {
    // A refused step (wrong phase, wrong gradients) changes nothing: the caller may retry;
    // a shard whose PS is down ends the client.
    if (started.error().code == errc::peer_down) return fail(started.error());
    running_.reset();
    out.clear();
    out.push_back(Complete{call.op, started.error()});
  }
  return out;
}

const PeerAddr& PsClientRole::target(std::size_t shard, bool pull) const {
  if (pull) {
    if (auto via = config_.pull_via.find(shard); via != config_.pull_via.end()) return via->second;
  }
  return config_.servers.at(config_.plan->shards[shard].device);
}

Status PsClientRole::call(Effects& out, std::size_t shard, bool pull, const char* handle, std::string body) {
  const PeerAddr& peer = target(shard, pull);
  // A peer whose connection broke answers nothing more: fail now, as a gateway would.
  if (down_.count(peer) != 0) {
    return describe(pull ? "pull" : "push", shard, make_error(errc::peer_down, "the connection is closed"));
  }
  calls_.emplace(next_call_, InFlight{shard, pull});
  out.push_back(unary_call(next_call_++, peer, handle, std::move(body), config_.call_timeout));
  return ok_status();
}

Status PsClientRole::pull(Effects& out) {
  auto pulls = replica_.start_pull();
  if (!pulls) return pulls.error();
  for (const auto& p : *pulls) {
    pb::PsPullRequest m;
    m.set_shard(config_.plan->shards[p.shard].config.variable);
    m.set_replica(config_.replica);
    m.set_step(p.step);
    if (auto s = call(out, p.shard, true, ps::k_ps_pull_handle, m.SerializeAsString()); !s) return s.error();
  }
  return ok_status();
}

Status PsClientRole::push(Effects& out, const PsPushArgs& args) {
  auto pushes = replica_.push(args.gradients, args.samples);
  if (!pushes) return pushes.error();
  for (const auto& p : *pushes) {
    auto body = ps::to_pb(config_.plan->shards[p.shard].config.variable, p.push).SerializeAsString();
    if (auto s = call(out, p.shard, false, ps::k_ps_push_handle, std::move(body)); !s) return s.error();
  }
  return ok_status();
}

Effects PsClientRole::on_response(const Response& r) {
  if (auto s = sessions_.find(r.call); s != sessions_.end()) {
    const std::string device = s->second;
    sessions_.erase(s);
    // A session ending early (the PS refused it, died or broke the connection) ends training.
    if (stopped_ || failure_) return {};
    const Error e = r.result.ok() ? make_error(errc::protocol, "the PS ended the session") : r.result.error();
    return fail(make_error(e.code, "replica {}: session with PS {} at {} ended: {}", config_.replica, device,
                           config_.servers.at(device), e.message));
  }
  auto it = calls_.find(r.call);
  if (it == calls_.end() || failure_) return {};
  const InFlight flight = it->second;
  calls_.erase(it);
  const char* what = flight.pull ? "pull" : "push";
  if (!r.result.ok()) return fail(describe(what, flight.shard, r.result.error()));
  Result<bool> last = false;
  if (flight.pull) {
    pb::PsPullResponse m;
    if (!m.ParseFromString(*r.result)) {
      return fail(describe(what, flight.shard, make_error(errc::malformed, "not a PsPullResponse")));
    }
    auto reply = ps::from_pb(m);
    const auto& config = config_.plan->shards[flight.shard].config;
    // The synchronization contract: a synchronous shard answers step s at version >= s - staleness.
    if (config.sync && reply.version < reply.step - config.staleness) {
      return fail(describe(what, flight.shard,
                           make_error(errc::internal, "expected version >= {} (staleness {}), got {}",
                                      reply.step - config.staleness, config.staleness, reply.version)));
    }
    last = replica_.on_pull_reply(flight.shard, std::move(reply));
  } else {
    pb::PsPushResponse m;
    if (!m.ParseFromString(*r.result)) {
      return fail(describe(what, flight.shard, make_error(errc::malformed, "not a PsPushResponse")));
    }
    last = replica_.on_push_ack(flight.shard, ps::PushAck{m.replica(), m.step()});
  }
  if (!last) return fail(describe(what, flight.shard, last.error()));
  Effects out;
  if (!*last) return out;
  if (!flight.pull) {
    finish(out, Value{});
    return out;
  }
  PsPulled pulled;
  pulled.step = replica_.step();
  pulled.version = replica_.min_version();
  auto params = replica_.take_parameters();
  if (!params) return fail(params.error());
  pulled.params = std::move(*params);
  finish(out, Value::of(std::move(pulled)));
  return out;
}

Effects PsClientRole::on_peer_down(const PeerAddr& peer) {
  down_.insert(peer);
  if (stopped_ || failure_) return {};
  for (const auto& [id, flight] : calls_) {
    if (target(flight.shard, flight.pull) == peer) {
      return fail(describe(flight.pull ? "pull" : "push", flight.shard,
                           make_error(errc::peer_down, "the connection to {} broke", peer)));
    }
  }
  return {};
}

void PsClientRole::cancel(Effects& out, const Error& why) {
  stopped_ = true;
  for (const auto& [id, flight] : calls_) out.push_back(Cancel{id, "the replica gave up its step"});
  calls_.clear();
  for (const auto& [id, device] : sessions_) {
    out.push_back(Cancel{id, fmt::format("replica {} failed: {}", config_.replica, why.message)});
  }
  sessions_.clear();
}

Effects PsClientRole::fail(Error error) {
  Effects out;
  if (failure_) return out;
  failure_ = std::move(error);
  cancel(out, *failure_);
  if (running_) finish(out, *failure_);
  if (watch_) out.push_back(Complete{*std::exchange(watch_, std::nullopt), *failure_});
  return out;
}

void PsClientRole::finish(Effects& out, Result<Value> result) {
  out.push_back(Complete{*running_, std::move(result)});
  running_.reset();
}

Error PsClientRole::describe(const char* what, std::size_t shard, const Error& e) const {
  const auto& s = config_.plan->shards[shard];
  const auto via = config_.pull_via.find(shard);
  const std::string proxy =
      std::string(what) == "pull" && via != config_.pull_via.end() ? " through the proxy " + via->second : "";
  return make_error(e.code, "replica {}: {} of shard '{}' (step {}) on PS {} at {}{} failed: {}", config_.replica, what,
                    s.config.variable, replica_.step(), s.device, config_.servers.at(s.device), proxy, e.message);
}

}  // namespace apiary::core::train
