// Matchmaking, leader side: serving join requests, assembling and disbanding the group.
#include <cmath>
#include <cstdint>
#include <utility>

#include "averaging.pb.h"
#include "core/averaging/group_key.hpp"
#include "core/averaging/matchmaking.hpp"

namespace apiary::core::averaging {

std::optional<int> Matchmaking::check_request(TimePoint /*now*/, const PeerIdBytes& from,
                                              const pb::JoinRequest& r) const {
  // The checks of §3.3, in their order; the first that fails names the rejection.
  if (!active_) return pb::NOT_LOOKING_FOR_GROUP;
  if (r.schema_hash().empty() || !std::isfinite(r.expiration()) || params_.client_mode ||
      from.empty()) {
    return pb::PROTOCOL_VIOLATION;
  }
  if (r.schema_hash() != params_.schema_hash) return pb::BAD_SCHEMA_HASH;
  if (r.group_key() != params_.group_key) return pb::BAD_GROUP_KEY;
  if (!declared_ || !declared_exp_) return pb::NOT_DECLARED;
  if (*declared_exp_ > r.expiration()) return pb::BAD_EXPIRATION_TIME;
  if (join_ && join_->accepted) return pb::NOT_A_LEADER;
  if (from == config_.peer_id || followers_.count(from) != 0) return pb::DUPLICATE_PEER_ID;
  if (params_.target_group_size != 0 && followers_.size() + 1 >= params_.target_group_size) {
    return pb::GROUP_IS_FULL;
  }
  return std::nullopt;
}

MatchmakingEffects Matchmaking::on_request(TimePoint now, RequestId id, const PeerIdBytes& from,
                                           const std::string& body) {
  MatchmakingEffects fx;
  pb::MessageFromLeader answer_msg;
  pb::JoinRequest request;
  if (active_ && !request.ParseFromString(body)) {
    answer_msg.set_code(pb::PROTOCOL_VIOLATION);
    answer(fx, id, answer_msg, /*last=*/true);
    return fx;
  }
  if (auto code = check_request(now, from, request)) {
    answer_msg.set_code(static_cast<pb::MessageCode>(*code));
    if (*code == pb::NOT_A_LEADER) answer_msg.set_suggested_leader(join_->leader);
    answer(fx, id, answer_msg, /*last=*/true);
    return fx;
  }
  // Accept: the follower waits on this open stream for BEGIN_ALLREDUCE or GROUP_DISBANDED.
  followers_[from] = Follower{id, request.gather(), request.expiration()};
  answer_msg.set_code(pb::ACCEPTED);
  answer(fx, id, answer_msg, /*last=*/false);
  // A full group starts at once.
  if (params_.target_group_size != 0 && followers_.size() + 1 >= params_.target_group_size) {
    assemble(now, fx);
  }
  return fx;
}

MatchmakingEffects Matchmaking::on_request_message(TimePoint /*now*/, RequestId id,
                                                   const Result<std::string>& message,
                                                   bool /*last*/) {
  MatchmakingEffects fx;
  if (message.ok()) return fx;  // a follower has nothing more to say on a join stream
  // The follower cancelled or went away: it is no longer part of the group.
  for (auto it = followers_.begin(); it != followers_.end(); ++it) {
    if (it->second.request == id) {
      followers_.erase(it);
      break;
    }
  }
  return fx;
}

void Matchmaking::assemble(TimePoint now, MatchmakingEffects& fx) {
  // Group id: k_group_id_bytes random bytes.
  std::string group_id;
  while (group_id.size() < k_group_id_bytes) {
    std::uint64_t bits = rng_();
    for (int i = 0; i < 8 && group_id.size() < k_group_id_bytes; ++i, bits >>= 8) {
      group_id.push_back(static_cast<char>(bits & 0xffu));
    }
  }
  // Members: ourselves and our followers (sorted by id), then a Fisher-Yates shuffle.
  std::vector<PeerIdBytes> peers{config_.peer_id};
  std::vector<std::string> gathered{params_.gather};
  for (const auto& [id, f] : followers_) {
    peers.push_back(id);
    gathered.push_back(f.gather);
  }
  for (std::size_t i = peers.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(uniform_below(rng_, i));
    std::swap(peers[i - 1], peers[j]);
    std::swap(gathered[i - 1], gathered[j]);
  }
  // Tell every follower: BEGIN_ALLREDUCE with the group id, the order and the gathered bytes.
  pb::MessageFromLeader begin;
  begin.set_code(pb::BEGIN_ALLREDUCE);
  begin.set_group_id(group_id);
  for (std::size_t i = 0; i < peers.size(); ++i) {
    begin.add_ordered_peer_ids(peers[i]);
    begin.add_gathered(gathered[i]);
  }
  for (const auto& [id, f] : followers_) answer(fx, f.request, begin, /*last=*/true);
  followers_.clear();
  finish(now, fx, make_group(std::move(group_id), std::move(peers), std::move(gathered),
                             config_.peer_id));
}

void Matchmaking::disband(MatchmakingEffects& fx) {
  // Each follower is told to look elsewhere; if we now follow a leader, to ask it.
  pb::MessageFromLeader m;
  m.set_code(pb::GROUP_DISBANDED);
  if (join_ && join_->accepted) m.set_suggested_leader(join_->leader);
  for (const auto& [id, f] : followers_) answer(fx, f.request, m, /*last=*/true);
  followers_.clear();
}

void Matchmaking::answer(MatchmakingEffects& fx, RequestId id, const pb::MessageFromLeader& message,
                         bool last) const {
  fx.rpc.push_back(Reply{id, message.SerializeAsString(), last});
}

}  // namespace apiary::core::averaging
