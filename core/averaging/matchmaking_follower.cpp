// Matchmaking, follower side: asking leaders to take us, following disbanded groups.
#include <algorithm>
#include <iterator>
#include <limits>
#include <utility>

#include "averaging.pb.h"
#include "core/averaging/matchmaking.hpp"

namespace apiary::core::averaging {

void Matchmaking::try_next_leader(TimePoint now, MatchmakingEffects& fx) {
  if (!active_ || join_) return;
  // Only a peer that precedes us in (expiration, PeerID) order may lead us; a client,
  // which never declares, may be led by anyone.
  const double mine = (params_.client_mode || !declared_exp_)
                          ? std::numeric_limits<double>::infinity()
                          : *declared_exp_;
  const std::pair<double, PeerIdBytes> self{mine, config_.peer_id};
  if (!queue_.empty() && *queue_.begin() < self) {
    auto head = *queue_.begin();
    queue_.erase(queue_.begin());
    past_attempts_.insert({head.second, head.first});
    send_join(now, fx, head.second);
    return;
  }
  // Nobody to ask yet: read the queue again a little later, at most halfway to our own
  // expiration. Peers that start together read an empty queue before any of them has
  // declared; were the next read due at the expiration itself, it would find the others
  // between their expiring and their renewed declarations, round after round.
  Duration wait = params_.request_timeout;
  if (declared_exp_) {
    const Duration half = (at_dht(*declared_exp_) - now) / 2;
    wait = std::max(std::min(wait, half), params_.request_timeout / 8);
  }
  fx.rpc.push_back(SetTimer{k_refresh_timer, now + wait});
}

void Matchmaking::send_join(TimePoint now, MatchmakingEffects& fx, const PeerIdBytes& leader) {
  // Ask with our declared expiration (or the one we would declare, as a client).
  const double expiration =
      (!params_.client_mode && declared_exp_) ? *declared_exp_ : wanted_expiration(now);
  pb::JoinRequest r;
  r.set_schema_hash(params_.schema_hash);
  r.set_expiration(expiration);
  r.set_gather(params_.gather);
  r.set_client_mode(params_.client_mode);
  r.set_group_key(params_.group_key);
  const CallId call = next_call_++;
  // The call may last until our expiration plus a request timeout for each answer;
  // the join timer enforces the tighter bound of the stage we are in.
  const Duration until_expiration = std::max(Duration::zero(), at_dht(expiration) - now);
  Call c;
  c.id = call;
  c.peer = config_.address_of(leader);
  c.handle = config_.join_handle;
  c.request = r.SerializeAsString();
  c.timeout = until_expiration + 2 * params_.request_timeout;
  c.caller = config_.peer_id;
  c.stream = true;
  c.last = true;
  fx.rpc.push_back(std::move(c));
  join_ = Join{call, leader, expiration, false};
  // The first answer must come within request_timeout.
  fx.rpc.push_back(SetTimer{k_join_timer, now + params_.request_timeout});
}

void Matchmaking::end_join(TimePoint now, MatchmakingEffects& fx, bool cancel_call,
                           const PeerIdBytes& suggested) {
  if (cancel_call) fx.rpc.push_back(Cancel{join_->call, "the leader did not answer in time"});
  join_.reset();
  fx.rpc.push_back(CancelTimer{k_join_timer});
  // A disbanded group names the leader to ask next.
  if (!suggested.empty() && suggested != config_.peer_id) {
    send_join(now, fx, suggested);
    return;
  }
  // The search resumes: first the expiration that passed while following, if any.
  if (expiration_deferred_) {
    on_expiration(now, fx);
    if (!active_ || join_) return;
  }
  try_next_leader(now, fx);
}

MatchmakingEffects Matchmaking::on_message(TimePoint now, CallId call, const std::string& message) {
  MatchmakingEffects fx;
  if (!active_ || !join_ || join_->call != call) return fx;
  pb::MessageFromLeader m;
  if (!m.ParseFromString(message)) {
    end_join(now, fx, /*cancel_call=*/true, {});
    return fx;
  }
  if (!join_->accepted) {
    if (m.code() != pb::ACCEPTED) {
      // A rejection moves on to the next candidate; the leader ends the call with it. A
      // leader that read its declaration back before the DHT confirmed it (NOT_DECLARED)
      // stays a candidate: it is asked again at the next read of the queue. A follower
      // (NOT_A_LEADER) names its leader, which is asked next (once per step).
      if (m.code() == pb::NOT_DECLARED) {
        for (auto it = past_attempts_.begin(); it != past_attempts_.end();) {
          it = it->first == join_->leader ? past_attempts_.erase(it) : std::next(it);
        }
      }
      PeerIdBytes next;
      if (m.code() == pb::NOT_A_LEADER && !m.suggested_leader().empty() &&
          suggestions_.insert(m.suggested_leader()).second) {
        next = m.suggested_leader();
      }
      end_join(now, fx, /*cancel_call=*/false, next);
      return fx;
    }
    // Accepted: hand our own followers to this leader, then wait for its second message
    // until our expiration plus a request timeout.
    join_->accepted = true;
    disband(fx);
    const Duration until_expiration = std::max(Duration::zero(), at_dht(join_->expiration) - now);
    fx.rpc.push_back(SetTimer{k_join_timer, now + until_expiration + params_.request_timeout});
    return fx;
  }
  if (m.code() == pb::BEGIN_ALLREDUCE) {
    follower_begin(now, fx, m);
    return fx;
  }
  if ((m.code() == pb::GROUP_DISBANDED || m.code() == pb::CANCELLED) &&
      !m.suggested_leader().empty()) {
    end_join(now, fx, /*cancel_call=*/false, m.suggested_leader());
    return fx;
  }
  end_join(now, fx, /*cancel_call=*/false, {});
  return fx;
}

MatchmakingEffects Matchmaking::on_response(TimePoint now, CallId call,
                                            const Result<std::string>& /*end*/) {
  MatchmakingEffects fx;
  // The call ended (or failed) before a decisive message: try the next leader.
  if (!active_ || !join_ || join_->call != call) return fx;
  end_join(now, fx, /*cancel_call=*/false, {});
  return fx;
}

void Matchmaking::follower_begin(TimePoint now, MatchmakingEffects& fx,
                                 const pb::MessageFromLeader& m) {
  // A well-formed group: an id, members aligned with their gathered bytes, and us in it.
  const auto& ids = m.ordered_peer_ids();
  const bool has_me = std::find(ids.begin(), ids.end(), config_.peer_id) != ids.end();
  if (m.group_id().empty() || !has_me || m.gathered_size() != ids.size()) {
    end_join(now, fx, /*cancel_call=*/false, {});
    return;
  }
  std::vector<PeerIdBytes> peers(ids.begin(), ids.end());
  std::vector<std::string> gathered(m.gathered().begin(), m.gathered().end());
  PeerIdBytes leader = join_->leader;
  join_.reset();  // the leader ended the call with this message
  finish(now, fx, make_group(m.group_id(), std::move(peers), std::move(gathered), std::move(leader)));
}

}  // namespace apiary::core::averaging
