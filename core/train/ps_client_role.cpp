#include "core/train/ps_client_role.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/ps/partition.hpp"
#include "core/ps/wire.hpp"

namespace apiary::core::train {

namespace {

/// A session lasts as long as training: its deadline is far beyond any run (one year).
constexpr Duration k_session_timeout = std::chrono::hours(24 * 365);

constexpr const char* k_name = "the PS client";

/// Whether an error says the peer is not there (down, or no process listening at its
/// address): with a PS restart wait, the PS is waited for.
bool gone(errc code) { return code == errc::peer_down || code == errc::unavailable; }

/// How often a PS device that went down is asked whether it is back.
constexpr Duration k_retry_every = std::chrono::milliseconds(200);

const char* what_of(int kind) {
  static const char* names[] = {"pull", "push", "optimizer state read", "replayed push"};
  return names[kind];
}

}  // namespace

Result<std::unique_ptr<PsClientRole>> PsClientRole::create(PsClientConfig config) {
  if (!config.plan) return make_error(errc::invalid_argument, "{} {}: expected a PS plan, got none", config.label, config.replica);
  for (const auto& device : config.plan->servers) {
    if (config.servers.count(device) == 0) {
      return make_error(errc::invalid_argument,
                        "{} {}: expected an address for PS device {} (it holds shards of the strategy), got none; "
                        "add {}=<host:port> to --peers",
                        config.label, config.replica, device, device);
    }
  }
  if (config.call_timeout <= Duration::zero()) {
    return make_error(errc::invalid_argument, "{} {}: expected a call timeout > 0", config.label, config.replica);
  }
  if (config.ps_restart_wait < Duration::zero() || config.replay_steps < 0) {
    return make_error(errc::invalid_argument, "{} {}: expected a PS restart wait >= 0 and replay steps >= 0, got {} ms "
                      "and {}", config.label, config.replica,
                      std::chrono::duration_cast<std::chrono::milliseconds>(config.ps_restart_wait).count(),
                      config.replay_steps);
  }
  auto replica = ps::Replica::create(config.replica, config.plan->variables);
  if (!replica) return replica.error();
  return std::unique_ptr<PsClientRole>(new PsClientRole(std::move(config), std::move(*replica)));
}

PsClientRole::PsClientRole(PsClientConfig config, ps::Replica replica)
    : config_(std::move(config)), replica_(std::move(replica)) {
  for (const auto& v : config_.plan->variables) {
    if (v.shards.size() == 1) whole_.emplace(v.shards.front(), v.name);
    if (v.shards.size() < 2 || v.sparse) continue;
    auto layouts = ps::shard_layouts(v.shape, v.partitioner);
    const std::size_t total = ps::ShardLayout{v.shape}.size();
    if (!layouts || layouts->size() != v.shards.size() || !ps::pieces_are_ranges(*layouts, total)) continue;
    for (std::size_t i = 0; i < v.shards.size(); ++i) {
      const auto& l = (*layouts)[i];
      ranges_[v.shards[i]] = Range{v.name, static_cast<std::size_t>(l.offset) * l.row_width(), l.size(), total};
    }
  }
}

std::vector<float>* PsClientRole::whole_of(std::size_t shard) {
  auto range = ranges_.find(shard);
  auto* storage = args_.as<PsPullArgs>();
  if (range == ranges_.end() || storage == nullptr) return nullptr;
  auto mine = storage->storage.find(range->second.variable);
  if (mine == storage->storage.end() || mine->second.size() != range->second.total) return nullptr;
  return &mine->second;
}

Effects PsClientRole::on(TimePoint now, Input input) {
  now_ = now;
  if (std::holds_alternative<Start>(input)) return open();
  if (auto* t = std::get_if<TimerFired>(&input)) return on_timer(t->id);
  if (auto* c = std::get_if<LocalCall>(&input)) return on_call(std::move(*c));
  if (auto* r = std::get_if<Response>(&input)) return on_response(*r);
  if (auto* d = std::get_if<PeerDown>(&input)) return on_peer_down(d->peer);
  if (auto* r = std::get_if<Request>(&input)) {
    return {Reply{r->id, make_error(errc::not_found, "replica {}: expected no calls, got one to '{}'", config_.replica,
                                    r->handle)}};
  }
  return {};
}

void PsClientRole::open_session(Effects& out, const std::string& device) {
  pb::PsJoinRequest join;
  join.set_replica(config_.replica);
  Call c = unary_call(next_call_, config_.servers.at(device), ps::k_ps_join_handle, join.SerializeAsString(),
                      k_session_timeout);
  c.stream = true;
  c.last = false;
  sessions_.emplace(next_call_++, device);
  out.push_back(std::move(c));
}

Effects PsClientRole::open() {
  Effects out;
  for (const auto& device : config_.plan->servers) open_session(out, device);
  // A synchronous job may be running already (this replica was dropped and started
  // again): ask where it stands before the first step.
  const bool sync = std::any_of(config_.plan->shards.begin(), config_.plan->shards.end(),
                                [](const ps::PlannedShard& s) { return s.config.sync; });
  if (sync) {
    ready_ = false;
    ask_rejoin(out, -1);
  }
  return out;
}

void PsClientRole::ask_rejoin(Effects& out, std::int64_t step) {
  rejoin_step_ = step;
  rejoin_answers_.clear();
  pb::PsRejoinRequest req;
  req.set_replica(config_.replica);
  req.set_from_step(step);
  for (const auto& device : config_.plan->servers) {
    out.push_back(unary_call(next_call_, config_.servers.at(device), ps::k_ps_rejoin_handle, req.SerializeAsString(),
                             config_.call_timeout));
    rejoin_calls_.emplace(next_call_++, device);
  }
}

Effects PsClientRole::on_rejoin_answer(const std::string& device, const Response& r) {
  if (failure_) return {};
  const auto where = [&] { return fmt::format("PS {} at {}", device, config_.servers.at(device)); };
  if (!r.result.ok()) {
    return fail(make_error(r.result.error().code, "replica {}: could not learn where the job stands from {}: {}",
                           config_.replica, where(), r.result.error().message));
  }
  pb::PsRejoinResponse res;
  if (!res.ParseFromArray(r.result->data(), static_cast<int>(r.result->size()))) {
    return fail(make_error(errc::malformed, "replica {}: {} answered a rejoin with {} bytes that are not a "
                           "PsRejoinResponse", config_.replica, where(), r.result->size()));
  }
  rejoin_answers_[device] = RejoinAnswer{res.dropped(), res.accepted(), res.step()};
  if (!rejoin_calls_.empty()) return {};
  // Every device answered this round.
  std::int64_t floor = 0;
  bool dropped = false;
  bool refused = false;
  for (const auto& [d, a] : rejoin_answers_) {
    dropped = dropped || a.dropped;
    refused = refused || (a.dropped && !a.accepted);
    if (a.dropped && !a.accepted) floor = std::max(floor, a.step);
  }
  Effects out;
  if (rejoin_step_ < 0 && !dropped) return ready(std::move(out));  // a replica of a job starting
  if (rejoin_step_ >= 0 && !refused) {
    if (auto st = replica_.start_at(rejoin_step_); !st) return fail(st.error());
    first_step_ = rejoin_step_;
    return ready(std::move(out));
  }
  // Dropped: ask to push from the first step no replica has pushed on any device (again,
  // further on, when the others moved past the one asked for).
  constexpr int k_rounds = 20;
  if (++rejoin_rounds_ > k_rounds) {
    return fail(make_error(errc::unavailable,
                           "replica {}: could not rejoin the running job in {} tries: the other replicas pushed "
                           "past each step asked for (last {}) before every PS device took it",
                           config_.replica, k_rounds, rejoin_step_));
  }
  ask_rejoin(out, std::max(floor, rejoin_step_ + 1));
  return out;
}

Effects PsClientRole::ready(Effects out) {
  ready_ = true;
  if (held_call_) {
    auto fx = on_call(std::move(*std::exchange(held_call_, std::nullopt)));
    out.insert(out.end(), std::make_move_iterator(fx.begin()), std::make_move_iterator(fx.end()));
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
    if (held_call_) out.push_back(Complete{std::exchange(held_call_, std::nullopt)->op, *failure_});
    if (watch_) out.push_back(Complete{*std::exchange(watch_, std::nullopt), *failure_});
    out.push_back(Complete{call.op, Value{}});
    return out;
  }
  const std::string& m = call.method;
  if (m != "pull" && m != "push" && m != "leave" && m != "optimizer_states") {
    out.push_back(unknown_method(call, k_name));
    return out;
  }
  if (failure_) {
    out.push_back(Complete{call.op, *failure_});
    return out;
  }
  if (!ready_ && !held_call_ && !running_ && !stopped_) {
    held_call_ = std::move(call);  // runs once the PS devices said where to start
    return out;
  }
  if (running_ || stopped_ || !ready_) {
    out.push_back(Complete{call.op, make_error(errc::protocol, "replica {}: '{}' {}", config_.replica, m,
                                               stopped_ ? "after the replica left"
                                                        : "while another call still runs (or waits for the start)")});
    return out;
  }
  if (m == "leave") {
    stopped_ = true;
    for (const auto& [id, device] : sessions_) out.push_back(Send{id, std::string{}, true});
    out.push_back(Complete{call.op, Value{}});
    return out;
  }
  if (m == "push" && call.args.as<PsPushArgs>() == nullptr) {
    out.push_back(Complete{call.op, make_error(errc::invalid_argument, "push: expected PsPushArgs, got {}",
                                               call.args.type_name())});
    return out;
  }
  running_ = call.op;
  args_ = std::move(call.args);
  const CallId first_call = next_call_;
  Status started = m == "pull" ? pull(out) : m == "push" ? push(out) : read_states(out);
  if (!started) {
    // A refused step (wrong phase, wrong gradients) changes nothing: the caller may retry;
    // a shard whose PS is down ends the client.
    calls_.erase(calls_.lower_bound(first_call), calls_.end());  // none of them went out
    held_.clear();
    if (started.error().code == errc::peer_down) return fail(started.error());
    args_ = Value{};
    running_.reset();
    return {Complete{call.op, started.error()}};
  }
  return out;
}

const PeerAddr& PsClientRole::target(std::size_t shard, Kind kind) const {
  if (kind == Kind::pull) {
    if (auto via = config_.pull_via.find(shard); via != config_.pull_via.end()) return via->second;
  }
  return config_.servers.at(config_.plan->shards[shard].device);
}

Status PsClientRole::call(Effects& out, std::size_t shard, Kind kind, Call c) {
  const PeerAddr& peer = target(shard, kind);
  if (const auto device = device_of(shard, kind); !device.empty() && lost_.count(device) != 0) {
    // Its PS is down and waited for: sent once it is back.
    if (kind != Kind::replay) held_[shard] = InFlight{shard, kind, std::move(c)};
    return ok_status();
  }
  // A peer whose connection broke answers nothing more: fail now, as a gateway would.
  if (down_.count(peer) != 0) {
    return describe(what_of(static_cast<int>(kind)), shard, make_error(errc::peer_down, "the connection is closed"));
  }
  c.id = next_call_;
  c.peer = peer;
  c.timeout = config_.call_timeout;
  InFlight flight{shard, kind, std::nullopt};
  if (config_.ps_restart_wait > Duration::zero() && kind != Kind::replay) flight.again = c;
  calls_.emplace(next_call_++, std::move(flight));
  out.push_back(std::move(c));
  return ok_status();
}

Status PsClientRole::pull(Effects& out) {
  auto pulls = replica_.start_pull();
  if (!pulls) return pulls.error();
  in_place_.clear();
  auto* storage = args_.as<PsPullArgs>();
  for (const auto& p : *pulls) {
    pb::PsPullRequest m;
    m.set_shard(config_.plan->shards[p.shard].config.variable);
    m.set_replica(config_.replica);
    m.set_step(p.step);
    Call c = unary_call(0, {}, ps::k_ps_pull_handle, m.SerializeAsString(), config_.call_timeout);
    c.view_response = true;
    // A variable held whole whose vector has its size already (every pull after the
    // first) is posted as its answer's landing: the values are received straight into
    // it. Any head lands (it carries the shard's version); the answer's head is checked.
    // A piece along axis 0 lands in its range of the variable's vector.
    float* at = nullptr;
    std::size_t count = 0;
    auto whole = whole_.find(p.shard);
    if (storage != nullptr && whole != whole_.end()) {
      auto mine = storage->storage.find(whole->second);
      if (mine != storage->storage.end() &&
          mine->second.size() == config_.plan->shards[p.shard].config.layout.size()) {
        at = mine->second.data();
        count = mine->second.size();
      }
    } else if (std::vector<float>* into = whole_of(p.shard); into != nullptr) {
      at = into->data() + ranges_.at(p.shard).offset;
      count = ranges_.at(p.shard).count;
    }
    if (at != nullptr && count > 0) {
      Landing l;
      l.zone = Buffer::zone_of(args_.holder(), at, count * sizeof(float));
      l.any_head = true;
      c.landings.push_back(std::move(l));
    }
    if (auto s = call(out, p.shard, Kind::pull, std::move(c)); !s) return s.error();
  }
  return ok_status();
}

Status PsClientRole::push(Effects& out) {
  const auto& args = *args_.as<PsPushArgs>();
  auto pushes = replica_.push_views(args.gradients, args.samples);
  if (!pushes) return pushes.error();
  for (const auto& p : *pushes) {
    const std::string& shard = config_.plan->shards[p.shard].config.variable;
    Call c = unary_call(0, {}, ps::k_ps_push_handle, {}, config_.call_timeout);
    if (!p.piece && p.dense != nullptr && p.count > 0) {
      // Sent from where the gradient lies: the body views the args, which it keeps alive.
      auto [head, tail] = ps::dense_push_framing(shard, p.replica, p.step, p.samples, p.count, args.learning_rate);
      c.request = std::move(head);
      c.body = Buffer::view_of(args_.holder(), p.dense, p.count * sizeof(float));
      c.tail = std::move(tail);
    } else if (p.piece) {
      c.request =
          ps::to_pb(shard, ps::Push{p.replica, p.step, *p.piece, p.samples, args.learning_rate}).SerializeAsString();
    } else {
      c.request = ps::to_pb(shard, ps::Push{p.replica, p.step, std::vector<float>{}, p.samples, args.learning_rate})
                      .SerializeAsString();
    }
    if (auto s = call(out, p.shard, Kind::push, std::move(c)); !s) return s.error();
  }
  return ok_status();
}

Status PsClientRole::read_states(Effects& out) {
  states_.clear();
  for (std::size_t shard = 0; shard < config_.plan->shards.size(); ++shard) {
    pb::PsPullRequest m;
    m.set_shard(config_.plan->shards[shard].config.variable);
    m.set_replica(config_.replica);
    m.set_step(replica_.step());
    Call c = unary_call(0, {}, ps::k_ps_optimizer_state_handle, m.SerializeAsString(), config_.call_timeout);
    if (auto s = call(out, shard, Kind::state, std::move(c)); !s) return s.error();
  }
  if (calls_.empty() && held_.empty()) states_done(out);
  return ok_status();
}

Result<bool> PsClientRole::answered(const InFlight& flight, const Response& r) {
  const std::string_view bytes = r.body.empty() && !r.landed ? std::string_view(*r.result) : r.body.view();
  if (flight.kind == Kind::state) {
    pb::PsOptimizerState m;
    if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return make_error(errc::malformed, "not a PsOptimizerState");
    }
    states_[flight.shard] = ps::Optimizer::State{m.updates(), std::vector<float>(m.slot_m().begin(), m.slot_m().end()),
                                                  std::vector<float>(m.slot_v().begin(), m.slot_v().end())};
    return calls_.empty() && held_.empty();
  }
  if (flight.kind == Kind::push) {
    pb::PsPushResponse m;
    if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return make_error(errc::malformed, "not a PsPushResponse");
    }
    auto last = replica_.on_push_ack(flight.shard, ps::PushAck{m.replica(), m.step()});
    if (last) acked_[flight.shard] = m.step();
    return last;
  }
  if (std::vector<float>* into = whole_of(flight.shard); into != nullptr && !into->empty()) {
    // A piece along axis 0: landed in its range of the caller's vector, or copied there.
    const Range& range = ranges_.at(flight.shard);
    ps::PullReply reply;
    const auto s = r.landed ? ps::decode_landed_pull_response(bytes, range.count * sizeof(float), reply)
                            : ps::decode_pull_response_into(bytes, reply);
    if (!s) return s.error();
    if (!r.landed) {
      if (reply.values.size() != range.count) {
        return make_error(errc::invalid_argument, "expected {} values from shard {}, got {}", range.count,
                          flight.shard, reply.values.size());
      }
      std::copy(reply.values.begin(), reply.values.end(), into->begin() + static_cast<std::ptrdiff_t>(range.offset));
    }
    pulls_landed_ += r.landed ? 1 : 0;
    if (auto st = check_staleness(flight.shard, reply); !st) return st.error();
    in_place_.insert(range.variable);
    return replica_.on_pull_reply_in_place(flight.shard, reply);
  }
  // The values land in the caller's vector, or are decoded into its storage (or fresh).
  ps::PullReply reply;
  auto* storage = args_.as<PsPullArgs>();
  if (auto whole = whole_.find(flight.shard); storage != nullptr && whole != whole_.end()) {
    if (auto mine = storage->storage.find(whole->second); mine != storage->storage.end()) {
      reply.values = std::move(mine->second);
    }
  }
  const auto s = r.landed ? ps::decode_landed_pull_response(bytes, reply.values.size() * sizeof(float), reply)
                          : ps::decode_pull_response_into(bytes, reply);
  if (!s) return s.error();
  pulls_landed_ += r.landed ? 1 : 0;
  if (auto st = check_staleness(flight.shard, reply); !st) return st.error();
  return replica_.on_pull_reply(flight.shard, std::move(reply));
}

Status PsClientRole::check_staleness(std::size_t shard, const ps::PullReply& reply) const {
  const auto& config = config_.plan->shards[shard].config;
  // The synchronization contract, checked on every answer: a synchronous shard answers
  // step s with at least s - staleness updates applied.
  if (config.sync && reply.version < reply.step - config.staleness) {
    return make_error(errc::internal,
                      "expected version >= {} (step {} with staleness {}), got version {}: the shard broke its "
                      "staleness bound",
                      reply.step - config.staleness, reply.step, config.staleness, reply.version);
  }
  return ok_status();
}

Effects PsClientRole::on_response(const Response& r) {
  if (auto j = rejoin_calls_.find(r.call); j != rejoin_calls_.end()) {
    const std::string device = j->second;
    rejoin_calls_.erase(j);
    return on_rejoin_answer(device, r);
  }
  if (auto a = resume_asks_.find(r.call); a != resume_asks_.end()) {
    const std::string device = a->second;
    resume_asks_.erase(a);
    return on_resume_answer(device, r);
  }
  if (auto s = sessions_.find(r.call); s != sessions_.end()) {
    const std::string device = s->second;
    sessions_.erase(s);
    // A session ending early (the PS refused it, died or broke the connection) ends
    // training, unless the replica waits for the PS to come back.
    if (stopped_ || failure_) return {};
    if (config_.ps_restart_wait > Duration::zero() && (r.result.ok() || gone(r.result.error().code))) {
      Effects out;
      lose(out, device, r.result.ok() ? "it ended the session" : r.result.error().message);
      return out;
    }
    const Error e = r.result.ok() ? make_error(errc::protocol, "the PS ended the session") : r.result.error();
    return fail(make_error(e.code, "replica {}: its session on PS {} at {} ended: {}", config_.replica, device,
                           config_.servers.at(device), e.message));
  }
  auto it = calls_.find(r.call);
  if (it == calls_.end() || failure_) return {};
  const InFlight flight = it->second;
  calls_.erase(it);
  const char* what = what_of(static_cast<int>(flight.kind));
  if (!r.result.ok()) {
    std::string device = device_of(flight.shard, flight.kind);
    // A pull through the node's proxy fails with peer_down or unavailable when the proxy
    // lost the PS behind it: held as a direct pull is, and sent through the proxy again
    // once that PS answers (the proxy then pulls afresh).
    if (device.empty() && flight.kind == Kind::pull) device = config_.plan->shards[flight.shard].device;
    if (config_.ps_restart_wait > Duration::zero() && gone(r.result.error().code) && !device.empty()) {
      if (flight.kind != Kind::replay) held_[flight.shard] = flight;  // sent again once the device is back
      Effects out;
      lose(out, device, r.result.error().message);
      return out;
    }
    return fail(describe(what, flight.shard, r.result.error()));
  }
  if (flight.kind == Kind::replay) {
    const std::string_view bytes = r.body.empty() && !r.landed ? std::string_view(*r.result) : r.body.view();
    pb::PsPushResponse m;
    auto& queue = replaying_[flight.shard];
    if (!m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) || queue.empty() ||
        m.step() != queue.front().step) {
      return fail(describe(what, flight.shard, make_error(errc::malformed, "expected the PsPushResponse of step {}",
                                                          queue.empty() ? -1 : queue.front().step)));
    }
    queue.pop_front();
    Effects out;
    if (auto s = next_replay(out, flight.shard); !s) return fail(s.error());
    return out;
  }
  auto last = answered(flight, r);
  if (!last) return fail(describe(what, flight.shard, last.error()));
  if (flight.kind == Kind::push && flight.again) keep(flight.shard, acked_.at(flight.shard), *flight.again);
  Effects out;
  if (!*last) return out;
  if (flight.kind == Kind::state) {
    states_done(out);
    return out;
  }
  if (flight.kind == Kind::push) {
    // The args come back: their gradients, no longer viewed by a call in flight.
    finish(out, std::exchange(args_, Value{}));
    return out;
  }
  PsPulled pulled;
  pulled.step = replica_.step();
  pulled.version = replica_.min_version();
  auto params = replica_.take_parameters();
  if (!params) return fail(params.error());
  pulled.params = std::move(*params);
  // The variables whose pieces landed in place: the caller's vectors, which hold them now.
  if (auto* storage = args_.as<PsPullArgs>()) {
    for (const auto& name : in_place_) pulled.params[name] = std::move(storage->storage.at(name));
  }
  in_place_.clear();
  args_ = Value{};
  finish(out, Value::of(std::move(pulled)));
  return out;
}

void PsClientRole::states_done(Effects& out) {
  using State = ps::Optimizer::State;
  std::map<std::string, State> states;
  for (const auto& v : config_.plan->variables) {
    auto layouts = ps::shard_layouts(v.shape, v.partitioner);
    if (!layouts) {
      finish(out, layouts.error());
      return;
    }
    State whole;
    whole.updates = states_.at(v.shards.front()).updates;
    for (auto slot : {&State::m, &State::v}) {
      std::vector<std::vector<float>> pieces;
      for (const auto shard : v.shards) pieces.push_back(std::move(states_.at(shard).*slot));
      if (pieces.front().empty()) continue;  // the optimizer has no such slot
      auto joined = ps::reassemble(pieces, v.shape, *layouts);
      if (!joined) {
        finish(out, joined.error());
        return;
      }
      whole.*slot = std::move(*joined);
    }
    states.emplace(v.name, std::move(whole));
  }
  states_.clear();
  finish(out, Value::of(std::move(states)));
}

Effects PsClientRole::on_peer_down(const PeerAddr& peer) {
  down_.insert(peer);
  if (stopped_ || failure_) return {};
  Effects out;
  if (config_.ps_restart_wait > Duration::zero()) {
    for (const auto& [device, address] : config_.servers) {
      if (address == peer) lose(out, device, "the connection broke");
    }
  }
  for (const auto& [id, flight] : calls_) {
    if (target(flight.shard, flight.kind) == peer) {
      return fail(describe(what_of(static_cast<int>(flight.kind)), flight.shard,
                           make_error(errc::peer_down, "the connection to {} broke", peer)));
    }
  }
  return out;
}

void PsClientRole::cancel(Effects& out, const Error& why) {
  stopped_ = true;
  for (const auto& [id, flight] : calls_) out.push_back(Cancel{id, "the replica gave up its step"});
  calls_.clear();
  for (const auto& [id, device] : rejoin_calls_) out.push_back(Cancel{id, "the replica gave up its start"});
  rejoin_calls_.clear();
  for (const auto& [id, device] : resume_asks_) out.push_back(Cancel{id, "the replica gave up its step"});
  resume_asks_.clear();
  for (const auto& [id, device] : retry_timers_) out.push_back(CancelTimer{id});
  retry_timers_.clear();
  lost_.clear();
  held_.clear();
  replaying_.clear();
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
  if (held_call_) out.push_back(Complete{std::exchange(held_call_, std::nullopt)->op, *failure_});
  if (watch_) out.push_back(Complete{*std::exchange(watch_, std::nullopt), *failure_});
  return out;
}

void PsClientRole::finish(Effects& out, Result<Value> result) {
  args_ = Value{};
  out.push_back(Complete{*std::exchange(running_, std::nullopt), std::move(result)});
}

Error PsClientRole::describe(const char* what, std::size_t shard, const Error& e) const {
  const auto& s = config_.plan->shards[shard];
  const auto via = config_.pull_via.find(shard);
  const std::string proxy =
      std::string(what) == "pull" && via != config_.pull_via.end() ? " through the proxy " + via->second.multiaddr() : "";
  std::string hint;
  if (e.code == errc::peer_down) {
    hint = config_.ps_restart_wait > Duration::zero()
               ? "; the PS process is not running there"
               : "; the PS process is not running there (not started yet, or stopped: its shards' state is then "
                 "lost; replicas that wait for it (--ps-restart-wait-ms) go on once it is started again with "
                 "--resume, otherwise the job must restart)";
  } else if (e.code == errc::deadline_exceeded) {
    hint = fmt::format(
        "; no answer within {} ms: the PS process is stuck, or (synchronous training) another replica stopped or "
        "lags more than the timeout",
        std::chrono::duration_cast<std::chrono::milliseconds>(config_.call_timeout).count());
  }
  return make_error(e.code, "replica {}: {} of shard '{}' (step {}) on PS {} at {}{} failed: {}{}", config_.replica,
                    what, s.config.variable, replica_.step(), s.device, config_.servers.at(s.device), proxy, e.message,
                    hint);
}

// ---- a PS device that went down and comes back --------------------------------------

std::string PsClientRole::device_of(std::size_t shard, Kind kind) const {
  if (kind == Kind::pull && config_.pull_via.count(shard) != 0) return {};
  return config_.plan->shards[shard].device;
}

void PsClientRole::lose(Effects& out, const std::string& device, const std::string& why) {
  if (lost_.count(device) != 0 || stopped_ || failure_) return;
  lost_[device] = LostDevice{now_ + config_.ps_restart_wait, why, std::nullopt, 0};
  // The running op's calls to it wait until it is back; replays start over then.
  for (auto it = calls_.begin(); it != calls_.end();) {
    if (device_of(it->second.shard, it->second.kind) != device) {
      ++it;
      continue;
    }
    out.push_back(Cancel{it->first, fmt::format("PS {} went down", device)});
    if (it->second.kind != Kind::replay) held_[it->second.shard] = std::move(it->second);
    it = calls_.erase(it);
  }
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second != device) {
      ++it;
      continue;
    }
    out.push_back(Cancel{it->first, fmt::format("PS {} went down", device)});
    it = sessions_.erase(it);
  }
  for (auto& [shard, queue] : replaying_) {
    if (config_.plan->shards[shard].device == device) queue.clear();
  }
  ask_lost(out, device, k_retry_every);
}

void PsClientRole::ask_lost(Effects& out, const std::string& device, Duration delay) {
  const TimerId id = next_timer_++;
  retry_timers_.emplace(id, device);
  out.push_back(SetTimer{id, now_ + delay});
}

Effects PsClientRole::on_timer(TimerId id) {
  auto it = retry_timers_.find(id);
  if (it == retry_timers_.end() || failure_ || stopped_) return {};
  const std::string device = it->second;
  retry_timers_.erase(it);
  auto lost = lost_.find(device);
  if (lost == lost_.end()) return {};
  if (now_ >= lost->second.deadline) {
    return fail(make_error(errc::unavailable,
                           "replica {}: PS {} at {} went down ({}) and was not back within {} ms (asked {} times): "
                           "start it again with --resume, sooner, or wait longer (--ps-restart-wait-ms)",
                           config_.replica, device, config_.servers.at(device), lost->second.why,
                           std::chrono::duration_cast<std::chrono::milliseconds>(config_.ps_restart_wait).count(),
                           lost->second.tries));
  }
  ++lost->second.tries;
  pb::PsRejoinRequest req;
  req.set_replica(config_.replica);
  req.set_from_step(-1);
  const Duration left = lost->second.deadline - now_;
  Effects out;
  out.push_back(unary_call(next_call_, config_.servers.at(device), ps::k_ps_rejoin_handle, req.SerializeAsString(),
                           std::min(config_.call_timeout, left)));
  resume_asks_.emplace(next_call_, device);
  lost->second.ask = next_call_++;
  return out;
}

Effects PsClientRole::on_resume_answer(const std::string& device, const Response& r) {
  auto lost = lost_.find(device);
  if (lost == lost_.end() || failure_ || stopped_) return {};
  lost->second.ask.reset();
  Effects out;
  if (!r.result.ok()) {  // not back yet: ask again, until the wait runs out
    lost->second.why = lost->second.why + "; then: " + r.result.error().message;
    if (lost->second.why.size() > 400) lost->second.why = r.result.error().message;
    ask_lost(out, device, k_retry_every);
    return out;
  }
  const auto where = fmt::format("PS {} at {}", device, config_.servers.at(device));
  pb::PsRejoinResponse res;
  if (!res.ParseFromArray(r.result->data(), static_cast<int>(r.result->size()))) {
    return fail(make_error(errc::malformed, "replica {}: {} came back and answered with {} bytes that are not a "
                           "PsRejoinResponse", config_.replica, where, r.result->size()));
  }
  if (res.dropped()) {
    return fail(make_error(errc::protocol, "replica {}: {} came back and counts this replica out of the job",
                           config_.replica, where));
  }
  const std::string since = res.resumed() ? fmt::format(" (it continued the job from step {})", res.resumed_at()) : "";
  for (std::size_t shard = 0; shard < config_.plan->shards.size(); ++shard) {
    const auto& planned = config_.plan->shards[shard];
    if (planned.device != device || !planned.config.sync) continue;
    const auto next = res.next_steps().find(planned.config.variable);
    if (next == res.next_steps().end()) {
      return fail(make_error(errc::protocol, "replica {}: {} came back without shard '{}'", config_.replica, where,
                             planned.config.variable));
    }
    const auto a = acked_.find(shard);
    std::int64_t acked = a == acked_.end() ? first_step_ - 1 : a->second;
    // The loss ate the acknowledgement of the push in flight, which the PS had taken.
    auto held = held_.find(shard);
    if (next->second == acked + 2 && held != held_.end() && held->second.kind == Kind::push) {
      auto last = replica_.on_push_ack(shard, ps::PushAck{config_.replica, acked + 1});
      if (!last) return fail(describe("push", shard, last.error()));
      acked_[shard] = ++acked;
      keep(shard, acked, *held->second.again);
      held_.erase(held);
      if (*last) finish(out, std::exchange(args_, Value{}));
    }
    if (next->second > acked + 1) {
      return fail(make_error(errc::protocol, "replica {}: {} came back expecting step {} of shard '{}', past the "
                             "last step this replica pushed there ({}): not the PS of this job",
                             config_.replica, where, next->second, planned.config.variable, acked));
    }
    std::deque<Kept> again;
    for (const auto& k : kept_[shard]) {
      if (k.step >= next->second) again.push_back(k);
    }
    const std::int64_t from = again.empty() ? acked + 1 : again.front().step;
    if (from != next->second) {
      return fail(make_error(errc::unavailable,
                             "replica {}: {} came back{} expecting the pushes of shard '{}' from step {} again; this "
                             "replica kept them from step {} on (the last {} steps): continue it from a later "
                             "checkpoint (save more often) or keep more steps",
                             config_.replica, where, since, planned.config.variable, next->second, from,
                             config_.replay_steps));
    }
    replaying_[shard] = std::move(again);
  }
  lost_.erase(lost);
  down_.erase(config_.servers.at(device));
  open_session(out, device);
  for (std::size_t shard = 0; shard < config_.plan->shards.size(); ++shard) {
    if (config_.plan->shards[shard].device != device) continue;
    if (auto s = next_replay(out, shard); !s) return fail(s.error());
  }
  return out;
}

Status PsClientRole::next_replay(Effects& out, std::size_t shard) {
  auto& queue = replaying_[shard];
  if (!queue.empty()) return call(out, shard, Kind::replay, queue.front().call);
  auto held = held_.find(shard);
  if (held == held_.end()) return ok_status();
  InFlight flight = std::move(held->second);
  held_.erase(held);
  return call(out, shard, flight.kind, std::move(*flight.again));
}

void PsClientRole::keep(std::size_t shard, std::int64_t step, const Call& call) {
  if (config_.replay_steps <= 0) return;
  auto& queue = kept_[shard];
  // The oldest kept push past the window lends its storage (a gradient's size: no fresh
  // allocation, no page faults, each step).
  std::string bytes;
  if (!queue.empty() && queue.front().step <= step - config_.replay_steps) {
    bytes = std::move(queue.front().call.request);
    queue.pop_front();
  }
  // The message in one piece: its body viewed the caller's gradients, reused next step.
  bytes.assign(call.request).append(call.body.view()).append(call.tail);
  Kept k{step, unary_call(0, call.peer, call.handle, std::move(bytes), call.timeout)};
  k.call.caller = call.caller;
  queue.push_back(std::move(k));
  while (!queue.empty() && queue.front().step <= step - config_.replay_steps) queue.pop_front();
}

}  // namespace apiary::core::train
