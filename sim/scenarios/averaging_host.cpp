#include "sim/scenarios/averaging_host.hpp"

#include <algorithm>
#include <utility>

#include "averaging.pb.h"
#include "core/dht/msgpack_value.hpp"

namespace apiary::sim::scenarios {

namespace mm = core::averaging;
using core::Effects;
using core::TimePoint;

namespace {

/// The DHT node's op id of the bootstrap (matchmaking's operations use later ids).
constexpr core::dht::OpId k_bootstrap = 1;
/// msgpack true / false: the value of a declaration.
const std::string k_true("\xc3", 1);
const std::string k_false("\xc2", 1);

/// Moves a matchmaking role's call and timer ids into its own range.
Effects shifted(Effects fx, std::uint64_t base) {
  for (auto& effect : fx) {
    if (auto* c = std::get_if<core::Call>(&effect)) c->id += base;
    if (auto* s = std::get_if<core::Send>(&effect)) s->call += base;
    if (auto* x = std::get_if<core::Cancel>(&effect)) x->call += base;
    if (auto* t = std::get_if<core::SetTimer>(&effect)) t->id += base;
    if (auto* t = std::get_if<core::CancelTimer>(&effect)) t->id += base;
  }
  return fx;
}

void append(Effects& out, Effects more) {
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

AveragerHost::AveragerHost(core::dht::NodeId id, core::PeerAddr self, const AveragerSettings& settings,
                           std::uint64_t seed, std::vector<float> values,
                           std::vector<core::PeerAddr> bootstrap)
    : settings_(settings),
      rng_(seed),
      node_(id, self, [&] {
        core::dht::NodeConfig config = settings.node;
        config.seed = seed ^ 0x5bd1e995u;
        return config;
      }(), nullptr, settings.dht_epoch),
      matchmaking_([&] {
        mm::MatchmakingConfig config;
        config.peer_id = self;
        config.dht_epoch = settings.dht_epoch;
        config.address_of = [](const mm::PeerIdBytes& peer) { return core::PeerAddr(peer); };
        return config;
      }(), [this] { return rng_.next_u64(); }),
      bootstrap_(std::move(bootstrap)),
      values_(std::move(values)) {}

PeerRound AveragerHost::round(std::size_t round) const {
  auto it = rounds_.find(round);
  return it == rounds_.end() ? PeerRound{} : it->second;
}

Effects AveragerHost::on_start(TimePoint now) {
  Effects out = node_.start(now, k_bootstrap, bootstrap_);
  drain(now, out);
  return out;
}

Effects AveragerHost::on_request(TimePoint now, core::RequestId id, const std::string& handle,
                                 const std::string& request) {
  return on_request_from(now, id, handle, core::PeerAddr{}, request);
}

Effects AveragerHost::on_request_from(TimePoint now, core::RequestId id, const std::string& handle,
                                      const core::PeerAddr& from, const std::string& request) {
  if (handle == mm::k_join_handle) {
    requests_[id] = Role::join;
    return absorb(now, matchmaking_.on_request(now, id, from, request));
  }
  if (handle == mm::k_aggregate_part_handle) {
    requests_[id] = Role::part;
    pb::AveragingData data;
    const std::string group = data.ParseFromString(request) ? data.group_id() : std::string{};
    if (runner_ && group == runner_group_) {
      Effects out = runner_->on_request(now, id, from, request);
      runner_done();
      return out;
    }
    // The sender's group began before this peer heard BEGIN_ALLREDUCE: hold the stream.
    held_.push_back(Held{id, from, request, false, true, group});
    return {};
  }
  Effects out = node_.on_request(now, id, handle, from, request);
  drain(now, out);
  return out;
}

Effects AveragerHost::on_request_message(TimePoint now, core::RequestId id,
                                         const Result<std::string>& message, bool last) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return {};
  const Role role = it->second;
  if (last || !message) requests_.erase(it);
  if (role == Role::join) return absorb(now, matchmaking_.on_request_message(now, id, message, last));
  if (role != Role::part) return {};
  const bool is_held = std::any_of(held_.begin(), held_.end(), [id](const Held& h) { return h.id == id; });
  if (is_held) {
    held_.push_back(Held{id, core::PeerAddr{}, message, last, false, {}});
    return {};
  }
  if (!runner_) return {};
  Effects out = runner_->on_request_message(now, id, message, last);
  runner_done();
  return out;
}

Effects AveragerHost::on_response(TimePoint now, core::CallId call, const Result<std::string>& response) {
  if (call < k_matchmaking_id_base) {
    Effects out = node_.on_response(now, call, response);
    drain(now, out);
    return out;
  }
  if (call < k_allreduce_id_base) {
    return absorb(now, matchmaking_.on_response(now, call - k_matchmaking_id_base, response));
  }
  if (!for_runner(call)) return {};
  Effects out = runner_->on_response(now, call, response);
  runner_done();
  return out;
}

Effects AveragerHost::on_message(TimePoint now, core::CallId call, const std::string& message) {
  if (call >= k_matchmaking_id_base && call < k_allreduce_id_base) {
    return absorb(now, matchmaking_.on_message(now, call - k_matchmaking_id_base, message));
  }
  if (!for_runner(call)) return {};
  Effects out = runner_->on_message(now, call, message);
  runner_done();
  return out;
}

Effects AveragerHost::on_timer(TimePoint now, core::TimerId id) {
  if (id < k_matchmaking_id_base) {
    Effects out = node_.on_timer(now, id);
    drain(now, out);
    return out;
  }
  if (id < k_allreduce_id_base) return absorb(now, matchmaking_.on_timer(now, id - k_matchmaking_id_base));
  if (!for_runner(id)) return {};
  Effects out = runner_->on_timer(now, id);
  runner_done();
  return out;
}

Effects AveragerHost::begin_round(TimePoint now, std::size_t round, mm::StepParams params) {
  Effects out;
  // Leave what is left of the previous round.
  if (matchmaking_.searching()) append(out, absorb(now, matchmaking_.cancel(now)));
  if (runner_ && !runner_->finished()) append(out, runner_->cancel(now));
  runner_.reset();
  runner_group_.clear();
  for (const Held& h : held_) {
    if (h.open) {
      out.push_back(core::Reply{h.id, make_error(errc::cancelled, "expected a part stream of this "
                                                 "peer's current group, got one of an ended round; "
                                                 "the sender falls back to local values"), true});
    }
  }
  held_.clear();
  round_ = round;
  rounds_[round].started = true;
  append(out, absorb(now, matchmaking_.start(now, std::move(params))));
  return out;
}

Effects AveragerHost::absorb(TimePoint now, mm::MatchmakingEffects mfx) {
  Effects out = shifted(std::move(mfx.rpc), k_matchmaking_id_base);
  for (auto& op : mfx.dht) {
    const core::dht::OpId id = next_op_++;
    if (auto* d = std::get_if<mm::DhtDeclare>(&op)) {
      // hivemind's declaration: key = group key, subkey = the peer id, value = looking.
      dht_ops_[id] = PendingDht{d->op, true};
      core::dht::StoreItem item{core::dht::NodeId::of_str_key(d->group_key),
                                core::dht::pack_bin(d->peer), d->looking ? k_true : k_false,
                                d->expiration};
      append(out, node_.store(now, id, {std::move(item)}));
    } else if (auto* g = std::get_if<mm::DhtGetAveragers>(&op)) {
      dht_ops_[id] = PendingDht{g->op, false};
      append(out, node_.get(now, id, {core::dht::NodeId::of_str_key(g->group_key)}, true));
    }
  }
  if (mfx.outcome) on_outcome(now, std::move(*mfx.outcome), out);
  drain(now, out);
  return out;
}

void AveragerHost::drain(TimePoint now, Effects& out) {
  for (auto& result : node_.take_completed()) {
    if (result.op == k_bootstrap) {
      bootstrapped_ = true;
      continue;
    }
    auto it = dht_ops_.find(result.op);
    if (it == dht_ops_.end()) continue;
    const PendingDht pending = it->second;
    dht_ops_.erase(it);
    if (pending.declare) {
      const bool ok = result.status.ok() && !result.stored.empty() && result.stored[0];
      append(out, absorb(now, matchmaking_.on_declared(now, pending.op, ok)));
    } else {
      const std::optional<core::dht::FoundValue> none;
      const auto& found = result.found.empty() ? none : result.found[0];
      append(out, absorb(now, matchmaking_.on_averagers(now, pending.op, averagers_of(now, found))));
    }
  }
}

std::vector<mm::Averager> AveragerHost::averagers_of(
    TimePoint now, const std::optional<core::dht::FoundValue>& found) const {
  std::vector<mm::Averager> active;
  if (!found) return active;
  const auto* dict = std::get_if<core::dht::FoundValue::Dictionary>(&found->value);
  if (dict == nullptr) return active;
  const double dht_now = node_.dht_time(now);
  for (const auto& [subkey, entry] : *dict) {
    if (entry.value != k_true || entry.expiration_time <= dht_now) continue;
    auto object = core::dht::unpack_one(subkey);
    if (!object) continue;
    const msgpack::object& o = object.value().get();
    if (o.type == msgpack::type::BIN) {
      active.push_back(mm::Averager{std::string(o.via.bin.ptr, o.via.bin.size), entry.expiration_time});
    } else if (o.type == msgpack::type::STR) {
      active.push_back(mm::Averager{std::string(o.via.str.ptr, o.via.str.size), entry.expiration_time});
    }
  }
  return active;
}

void AveragerHost::on_outcome(TimePoint now, Result<mm::GroupInfo> outcome, Effects& out) {
  PeerRound& record = rounds_[round_];
  if (!outcome) {
    record.error = outcome.error().what();
    return;
  }
  const mm::GroupInfo& group = outcome.value();
  record.grouped = true;
  record.group_id = group.group_id;
  record.group_size = group.peers.size();
  if (!group.next_group_key.empty()) next_group_key_ = group.next_group_key;

  mm::AllReduceConfig config;
  config.group_id = group.group_id;
  config.peers = group.peers;
  config.self = group.my_index;
  config.modes.assign(group.peers.size(), mm::AveragingMode::node);
  config.tensor_sizes = {static_cast<std::int64_t>(values_.size())};
  config.peer_fractions.assign(group.peers.size(), 1.0);
  config.part_size_bytes = settings_.part_size_bytes;
  config.sender_timeout = settings_.sender_timeout;
  config.reducer_timeout = settings_.reducer_timeout;
  config.call_timeout = settings_.call_timeout;
  config.id_base = k_allreduce_id_base + round_ * k_allreduce_round_ids;
  auto runner = mm::AllReduceRunner::create(std::move(config), {values_});
  if (!runner) {
    record.error = runner.error().what();
    return;
  }
  runner_.emplace(std::move(runner.value()));
  runner_group_ = group.group_id;
  append(out, runner_->start(now));
  // Serve the streams that arrived early for this group, in arrival order.
  std::vector<Held> held = std::move(held_);
  held_.clear();
  std::vector<core::RequestId> mine;
  for (Held& h : held) {
    if (h.open && h.group != runner_group_) {
      out.push_back(core::Reply{h.id, make_error(errc::invalid_argument,
                                                 "expected a part stream of this peer's group, got "
                                                 "one of another group; the sender falls back to "
                                                 "local values"), true});
      continue;
    }
    if (h.open) {
      mine.push_back(h.id);
      append(out, runner_->on_request(now, h.id, h.from, h.message.value()));
    } else if (std::find(mine.begin(), mine.end(), h.id) != mine.end()) {
      append(out, runner_->on_request_message(now, h.id, h.message, h.last));
    }
  }
  runner_done();
}

void AveragerHost::runner_done() {
  if (!runner_ || !runner_->finished()) return;
  PeerRound& record = rounds_[round_];
  if (record.completed || !record.error.empty()) return;
  const mm::AllReduceOutcome& outcome = runner_->outcome();
  if (!outcome.status) {
    record.error = outcome.status.error().what();
    return;
  }
  // tensor += alpha * delta with alpha = 1.
  if (outcome.deltas.empty()) {
    record.error = "expected one delta per tensor, got none";
    return;
  }
  const std::vector<float>& delta = outcome.deltas[0];
  for (std::size_t i = 0; i < values_.size() && i < delta.size(); ++i) values_[i] += delta[i];
  record.completed = true;
  record.failed_peers = outcome.failed_senders.size() + outcome.failed_reducers.size();
}

bool AveragerHost::for_runner(std::uint64_t id) const {
  if (!runner_ || id < k_allreduce_id_base) return false;
  return (id - k_allreduce_id_base) / k_allreduce_round_ids == round_;
}

}  // namespace apiary::sim::scenarios
