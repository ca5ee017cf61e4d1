#include "actors/ps/replica_driver.hpp"

#include <optional>
#include <set>

#include <caf/all.hpp>

#include "actors/rpc.hpp"
#include "core/ps/partition.hpp"
#include "core/ps/wire.hpp"

namespace apiary::actors {

namespace {

/// A push's request: with an `owner` of the caller's dense values, spliced around them
/// (sent from where they lie); else a dense gradient written once, into a pooled buffer
/// (its pages stay mapped from one step to the next), a sparse one through protobuf.
Payload encode_push(const std::string& shard, const core::ps::ShardPushView& p,
                    const std::shared_ptr<const void>& owner) {
  const float* values = p.dense;
  std::size_t count = p.count;
  if (owner && !p.piece && values != nullptr && count > 0) {
    auto [head, tail] = core::ps::dense_push_framing(shard, p.replica, p.step, p.samples, count);
    return Payload{std::move(head), Buffer::view_of(owner, values, count * sizeof(float)), std::move(tail)};
  }
  if (p.piece) {
    const auto* dense = std::get_if<std::vector<float>>(&*p.piece);
    if (dense == nullptr) {
      return to_buffer(core::ps::to_pb(shard, core::ps::Push{p.replica, p.step, *p.piece, p.samples}));
    }
    values = dense->data();
    count = dense->size();
  }
  Buffer b = Buffer::allocate(core::ps::dense_push_size(shard, p.replica, p.step, p.samples, count));
  core::ps::encode_dense_push(reinterpret_cast<char*>(b.data()), shard, p.replica, p.step, p.samples, values, count);
  return b;
}

}  // namespace

Result<std::unique_ptr<ReplicaDriver>> ReplicaDriver::create(caf::actor_system& sys, std::shared_ptr<Gateway> gw,
                                                             ReplicaDriverConfig config) {
  const auto& plan = config.plan;
  if (config.replica < 0 || static_cast<std::size_t>(config.replica) >= plan.replicas.size()) {
    return make_error(errc::invalid_argument, "replica id: expected 0..{} (the strategy's {} replicas), got {}",
                      static_cast<std::int64_t>(plan.replicas.size()) - 1, plan.replicas.size(), config.replica);
  }
  for (const auto& device : plan.servers) {
    if (config.servers.count(device) == 0) {
      return make_error(errc::invalid_argument,
                        "PS addresses: expected one for PS device {} (it holds shards of the strategy), got none; "
                        "add {}=<host:port> to --peers",
                        device, device);
    }
  }
  if (config.timeout <= std::chrono::milliseconds::zero()) {
    return make_error(errc::invalid_argument, "call timeout: expected > 0 ms, got {} ms", config.timeout.count());
  }
  auto replica = core::ps::Replica::create(config.replica, plan.variables);
  if (!replica) return replica.error();
  std::unique_ptr<ReplicaDriver> driver(new ReplicaDriver(sys, std::move(gw), std::move(config), std::move(*replica)));
  driver->join();
  return driver;
}

void ReplicaDriver::join() {
  // A session lasts as long as training: its deadline is far beyond any job (one year).
  constexpr auto k_session_deadline = std::chrono::hours(24 * 365);
  pb::PsJoinRequest m;
  m.set_replica(config_.replica);
  for (const auto& device : config_.plan.servers) {
    const CallId id = gw_->open(self_, config_.servers.at(device), core::ps::k_ps_join_handle, pb::BIDI_STREAM,
                                k_session_deadline, to_buffer(m), false);
    sessions_.emplace(id, device);
  }
}

Status ReplicaDriver::leave(std::chrono::milliseconds patience) {
  std::set<CallId> open;
  const auto devices = std::move(sessions_);
  sessions_.clear();
  for (const auto& [id, device] : devices) {
    gw_->end(id);
    open.insert(id);
  }
  // The PS ends its side once it has taken our end in (an error end counts too: there
  // is nothing more to wait for from that PS).
  const auto outcomes = await_calls(self_, *gw_, open, patience);
  std::string late;  // PS devices that did not answer
  for (const auto& [id, o] : outcomes) {
    if (devices.count(id) == 0 || !o.error || o.error->code != errc::deadline_exceeded) continue;
    late += (late.empty() ? "" : ", ") + devices.at(id);
  }
  if (!late.empty()) {
    return make_error(errc::deadline_exceeded,
                      "replica {}: PS processes did not acknowledge its leaving within {} ms "
                      "({}); they may take its exit for a failure",
                      config_.replica, patience.count(), late);
  }
  return ok_status();
}

ReplicaDriver::~ReplicaDriver() {
  for (const auto& [id, device] : sessions_) gw_->end(id);
}

ReplicaDriver::ReplicaDriver(caf::actor_system& sys, std::shared_ptr<Gateway> gw, ReplicaDriverConfig config,
                             core::ps::Replica replica)
    : self_(sys), gw_(std::move(gw)), config_(std::move(config)), replica_(std::move(replica)) {
  for (const auto& v : config_.plan.variables) {
    if (v.shards.size() == 1) whole_.emplace(v.shards.front(), v.name);
  }
}

Error ReplicaDriver::describe(const char* what, std::size_t shard, const Error& e) const {
  const auto& s = config_.plan.shards[shard];
  std::string addr = config_.servers.at(s.device);
  if (auto via = config_.pull_via.find(shard); via != config_.pull_via.end() && std::string(what) == "pull") {
    addr += " through the proxy at " + via->second;
  }
  std::string hint;
  if (e.code == errc::peer_down) {
    hint =
        "; the PS process is not running there (not started yet, or stopped: its shards' state is then "
        "lost and the job must restart)";
  } else if (e.code == errc::deadline_exceeded) {
    hint = fmt::format(
        "; no answer within {} ms: the PS process is stuck, or (synchronous training) another "
        "replica stopped or lags more than the timeout",
        config_.timeout.count());
  }
  return make_error(e.code, "replica {}: {} of shard '{}' (step {}) on PS {} at {} failed: {}{}", config_.replica, what,
                    s.config.variable, replica_.step(), s.device, addr, e.message, hint);
}

Result<std::map<std::size_t, ReplicaDriver::Answer>> ReplicaDriver::call_all(
    const char* what, const char* handle, std::vector<std::pair<std::size_t, Payload>> requests,
    std::map<std::size_t, Landing> landings) {
  std::map<CallId, std::size_t> shard_of;
  std::set<CallId> ids;
  for (auto& [shard, body] : requests) {
    auto via = config_.pull_via.find(shard);
    const bool proxied = via != config_.pull_via.end() && std::string(handle) == core::ps::k_ps_pull_handle;
    const auto& peer = proxied ? via->second : config_.servers.at(config_.plan.shards[shard].device);
    std::vector<Landing> landing;
    if (auto l = landings.find(shard); l != landings.end()) landing.push_back(std::move(l->second));
    const CallId id = gw_->open(self_, peer, handle, pb::UNARY, config_.timeout, std::move(body), true, {},
                                std::move(landing));
    shard_of.emplace(id, shard);
    ids.insert(id);
  }
  // Collect the answers; the first failure cancels the other calls, so that a dead PS
  // is reported at once even when another shard holds this replica's request.
  std::map<std::size_t, Answer> out;
  std::map<CallId, Answer> partial;
  const auto patience = config_.timeout + std::chrono::seconds(1);  // the gateway's deadline fires first
  const auto give_up = std::chrono::steady_clock::now() + patience;
  std::optional<Error> failure;
  while (!ids.empty() && !failure) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
    if (left <= std::chrono::milliseconds::zero()) {
      failure = describe(what, shard_of.at(*ids.begin()),
                         make_error(errc::deadline_exceeded, "no answer within {} ms", patience.count()));
      break;
    }
    self_->receive(
        [&](Delivery& d) {
          auto it = shard_of.find(d.call);
          if (it == shard_of.end() || ids.count(d.call) == 0) return;  // a call given up earlier
          if (d.kind == DeliveryKind::error) {
            failure = describe(what, it->second, d.error);
          } else if (d.has_message) {
            partial[d.call] = Answer{std::move(d.data), d.landed};
          }
          if (!d.final) return;
          ids.erase(d.call);
          auto body = partial.find(d.call);
          if (body != partial.end()) {
            out.emplace(it->second, std::move(body->second));
          } else if (!failure) {
            failure = describe(what, it->second, make_error(errc::protocol, "the call ended without a response"));
          }
        },
        caf::after(left + std::chrono::milliseconds(1)) >> [] {});
  }
  if (failure) {
    for (CallId id : ids) gw_->cancel(id, "the replica gave up the step: another shard failed");
    return *failure;
  }
  return out;
}

Result<std::map<std::string, std::vector<float>>> ReplicaDriver::pull() {
  std::map<std::string, std::vector<float>> params;
  if (auto s = pull_into(params); !s) return s.error();
  return params;
}

Status ReplicaDriver::pull_into(std::map<std::string, std::vector<float>>& params) {
  auto pulls = replica_.start_pull();
  if (!pulls) return pulls.error();
  std::vector<std::pair<std::size_t, Payload>> requests;
  for (const auto& p : *pulls) {
    pb::PsPullRequest m;
    m.set_shard(config_.plan.shards[p.shard].config.variable);
    m.set_replica(config_.replica);
    m.set_step(p.step);
    requests.emplace_back(p.shard, to_buffer(m));
  }
  // A variable held whole whose vector has its size already (every pull after the first)
  // is posted as its answer's landing: the values are received straight into the vector.
  // Any head lands (it carries the shard's version); decode_landed_pull_response checks
  // it. The vectors are shared with the zones while the calls run.
  auto held = std::make_shared<std::map<std::string, std::vector<float>>>(std::move(params));
  std::map<std::size_t, Landing> landings;
  for (const auto& p : *pulls) {
    auto whole = whole_.find(p.shard);
    auto mine = whole == whole_.end() ? held->end() : held->find(whole->second);
    if (mine == held->end() || mine->second.empty() ||
        mine->second.size() != config_.plan.shards[p.shard].config.layout.size()) {
      continue;
    }
    Landing& l = landings[p.shard];
    l.zone = Buffer::zone_of(held, mine->second.data(), mine->second.size() * sizeof(float));
    l.any_head = true;
  }
  auto answers = call_all("pull", core::ps::k_ps_pull_handle, std::move(requests), std::move(landings));
  // A zone still held (a cancelled answer landing after a failure) leaves a copy here.
  params = held.use_count() == 1 ? std::move(*held) : *held;
  if (!answers) return answers.error();
  for (auto& [shard, answer] : *answers) {
    // The values are received into the caller's vector (landed), or copied once from the
    // received bytes into the replica's piece: for a variable held whole, that vector.
    core::ps::PullReply reply;
    if (auto whole = whole_.find(shard); whole != whole_.end()) {
      if (auto mine = params.find(whole->second); mine != params.end()) reply.values = std::move(mine->second);
    }
    const auto s = answer.landed ? core::ps::decode_landed_pull_response(answer.body.view(),
                                                                          reply.values.size() * sizeof(float), reply)
                                 : core::ps::decode_pull_response_into(answer.body.view(), reply);
    if (!s) return describe("pull", shard, s.error());
    pulls_landed_ += answer.landed ? 1 : 0;
    answer.body = Buffer{};
    const auto& config = config_.plan.shards[shard].config;
    // The synchronization contract, checked on every answer: a synchronous shard
    // answers step s with at least s - staleness updates applied.
    if (config.sync && reply.version < reply.step - config.staleness) {
      return describe("pull", shard,
                      make_error(errc::internal,
                                 "expected version >= {} (step {} with staleness {}), got version {}: the "
                                 "shard broke its staleness bound",
                                 reply.step - config.staleness, reply.step, config.staleness, reply.version));
    }
    if (auto r = replica_.on_pull_reply(shard, std::move(reply)); !r) return describe("pull", shard, r.error());
  }
  auto taken = replica_.take_parameters();
  if (!taken) return taken.error();
  for (auto& [name, values] : *taken) params[name] = std::move(values);
  return ok_status();
}

Result<std::map<std::string, core::ps::Optimizer::State>> ReplicaDriver::optimizer_states() {
  using State = core::ps::Optimizer::State;
  std::vector<std::pair<std::size_t, Payload>> requests;
  for (std::size_t shard = 0; shard < config_.plan.shards.size(); ++shard) {
    pb::PsPullRequest m;
    m.set_shard(config_.plan.shards[shard].config.variable);
    m.set_replica(config_.replica);
    m.set_step(replica_.step());
    requests.emplace_back(shard, to_buffer(m));
  }
  auto answers = call_all("optimizer state", core::ps::k_ps_optimizer_state_handle, std::move(requests));
  if (!answers) return answers.error();
  std::map<std::size_t, State> by_shard;
  for (auto& [shard, answer] : *answers) {
    auto m = from_buffer<pb::PsOptimizerState>(answer.body, "optimizer state");
    if (!m) return describe("optimizer state", shard, m.error());
    by_shard[shard] = State{m->updates(), std::vector<float>(m->slot_m().begin(), m->slot_m().end()),
                            std::vector<float>(m->slot_v().begin(), m->slot_v().end())};
  }
  std::map<std::string, State> out;
  for (const auto& v : config_.plan.variables) {
    auto layouts = core::ps::shard_layouts(v.shape, v.partitioner);
    if (!layouts) return layouts.error();
    State whole;
    whole.updates = by_shard.at(v.shards.front()).updates;
    for (auto slot : {&State::m, &State::v}) {
      std::vector<std::vector<float>> pieces;
      for (const auto s : v.shards) pieces.push_back(std::move(by_shard.at(s).*slot));
      if (pieces.front().empty()) continue;  // the optimizer has no such slot
      auto joined = core::ps::reassemble(pieces, v.shape, *layouts);
      if (!joined) return joined.error();
      whole.*slot = std::move(*joined);
    }
    out.emplace(v.name, std::move(whole));
  }
  return out;
}

Status ReplicaDriver::push(const std::map<std::string, core::ps::Gradient>& gradients, double samples) {
  // Dense gradients go from the caller's tensors straight into the request buffers.
  return push_from(gradients, samples, nullptr);
}

Status ReplicaDriver::push_lent(std::map<std::string, core::ps::Gradient>& gradients, double samples) {
  // The requests' bodies view the lent map; a frame still in flight keeps it alive.
  auto lent = std::make_shared<std::map<std::string, core::ps::Gradient>>(std::move(gradients));
  Status pushed = push_from(*lent, samples, lent);
  gradients = lent.use_count() == 1 ? std::move(*lent) : *lent;
  return pushed;
}

Status ReplicaDriver::push_from(const std::map<std::string, core::ps::Gradient>& gradients, double samples,
                                const std::shared_ptr<const void>& owner) {
  auto pushes = replica_.push_views(gradients, samples);
  if (!pushes) return pushes.error();
  std::vector<std::pair<std::size_t, Payload>> requests;
  for (const auto& p : *pushes) {
    requests.emplace_back(p.shard, encode_push(config_.plan.shards[p.shard].config.variable, p, owner));
  }
  auto answers = call_all("push", core::ps::k_ps_push_handle, std::move(requests));
  if (!answers) return answers.error();
  for (auto& [shard, answer] : *answers) {
    auto m = from_buffer<pb::PsPushResponse>(answer.body, "push response");
    if (!m) return describe("push", shard, m.error());
    core::ps::PushAck ack{m->replica(), m->step()};
    if (auto r = replica_.on_push_ack(shard, ack); !r) return describe("push", shard, r.error());
  }
  return ok_status();
}

}  // namespace apiary::actors
