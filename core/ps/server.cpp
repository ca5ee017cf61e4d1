#include "core/ps/server.hpp"

#include <optional>

#include "core/ps/wire.hpp"

namespace apiary::core::ps {

ShardServer::ShardServer(std::string device, std::map<std::string, Shard> shards)
    : device_(std::move(device)), shards_(std::move(shards)) {}

const Shard* ShardServer::shard(const std::string& name) const {
  auto it = shards_.find(name);
  return it == shards_.end() ? nullptr : &it->second;
}

std::size_t ShardServer::held() const {
  std::size_t n = 0;
  for (const auto& [key, ids] : waiting_) n += ids.size();
  return n;
}

Effects ShardServer::on_request(TimePoint /*now*/, RequestId id, const std::string& handle, const PeerAddr& from,
                                const std::string& body) {
  if (handle == k_ps_push_handle) return push(id, body);
  if (handle == k_ps_pull_handle) return pull(id, body);
  if (handle == k_ps_join_handle) return join(id, body, from);
  return refuse(id, make_error(errc::not_found, "PS {}: expected handle {} or {}, got '{}'", device_, k_ps_push_handle,
                               k_ps_pull_handle, handle));
}

Effects ShardServer::join(RequestId id, const std::string& body, const PeerAddr& from) {
  pb::PsJoinRequest req;
  if (!req.ParseFromString(body)) {
    return refuse(id, make_error(errc::malformed, "PS {}: {} bytes are not a PsJoinRequest", device_, body.size()));
  }
  const auto replicas = shards_.empty() ? 0 : shards_.begin()->second.config().replica_hosts.size();
  if (req.replica() < 0 || static_cast<std::size_t>(req.replica()) >= replicas) {
    return refuse(id, make_error(errc::invalid_argument, "PS {}: expected a replica id in 0..{}, got {}", device_,
                                 static_cast<std::int64_t>(replicas) - 1, req.replica()));
  }
  ++stats_.sessions;
  sessions_[id] = {req.replica(), from};
  return {};  // the session stays open: nothing to answer
}

Effects ShardServer::on_request_message(TimePoint /*now*/, RequestId id, const Result<std::string>& message,
                                        bool last) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return {};
  const auto [replica, from] = it->second;
  if (message.ok()) {
    if (!last) return {};  // a session carries nothing after its first message
    sessions_.erase(it);
    return {Reply{id, std::string{}, true}};  // the replica is done: end our side too
  }
  sessions_.erase(it);
  lost_.emplace(replica, fmt::format("replica {}{} went down ({})", replica, from.empty() ? "" : " at " + from,
                                     message.error().what()));
  // Fail every request held on a synchronous shard: its step needs the lost replica.
  Effects out;
  for (auto w = waiting_.begin(); w != waiting_.end();) {
    const auto& shard = std::get<0>(w->first);
    if (!shards_.at(shard).config().sync) {
      ++w;
      continue;
    }
    for (RequestId held : w->second) {
      ++stats_.refused;
      out.push_back(Reply{held, lost_error(shard), true});
    }
    w = waiting_.erase(w);
  }
  return out;
}

Error ShardServer::lost_error(const std::string& shard) const {
  return make_error(errc::unavailable,
                    "PS {}: shard '{}' is synchronous and {}; its steps can no longer complete: restart the job",
                    device_, shard, lost_.begin()->second);
}

Effects ShardServer::refuse(RequestId id, Error error) {
  ++stats_.refused;
  return {Reply{id, std::move(error), true}};
}

Shard* ShardServer::find(const std::string& name, RequestId id, Effects& out) {
  auto it = shards_.find(name);
  if (it != shards_.end()) return &it->second;
  std::string names;
  for (const auto& [n, s] : shards_) names += (names.empty() ? "" : ", ") + n;
  out = refuse(id, make_error(errc::not_found,
                              "PS {}: expected a shard it holds ({}), got '{}'; do the replicas and the PS "
                              "processes run the same strategy and --peers?",
                              device_, names, name));
  return nullptr;
}

Effects ShardServer::push(RequestId id, const std::string& body) {
  pb::PsPushRequest req;
  if (!req.ParseFromString(body)) {
    return refuse(id, make_error(errc::malformed, "PS {}: {} bytes are not a PsPushRequest", device_, body.size()));
  }
  Effects out;
  Shard* s = find(req.shard(), id, out);
  if (s == nullptr) return out;
  if (!lost_.empty() && s->config().sync) return refuse(id, lost_error(req.shard()));
  waiting_[Key{req.shard(), false, req.replica(), req.step()}].push_back(id);
  auto released = s->push(from_pb(req));
  if (!released) {
    auto& ids = waiting_[Key{req.shard(), false, req.replica(), req.step()}];
    ids.pop_back();
    if (ids.empty()) waiting_.erase(Key{req.shard(), false, req.replica(), req.step()});
    return refuse(id, make_error(released.error().code, "PS {}: {}", device_, released.error().message));
  }
  return answer(req.shard(), *released, {});
}

Effects ShardServer::pull(RequestId id, const std::string& body) {
  pb::PsPullRequest req;
  if (!req.ParseFromString(body)) {
    return refuse(id, make_error(errc::malformed, "PS {}: {} bytes are not a PsPullRequest", device_, body.size()));
  }
  Effects out;
  Shard* s = find(req.shard(), id, out);
  if (s == nullptr) return out;
  if (!lost_.empty() && s->config().sync) return refuse(id, lost_error(req.shard()));
  const Key key{req.shard(), true, req.replica(), req.step()};
  waiting_[key].push_back(id);
  auto released = s->pull(req.replica(), req.step());
  if (!released) {
    waiting_[key].pop_back();
    if (waiting_[key].empty()) waiting_.erase(key);
    return refuse(id, make_error(released.error().code, "PS {}: {}", device_, released.error().message));
  }
  return answer(req.shard(), *released, {});
}

Effects ShardServer::answer(const std::string& shard, const Released& released, Effects out) {
  // Each released (replica, step) answers the oldest request waiting for it.
  auto take = [&](const Key& key) -> std::optional<RequestId> {
    auto it = waiting_.find(key);
    if (it == waiting_.end() || it->second.empty()) return std::nullopt;
    const RequestId id = it->second.front();
    it->second.pop_front();
    if (it->second.empty()) waiting_.erase(it);
    return id;
  };
  for (const auto& ack : released.acks) {
    if (auto id = take(Key{shard, false, ack.replica, ack.step})) {
      ++stats_.pushes;
      out.push_back(Reply{*id, to_pb(shard, ack).SerializeAsString(), true});
    }
  }
  for (const auto& reply : released.pulls) {
    if (auto id = take(Key{shard, true, reply.replica, reply.step})) {
      ++stats_.pulls;
      out.push_back(Reply{*id, to_pb(shard, reply).SerializeAsString(), true});
    }
  }
  return out;
}

}  // namespace apiary::core::ps
