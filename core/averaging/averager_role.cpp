#include "core/averaging/averager_role.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/averaging/load_balancing.hpp"
#include "core/dht/msgpack_value.hpp"

namespace apiary::core::averaging {

namespace {

void append(Effects& out, Effects more) {
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

std::string wrap_gather(std::optional<double> bandwidth, AveragingMode mode, const std::string& user) {
  const std::string nil("\xc0", 1);
  const std::string packed_mode(1, static_cast<char>(static_cast<int>(mode)));  // positive fixint
  return dht::pack_tuple({bandwidth ? dht::pack_float(*bandwidth) : nil, packed_mode, dht::pack_bin(user)});
}

Result<MemberGather> unwrap_gather(const std::string& gather) {
  auto bad = [](const char* what) {
    return make_error(errc::invalid_argument,
                      "expected a member's gather as msgpack [bandwidth or nil, mode 0-2, bin], got {}; "
                      "every member must run the same averager version", what);
  };
  auto items = dht::unpack_tuple(gather);
  if (!items || items.value().size() != 3) return bad("another shape");
  MemberGather out;
  auto bandwidth = dht::unpack_one(items.value()[0]);
  auto mode = dht::unpack_one(items.value()[1]);
  auto user = dht::unpack_one(items.value()[2]);
  if (!bandwidth || !mode || !user) return bad("undecodable items");
  const msgpack::object& b = bandwidth.value().get();
  if (b.type == msgpack::type::FLOAT64 || b.type == msgpack::type::FLOAT32) {
    if (!std::isfinite(b.via.f64) || b.via.f64 < 0) return bad("a negative or non-finite bandwidth");
    out.bandwidth = b.via.f64;
  } else if (b.type == msgpack::type::POSITIVE_INTEGER) {
    out.bandwidth = static_cast<double>(b.via.u64);
  } else if (b.type != msgpack::type::NIL) {
    return bad("a bandwidth that is not a number");
  }
  const msgpack::object& m = mode.value().get();
  if (m.type != msgpack::type::POSITIVE_INTEGER || m.via.u64 > 2) return bad("an unknown mode");
  out.mode = static_cast<AveragingMode>(m.via.u64);
  const msgpack::object& u = user.value().get();
  if (u.type != msgpack::type::BIN) return bad("user bytes that are not bin");
  out.user.assign(u.via.bin.ptr, u.via.bin.size);
  return out;
}

AveragerRole::AveragerRole(AveragerRoleConfig config, NextU64 rng)
    : config_(std::move(config)), matchmaking_([&] {
        MatchmakingConfig mm;
        mm.peer_id = config_.peer_id;
        mm.dht_epoch = config_.dht_epoch;
        mm.address_of = config_.address_of;
        mm.join_handle = config_.join_handle;
        return mm;
      }(), std::move(rng)) {
  if (!config_.address_of) config_.address_of = address_of_multiaddr;
  if (config_.powersgd) powersgd_.emplace(*config_.powersgd);
}

bool AveragerRole::serves(const std::string& handle) const {
  return handle == config_.join_handle || handle == config_.part_handle;
}

std::vector<std::string> AveragerRole::handles() const {
  std::vector<std::string> bases{config_.part_handle};
  if (config_.serve_join) bases.emplace_back(config_.join_handle);
  return config_.addressing.served(bases);
}

AveragerEffects AveragerRole::step(TimePoint now, AveragerStep step) {
  AveragerEffects out;
  if (step_) {
    out.outcome = make_error(errc::unavailable,
                             "expected one averaging step at a time, but a step is running; wait "
                             "for it or cancel it first");
    return out;
  }
  if (step.tensor_sizes.empty()) {
    for (const auto& t : step.tensors) step.tensor_sizes.push_back(static_cast<std::int64_t>(t.size()));
  }
  if (step.tensors.size() != step.tensor_sizes.size()) {
    out.outcome = make_error(errc::invalid_argument, "expected {} tensors (the schema), got {}",
                             step.tensor_sizes.size(), step.tensors.size());
    return out;
  }
  if (powersgd_) {
    if (auto valid = validate(powersgd_->config, step.tensor_sizes); !valid) {
      out.outcome = valid.error();
      return out;
    }
  }
  if (step.mode == AveragingMode::aux) step.params.weight = 0;
  step.params.client_mode = step.mode == AveragingMode::client;
  step_ = std::move(step);
  attempts_ = 1;
  triggered_ = false;
  absorb(now, matchmaking_.start(now, matchmaking_params()), out);
  return out;
}

StepParams AveragerRole::matchmaking_params() const {
  StepParams params = step_->params;
  const bool client = step_->mode == AveragingMode::client;
  params.gather = wrap_gather(client ? std::optional<double>(0.0) : step_->bandwidth, step_->mode,
                              step_->params.gather);
  return params;
}

AveragerEffects AveragerRole::trigger(TimePoint now, std::vector<std::vector<float>>* fresh) {
  AveragerEffects out;
  if (!step_) return out;
  if (fresh != nullptr && !runner_ && fresh->size() == step_->tensors.size()) {
    bool same_sizes = true;
    for (std::size_t t = 0; t < fresh->size(); ++t) same_sizes = same_sizes && (*fresh)[t].size() == step_->tensors[t].size();
    if (same_sizes) step_->tensors = std::move(*fresh);  // the values the trainer holds now
  }
  triggered_ = true;
  if (group_ && phases_started_ == 0) begin_phase(now, out);
  return out;
}

bool AveragerRole::set_weight(double weight) {
  if (!step_ || phases_started_ > 0 || !std::isfinite(weight) || weight < 0) return false;
  if (step_->mode != AveragingMode::aux) step_->params.weight = weight;
  return true;
}

AveragerEffects AveragerRole::cancel(TimePoint now) {
  AveragerEffects out;
  if (!step_) return out;
  if (matchmaking_.searching()) {
    MatchmakingEffects mfx = matchmaking_.cancel(now);
    append(out.rpc, std::move(mfx.rpc));
    out.dht = std::move(mfx.dht);
  }
  if (runner_ && !runner_->finished()) append(out.rpc, runner_->cancel(now));
  finish(make_error(errc::cancelled, "the averaging step was cancelled by its caller"), out);
  return out;
}

void AveragerRole::absorb(TimePoint now, MatchmakingEffects mfx, AveragerEffects& out) {
  append(out.rpc, std::move(mfx.rpc));
  for (auto& op : mfx.dht) out.dht.push_back(std::move(op));
  if (!mfx.outcome || !step_) return;
  if (mfx.outcome->ok()) {
    on_group(now, std::move(mfx.outcome->value()), out);
    return;
  }
  const Error& error = mfx.outcome->error();
  const double dht_now = to_seconds(now) + config_.dht_epoch;
  const bool retry = error.code != errc::invalid_argument && error.code != errc::cancelled &&
                     dht_now < step_->params.deadline;
  if (!retry) {
    finish(Result<AveragerStepResult>(error), out);
    return;
  }
  ++attempts_;
  absorb(now, matchmaking_.start(now, matchmaking_params()), out);
}

void AveragerRole::on_group(TimePoint now, GroupInfo group, AveragerEffects& out) {
  AveragerStepResult result;
  std::vector<std::optional<double>> bandwidths;
  for (std::size_t i = 0; i < group.gathered.size(); ++i) {
    auto member = unwrap_gather(group.gathered[i]);
    if (!member) {
      refuse_held(out, "the group's metadata was malformed");
      finish(make_error(errc::invalid_argument, "group member {}: {}", i, member.error().what()), out);
      return;
    }
    result.modes.push_back(member.value().mode);
    bandwidths.push_back(member.value().mode == AveragingMode::client ? std::optional<double>(0.0)
                                                                      : member.value().bandwidth);
    group.gathered[i] = std::move(member.value().user);
  }
  std::int64_t total = 0;
  for (std::int64_t size : step_->tensor_sizes) total += size;
  auto shares = load_balance_peers(total, bandwidths, step_->min_vector_size);
  if (!shares) {
    refuse_held(out, "the group could not split the tensors");
    finish(Result<AveragerStepResult>(shares.error()), out);
    return;
  }
  result.shares = std::move(shares.value());
  bandwidths_ = std::move(bandwidths);
  if (!group.next_group_key.empty()) next_group_key_ = group.next_group_key;
  result.group = std::move(group);
  result.attempts = attempts_;
  group_ = std::move(result);
  if (!step_->require_trigger || triggered_) begin_phase(now, out);
}

std::vector<std::string> AveragerRole::phase_group_ids() const {
  const std::string& id = group_->group.group_id;
  if (!powersgd_) return {id};
  const auto& matrices = powersgd_->config.matrices;
  const bool compressed = std::any_of(matrices.begin(), matrices.end(), [](const auto& m) { return m.compressed(); });
  if (!compressed) return {id + ".phase_q"};
  return {id + ".phase_p", id + ".phase_q"};
}

bool AveragerRole::awaited(const std::string& group) const {
  if (!group_) return phases_started_ == 0;  // the group is not known yet: any may be it
  const auto ids = phase_group_ids();
  return std::find(ids.begin() + static_cast<std::ptrdiff_t>(std::min(phases_started_, ids.size())), ids.end(),
                   group) != ids.end();
}

void AveragerRole::begin_phase(TimePoint now, AveragerEffects& out, std::vector<std::vector<float>> previous) {
  const auto ids = phase_group_ids();
  const std::size_t phase = phases_started_++;
  std::vector<std::vector<float>> tensors;
  std::vector<std::int64_t> sizes;
  std::vector<pb::CompressionType> codecs;
  if (!powersgd_) {
    tensors = std::move(step_->tensors);
    sizes = step_->tensor_sizes;
    codecs = step_->codecs;
  } else if (phase == 0 && ids.size() == 2) {
    powersgd_phase_p(tensors, sizes, codecs);
  } else {
    powersgd_phase_q(std::move(previous), tensors, sizes, codecs);
  }
  start_runner(now, ids[phase], std::move(tensors), std::move(sizes), std::move(codecs), out);
}

void AveragerRole::start_runner(TimePoint now, const std::string& group_id, std::vector<std::vector<float>> tensors,
                                std::vector<std::int64_t> sizes, std::vector<pb::CompressionType> codecs,
                                AveragerEffects& out) {
  const AveragerStep& s = *step_;
  AllReduceConfig config;
  config.group_id = group_id;
  for (const auto& peer : group_->group.peers) config.peers.push_back(config_.address_of(peer));
  config.self = group_->group.my_index;
  config.modes = group_->modes;
  config.weight = s.mode == AveragingMode::aux ? 0.0 : s.params.weight;
  if (powersgd_) {  // each phase splits its own elements
    std::int64_t total = 0;
    for (std::int64_t size : sizes) total += size;
    auto shares = load_balance_peers(total, bandwidths_, s.min_vector_size);
    if (!shares) {
      refuse_held(out, "the group could not split the tensors");
      finish(Result<AveragerStepResult>(shares.error()), out);
      return;
    }
    for (std::int64_t share : shares.value()) config.peer_fractions.push_back(static_cast<double>(share));
  } else {
    for (std::int64_t share : group_->shares) config.peer_fractions.push_back(static_cast<double>(share));
  }
  config.tensor_sizes = std::move(sizes);
  config.codecs = std::move(codecs);
  config.part_size_bytes = s.part_size_bytes;
  config.sender_timeout = s.sender_timeout;
  config.reducer_timeout = s.reducer_timeout;
  config.call_timeout = s.call_timeout;
  config.handle = config_.part_handle;
  config.deferred_reductions = !config_.device_role.empty();
  config.splice_parts = config_.splice_parts;
  if (config_.identical_results && !powersgd_) {
    config.identical_results = config.averages_in_place = config.answer_averages = true;
  }
  ++round_;
  config.id_base = runner_base();
  auto runner = AllReduceRunner::create(std::move(config), std::move(tensors));
  if (!runner) {
    refuse_held(out, "this peer could not start the group's all-reduce");
    finish(Result<AveragerStepResult>(runner.error()), out);
    return;
  }
  runner_group_ = group_id;
  runner_.emplace(std::move(runner.value()));
  runner_effects(runner_->start(now), out);
  if (runner_) serve_held(now, out);
}

void AveragerRole::serve_held(TimePoint now, AveragerEffects& out) {
  std::vector<Held> held = std::move(held_);
  held_.clear();
  std::vector<RequestId> mine;
  std::vector<RequestId> kept;  // streams of a later phase of this step
  for (Held& h : held) {
    if (!runner_) break;
    if (h.open && h.group != runner_group_) {
      if (awaited(h.group)) {
        kept.push_back(h.id);
        held_.push_back(std::move(h));
        continue;
      }
      out.rpc.push_back(Reply{h.id, make_error(errc::invalid_argument,
                                               "expected a part stream of this peer's group, got one "
                                               "of another group; the sender keeps its local values"),
                              true});
      continue;
    }
    if (h.open) {
      mine.push_back(h.id);
      runner_effects(runner_->on_request(now, h.id, h.from, std::move(h.message.value())), out);
    } else if (std::find(mine.begin(), mine.end(), h.id) != mine.end()) {
      runner_effects(runner_->on_request_message(now, h.id, std::move(h.message), h.last), out);
    } else if (std::find(kept.begin(), kept.end(), h.id) != kept.end()) {
      held_.push_back(std::move(h));
    }
  }
}

void AveragerRole::refuse_held(AveragerEffects& out, const char* why) {
  for (const Held& h : held_) {
    if (!h.open) continue;
    out.rpc.push_back(Reply{h.id, make_error(errc::cancelled, "expected this peer to reduce its part of "
                                             "the group, but {}; the sender keeps its local values", why),
                            true});
  }
  held_.clear();
}

void AveragerRole::runner_effects(Effects fx, AveragerEffects& out) {
  append(out.rpc, std::move(fx));
  if (runner_) {
    for (ReduceJob& job : runner_->take_reduce_jobs()) out.reduce.push_back(std::move(job));
  }
  if (!runner_ || !runner_->finished() || !step_) return;
  AllReduceOutcome outcome = runner_->take_outcome();  // finish() drops the runner
  if (!outcome.status) {
    finish(Result<AveragerStepResult>(outcome.status.error()), out);
    return;
  }
  if (powersgd_ && phases_started_ < phase_group_ids().size()) {
    runner_.reset();  // lower() begins the next phase, outside the runner's calls
    phase_done_ = std::move(outcome);
    return;
  }
  AveragerStepResult result = std::move(*group_);
  result.deltas = powersgd_ ? powersgd_deltas(std::move(outcome.deltas)) : std::move(outcome.deltas);
  result.averages = std::move(outcome.averages);
  for (auto& peer : outcome.failed_senders) result.failed_senders.push_back(std::move(peer));
  for (auto& peer : outcome.failed_reducers) result.failed_reducers.push_back(std::move(peer));
  for (auto* peers : {&result.failed_senders, &result.failed_reducers}) {
    std::sort(peers->begin(), peers->end());
    peers->erase(std::unique(peers->begin(), peers->end()), peers->end());
  }
  finish(std::move(result), out);
}

void AveragerRole::finish(Result<AveragerStepResult> outcome, AveragerEffects& out) {
  out.outcome = std::move(outcome);
  refuse_held(out, "its averaging step ended");
  step_.reset();
  group_.reset();
  runner_.reset();
  triggered_ = false;
  phases_started_ = 0;
  runner_group_.clear();
  phase_done_.reset();
  psgd_m_.clear();
  psgd_p_.clear();
  psgd_q_.clear();
}

bool AveragerRole::runner_id(std::uint64_t id) const {
  return runner_ && id >= runner_base() && id < runner_base() + k_round_ids;
}

}  // namespace apiary::core::averaging
