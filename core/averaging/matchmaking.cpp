// Matchmaking: the step, declarations in the DHT, the leader queue and the timers.
#include "core/averaging/matchmaking.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/averaging/group_key.hpp"

namespace apiary::core::averaging {

Matchmaking::Matchmaking(MatchmakingConfig config, NextU64 rng)
    : config_(std::move(config)), rng_(std::move(rng)) {
  if (!config_.address_of) config_.address_of = address_of_multiaddr;
}

double Matchmaking::wanted_expiration(TimePoint now) const {
  const double earliest = dht_now(now) + to_seconds(params_.min_matchmaking_time);
  return std::min(std::max(params_.scheduled_time, earliest), params_.deadline);
}

MatchmakingEffects Matchmaking::start(TimePoint now, StepParams params) {
  MatchmakingEffects fx;
  if (active_) {
    fx.outcome = make_error(errc::invalid_argument,
                            "matchmaking: expected no running step, got start() while one runs; "
                            "wait for its outcome or cancel() it first");
    return fx;
  }
  if (auto st = validate(params); !st) {
    fx.outcome = st.error();
    return fx;
  }
  params_ = std::move(params);
  active_ = true;
  declared_exp_.reset();
  declared_ = false;
  declare_op_ = 0;
  expiration_deferred_ = false;
  queue_.clear();
  past_attempts_.clear();
  suggestions_.clear();
  queue_op_ = 0;
  join_.reset();
  followers_.clear();
  // Arm the deadline, declare (a client never does), and read who else is looking.
  if (std::isfinite(params_.deadline)) {
    fx.rpc.push_back(SetTimer{k_deadline_timer, at_dht(params_.deadline)});
  }
  if (!params_.client_mode) declare(now, fx);
  read_queue(fx);
  return fx;
}

MatchmakingEffects Matchmaking::cancel(TimePoint now) {
  MatchmakingEffects fx;
  if (!active_) return fx;
  finish(now, fx,
         make_error(errc::cancelled, "matchmaking: the step was cancelled by its caller before "
                                     "a group was found"));
  return fx;
}

void Matchmaking::declare(TimePoint now, MatchmakingEffects& fx) {
  const double expiration = wanted_expiration(now);
  declared_exp_ = expiration;
  declare_op_ = next_op_++;
  fx.dht.push_back(DhtDeclare{declare_op_, params_.group_key, config_.peer_id, true, expiration});
  fx.rpc.push_back(SetTimer{k_expiration_timer, at_dht(expiration)});
}

void Matchmaking::read_queue(MatchmakingEffects& fx) {
  if (queue_op_ != 0) return;  // one read at a time; its answer refreshes the whole queue
  queue_op_ = next_op_++;
  fx.dht.push_back(DhtGetAveragers{queue_op_, params_.group_key});
}

MatchmakingEffects Matchmaking::on_declared(TimePoint /*now*/, DhtOpId op, bool ok) {
  MatchmakingEffects fx;
  if (!active_ || op != declare_op_) return fx;
  declare_op_ = 0;
  // A failed store leaves the previous state; the next expiration declares again.
  if (ok) declared_ = true;
  // Declared: whoever declared meanwhile is visible now; look for a leader among them.
  if (ok && !join_ && queue_.empty()) read_queue(fx);
  return fx;
}

MatchmakingEffects Matchmaking::on_averagers(TimePoint now, DhtOpId op, std::vector<Averager> active) {
  MatchmakingEffects fx;
  if (!active_ || op != queue_op_) return fx;
  queue_op_ = 0;
  // The queue: everyone looking under our key, but not us and not a leader already
  // asked at this same declaration.
  queue_.clear();
  for (auto& a : active) {
    if (a.peer == config_.peer_id || a.peer.empty() || !std::isfinite(a.expiration)) continue;
    if (past_attempts_.count({a.peer, a.expiration}) != 0) continue;
    queue_.insert({a.expiration, std::move(a.peer)});
  }
  try_next_leader(now, fx);
  return fx;
}

MatchmakingEffects Matchmaking::on_timer(TimePoint now, TimerId id) {
  MatchmakingEffects fx;
  if (!active_) return fx;
  switch (id) {
    case k_expiration_timer:
      on_expiration(now, fx);
      break;
    case k_deadline_timer:
      on_deadline(now, fx);
      break;
    case k_join_timer:
      // The leader did not answer in time: give up on it.
      if (join_) end_join(now, fx, /*cancel_call=*/true, {});
      break;
    case k_refresh_timer:
      read_queue(fx);
      break;
    default:
      break;
  }
  return fx;
}

bool Matchmaking::assemble_or_disband(TimePoint now, MatchmakingEffects& fx) {
  // Alone and asking a leader: wait for its answer rather than forming a group of one.
  const bool can_lead = !params_.client_mode && (!followers_.empty() || !join_);
  if (can_lead && followers_.size() + 1 >= params_.min_group_size) {
    assemble(now, fx);
    return true;
  }
  if (!followers_.empty()) disband(fx);
  return false;
}

void Matchmaking::on_expiration(TimePoint now, MatchmakingEffects& fx) {
  // Following a leader pauses the search; the expiration is handled when that ends.
  if (join_ && join_->accepted) {
    expiration_deferred_ = true;
    return;
  }
  expiration_deferred_ = false;
  // As a leader: assemble when min_group_size is met, else disband.
  if (assemble_or_disband(now, fx)) return;
  // Compared on the timers' clock, so the expiration capped at the deadline ends the step.
  if (std::isfinite(params_.deadline) && now >= at_dht(params_.deadline)) {
    finish(now, fx, no_group_error(now));
    return;
  }
  // Still searching: declare again with a later expiration, and re-read the queue.
  if (!params_.client_mode) declare(now, fx);
  read_queue(fx);
}

void Matchmaking::on_deadline(TimePoint now, MatchmakingEffects& fx) {
  // The deadline caps every expiration, so a leader meeting min_group_size still forms
  // its group; anyone else, including a follower still waiting, gives up.
  if (!(join_ && join_->accepted) && assemble_or_disband(now, fx)) return;
  finish(now, fx, no_group_error(now));
}

Error Matchmaking::no_group_error(TimePoint now) const {
  return make_error(errc::deadline_exceeded,
                    "matchmaking: could not find a group: expected at least {} peers under '{}' "
                    "by the deadline {:.3f} (DHT s), got none to join at {:.3f}; start more peers, "
                    "lower min_group_size or allow a longer timeout",
                    params_.min_group_size, params_.group_key, params_.deadline, dht_now(now));
}

void Matchmaking::finish(TimePoint /*now*/, MatchmakingEffects& fx, Result<GroupInfo> outcome) {
  // Abandon an open join call, release our followers, stop every timer.
  if (join_) {
    fx.rpc.push_back(Cancel{join_->call, "the follower's matchmaking step ended"});
    join_.reset();
  }
  if (!followers_.empty()) disband(fx);
  for (TimerId t : {k_expiration_timer, k_deadline_timer, k_join_timer, k_refresh_timer}) {
    fx.rpc.push_back(CancelTimer{t});
  }
  // Leave: a `false` declaration just after the last one overrides it.
  if (declared_exp_) {
    const double leave = std::nextafter(*declared_exp_, std::numeric_limits<double>::infinity());
    fx.dht.push_back(DhtDeclare{next_op_++, params_.group_key, config_.peer_id, false, leave});
  }
  active_ = false;
  declared_exp_.reset();
  declared_ = false;
  declare_op_ = 0;
  queue_op_ = 0;
  expiration_deferred_ = false;
  queue_.clear();
  fx.outcome = std::move(outcome);
}

Result<GroupInfo> Matchmaking::make_group(std::string group_id, std::vector<PeerIdBytes> peers,
                                          std::vector<std::string> gathered,
                                          PeerIdBytes leader) const {
  const auto me = std::find(peers.begin(), peers.end(), config_.peer_id);
  if (me == peers.end()) {
    return make_error(errc::protocol,
                      "matchmaking: expected this peer among the group's {} members, got a group "
                      "without it from leader of {} bytes; look for another group",
                      peers.size(), leader.size());
  }
  auto key = parse_group_key(params_.group_key);
  if (!key) return key.error();
  GroupInfo g;
  g.my_index = static_cast<std::size_t>(me - peers.begin());
  // Moshpit: move to the bucket drawn for our place in the group (over target_group_size
  // buckets when the group fits in them, else over the next power of two).
  std::optional<std::size_t> target;
  if (params_.target_group_size >= peers.size()) target = params_.target_group_size;
  auto bits = next_group_bits(key->bits, group_id, peers.size(), g.my_index, target);
  if (!bits) return bits.error();
  g.next_group_bits = std::move(*bits);
  g.next_group_key = key->prefix + ".0b" + g.next_group_bits;
  g.group_id = std::move(group_id);
  g.peers = std::move(peers);
  g.gathered = std::move(gathered);
  g.leader = std::move(leader);
  return g;
}

std::vector<PeerIdBytes> Matchmaking::followers() const {
  std::vector<PeerIdBytes> out;
  for (const auto& [id, f] : followers_) out.push_back(id);
  return out;
}

std::optional<PeerIdBytes> Matchmaking::current_leader() const {
  if (join_ && join_->accepted) return join_->leader;
  return std::nullopt;
}

}  // namespace apiary::core::averaging
