#include "core/ps/server.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <limits>
#include <optional>

#include "core/ps/wire.hpp"

namespace apiary::core::ps {

ShardServer::ShardServer(std::string device, std::map<std::string, Shard> shards)
    : device_(std::move(device)), shards_(std::move(shards)) {
  // Pull answers are encoded straight from the shard's values (answer()).
  for (auto& [name, shard] : shards_) shard.set_pull_values(false);
}

namespace {
/// The job's replica count, as every shard's config has it (0 without shards).
std::size_t replica_count(const std::map<std::string, Shard>& shards) {
  return shards.empty() ? 0 : shards.begin()->second.config().replica_hosts.size();
}

/// Parses protobuf message `m` from `body`; false when it does not parse.
bool parse(google::protobuf::MessageLite& m, std::string_view body) {
  return body.size() <= static_cast<std::size_t>(std::numeric_limits<int>::max()) &&
         m.ParseFromArray(body.data(), static_cast<int>(body.size()));
}

/// `m` encoded with its map fields in key order: protobuf's own order of a map's entries
/// varies from one run to the next, and a replayed simulation must send the same bytes.
std::string encode_deterministic(const google::protobuf::MessageLite& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&coded);
  }
  return out;
}
}  // namespace

const Shard* ShardServer::shard(const std::string& name) const {
  auto it = shards_.find(name);
  return it == shards_.end() ? nullptr : &it->second;
}

std::size_t ShardServer::held() const {
  std::size_t n = 0;
  for (const auto& [key, ids] : waiting_) n += ids.size();
  return n;
}

std::vector<std::string> ShardServer::served() {
  return {k_ps_push_handle, k_ps_pull_handle, k_ps_join_handle, k_ps_optimizer_state_handle, k_ps_rejoin_handle};
}

Effects ShardServer::on(TimePoint now, Input input) {
  if (std::holds_alternative<Start>(input) && resumed_at_ && drop_after_) {
    // A replica dropped before this PS went down is not in its checkpoint: every replica
    // that does not come back within the wait is dropped again (see the file comment).
    absent_timer_ = next_timer_++;
    return {SetTimer{*absent_timer_, now + *drop_after_}};
  }
  if (auto* r = std::get_if<Request>(&input)) return on_request(now, r->id, r->handle, r->from, r->body);
  if (auto* m = std::get_if<RequestMessage>(&input)) {
    const Result<std::string> message =
        m->message.ok() ? Result<std::string>(std::string(m->message->view())) : Result<std::string>(m->message.error());
    return on_request_message(now, m->id, message, m->last);
  }
  if (auto* p = std::get_if<PeerDown>(&input)) {
    // The connection to a replica broke: its session ends as if the stream had failed.
    std::vector<RequestId> gone;
    for (const auto& [id, session] : sessions_) {
      if (session.second == p->peer) gone.push_back(id);
    }
    Effects out;
    for (RequestId id : gone) {
      auto fx = on_request_message(now, id, make_error(errc::peer_down, "the connection to {} broke", p->peer), true);
      out.insert(out.end(), std::make_move_iterator(fx.begin()), std::make_move_iterator(fx.end()));
    }
    return out;
  }
  if (auto* t = std::get_if<TimerFired>(&input)) {
    if (absent_timer_ && t->id == *absent_timer_) {
      absent_timer_.reset();
      return drop_absent();
    }
    auto it = drop_timers_.find(t->id);
    if (it == drop_timers_.end()) return {};
    const std::int32_t replica = it->second;
    drop_timers_.erase(it);
    return drop(replica);
  }
  if (auto* c = std::get_if<LocalCall>(&input)) return {unknown_method(*c, "the PS shard server")};
  return {};  // it makes no calls; its only timers drop lost replicas
}

Effects ShardServer::on_request(TimePoint now, RequestId id, const std::string& handle, const PeerAddr& from,
                                const Buffer& body) {
  if (handle == k_ps_push_handle) return push(id, body.view(), std::make_shared<const Buffer>(body));
  return on_request(now, id, handle, from, body.view());
}

Effects ShardServer::on_request(TimePoint /*now*/, RequestId id, const std::string& handle, const PeerAddr& from,
                                std::string_view body) {
  if (handle == k_ps_push_handle) return push(id, body, nullptr);
  if (handle == k_ps_pull_handle) return pull(id, body);
  if (handle == k_ps_join_handle) return join(id, body, from);
  if (handle == k_ps_optimizer_state_handle) return optimizer_state(id, body);
  if (handle == k_ps_rejoin_handle) return rejoin(id, body);
  return refuse(id, make_error(errc::not_found, "PS {}: expected handle {} or {}, got '{}'", device_, k_ps_push_handle,
                               k_ps_pull_handle, handle));
}

Shard* ShardServer::requested(RequestId id, std::string_view body, pb::PsPullRequest& req, Effects& out) {
  if (!parse(req, body)) {
    out = refuse(id, make_error(errc::malformed, "PS {}: {} bytes are not a PsPullRequest", device_, body.size()));
    return nullptr;
  }
  return find(req.shard(), id, out);
}

Effects ShardServer::optimizer_state(RequestId id, std::string_view body) {
  pb::PsPullRequest req;
  Effects out;
  Shard* s = requested(id, body, req, out);
  if (s == nullptr) return out;
  const auto state = s->optimizer().state();
  pb::PsOptimizerState m;
  m.set_shard(req.shard());
  m.set_updates(state.updates);
  m.mutable_slot_m()->Add(state.m.begin(), state.m.end());
  m.mutable_slot_v()->Add(state.v.begin(), state.v.end());
  out.push_back(Reply{id, m.SerializeAsString(), true});
  return out;
}

Effects ShardServer::join(RequestId id, std::string_view body, const PeerAddr& from) {
  pb::PsJoinRequest req;
  if (!parse(req, body)) {
    return refuse(id, make_error(errc::malformed, "PS {}: {} bytes are not a PsJoinRequest", device_, body.size()));
  }
  const auto replicas = replica_count(shards_);
  if (req.replica() < 0 || static_cast<std::size_t>(req.replica()) >= replicas) {
    return refuse(id, make_error(errc::invalid_argument, "PS {}: expected a replica id in 0..{}, got {}", device_,
                                 static_cast<std::int64_t>(replicas) - 1, req.replica()));
  }
  ++stats_.sessions;
  Effects out;  // the session stays open: nothing to answer
  if (lost_.count(req.replica()) != 0) {
    // A replica started again after it went down: the asynchronous shards take it back
    // from its first step; the synchronous ones went on without it (or failed), and
    // take it back when it asks to rejoin. One still waited for is dropped now.
    for (auto& [name, shard] : shards_) (void)shard.rejoin(req.replica());
    for (auto t = drop_timers_.begin(); t != drop_timers_.end();) {
      if (t->second != req.replica()) {
        ++t;
        continue;
      }
      out.push_back(CancelTimer{t->first});
      t = drop_timers_.erase(t);
      auto dropped = drop(req.replica());
      out.insert(out.end(), std::make_move_iterator(dropped.begin()), std::make_move_iterator(dropped.end()));
    }
  }
  sessions_[id] = {req.replica(), from};
  return out;
}

Status ShardServer::resume_at(std::int64_t step) {
  for (const auto& [name, shard] : shards_) {  // every shard or none
    if (!shard.config().sync || shard.config().staleness > 0) {
      return make_error(errc::invalid_argument,
                        "PS {} cannot continue the job at step {}: shard {} is {}; start the job again from the "
                        "checkpoint (--restore) instead", device_, step, name,
                        !shard.config().sync ? "asynchronous (its pushes since the checkpoint cannot be replayed in "
                                               "the order they were applied)"
                                             : "SSP (a checkpoint under SSP is a snapshot of shards at different "
                                               "steps, not one step's state)");
    }
  }
  for (auto& [name, shard] : shards_) {
    if (auto s = shard.start_at(step); !s) {
      return make_error(s.error().code, "PS {} cannot continue the job at step {}: {}", device_, step, s.error().message);
    }
  }
  resumed_at_ = step;
  return ok_status();
}

Effects ShardServer::rejoin(RequestId id, std::string_view body) {
  pb::PsRejoinRequest req;
  if (!parse(req, body)) {
    return refuse(id, make_error(errc::malformed, "PS {}: {} bytes are not a PsRejoinRequest", device_, body.size()));
  }
  const std::int32_t replica = req.replica();
  const auto replicas = replica_count(shards_);
  if (replica < 0 || static_cast<std::size_t>(replica) >= replicas) {
    return refuse(id, make_error(errc::invalid_argument, "PS {}: expected a replica id in 0..{}, got {}", device_,
                                 static_cast<std::int64_t>(replicas) - 1, replica));
  }
  pb::PsRejoinResponse res;
  std::int64_t floor = 0;
  bool out_of_job = false;
  for (const auto& [name, shard] : shards_) {
    if (!shard.config().sync) continue;
    floor = std::max(floor, shard.rejoin_floor(replica));
    out_of_job = out_of_job || shard.rejoining(replica);
  }
  res.set_dropped(out_of_job);
  res.set_step(floor);
  for (const auto& [name, shard] : shards_) {
    if (shard.config().sync) (*res.mutable_next_steps())[name] = shard.next_step(replica);
  }
  if (resumed_at_) {
    res.set_resumed(true);
    res.set_resumed_at(*resumed_at_);
  }
  Effects out;
  if (req.from_step() >= floor && out_of_job) {
    for (const auto& [name, shard] : shards_) {
      if (!shard.config().sync) continue;
      if (auto can = shard.can_rejoin_from(replica, req.from_step()); !can) {
        return refuse(id, make_error(can.error().code, "PS {}: {}", device_, can.error().message));
      }
    }
    for (auto& [name, shard] : shards_) {
      if (!shard.config().sync) continue;
      auto released = shard.rejoin_from(replica, req.from_step());
      if (!released) return refuse(id, make_error(released.error().code, "PS {}: {}", device_, released.error().message));
      out = answer(name, *released, std::move(out));
    }
    dropped_.erase(replica);
    lost_.erase(replica);
    res.set_accepted(true);
    res.set_step(req.from_step());
  }
  out.push_back(Reply{id, encode_deterministic(res), true});
  return out;
}

Effects ShardServer::on_request_message(TimePoint now, RequestId id, const Result<std::string>& message,
                                        bool last) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return {};
  const auto [replica, from] = it->second;
  if (message.ok()) {
    if (!last) return {};  // a session carries nothing after its first message
    sessions_.erase(it);
    finished_.insert(replica);
    return {Reply{id, std::string{}, true}};  // the replica is done: end our side too
  }
  sessions_.erase(it);
  lost_.emplace(replica, fmt::format("replica {}{} went down ({})", replica, from.empty() ? "" : " at " + from.key(),
                                     message.error().what()));
  if (drop_after_) {
    // The job goes on without it, after the wait.
    const TimerId timer = next_timer_++;
    drop_timers_[timer] = replica;
    return {SetTimer{timer, now + *drop_after_}};
  }
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

Effects ShardServer::drop(std::int32_t replica) {
  if (!dropped_.insert(replica).second) return {};
  Effects out;
  // Its own held requests have no one to answer.
  for (auto w = waiting_.begin(); w != waiting_.end();) {
    w = std::get<2>(w->first) == replica ? waiting_.erase(w) : std::next(w);
  }
  for (auto& [name, shard] : shards_) {
    auto released = shard.drop_replica(replica);
    if (!released) continue;  // not a replica id: join() let none such in
    out = answer(name, *released, std::move(out));
  }
  return out;
}

Effects ShardServer::drop_absent() {
  const auto replicas = replica_count(shards_);
  std::set<std::int32_t> present;
  for (const auto& [id, session] : sessions_) present.insert(session.first);
  Effects out;
  for (std::int32_t r = 0; static_cast<std::size_t>(r) < replicas; ++r) {
    if (present.count(r) != 0 || finished_.count(r) != 0 || dropped_.count(r) != 0) continue;
    lost_.emplace(r, fmt::format("replica {} did not come back to PS {} within {} ms of its resuming at step {}", r,
                                 device_,
                                 std::chrono::duration_cast<std::chrono::milliseconds>(*drop_after_).count(),
                                 *resumed_at_));
    auto fx = drop(r);
    out.insert(out.end(), std::make_move_iterator(fx.begin()), std::make_move_iterator(fx.end()));
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

Effects ShardServer::push(RequestId id, std::string_view body, std::shared_ptr<const void> keep) {
  // A dense gradient is summed straight from the request's bytes; anything else (sparse,
  // an unusual encoding, malformed bytes) goes through protobuf.
  DensePushView view;
  if (scan_dense_push(body, view)) {
    const std::string shard(view.shard);
    return admit_push(id, shard, view.replica, view.step, [&](Shard& s) {
      return s.push_dense(view.replica, view.step, view.samples, view.gradient, keep, view.learning_rate);
    });
  }
  pb::PsPushRequest req;
  if (!parse(req, body)) {
    return refuse(id, make_error(errc::malformed, "PS {}: {} bytes are not a PsPushRequest", device_, body.size()));
  }
  return admit_push(id, req.shard(), req.replica(), req.step(), [&](Shard& s) { return s.push(from_pb(req)); });
}

template <typename Take>
Effects ShardServer::admit_push(RequestId id, const std::string& shard, std::int32_t replica, std::int64_t step,
                                Take take) {
  Effects out;
  Shard* s = find(shard, id, out);
  if (s == nullptr) return out;
  if (!lost_.empty() && !drop_after_ && s->config().sync) return refuse(id, lost_error(shard));
  const Key key{shard, false, replica, step};
  waiting_[key].push_back(id);
  Result<Released> released = take(*s);
  if (!released) {
    auto& ids = waiting_[key];
    ids.pop_back();
    if (ids.empty()) waiting_.erase(key);
    return refuse(id, make_error(released.error().code, "PS {}: {}", device_, released.error().message));
  }
  return answer(shard, *released, {});
}

Effects ShardServer::pull(RequestId id, std::string_view body) {
  pb::PsPullRequest req;
  Effects out;
  Shard* s = requested(id, body, req, out);
  if (s == nullptr) return out;
  if (!lost_.empty() && !drop_after_ && s->config().sync) return refuse(id, lost_error(req.shard()));
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
  // The pulls a call releases all see the state it left (Shard::set_pull_values).
  const Shard& state = shards_.at(shard);
  const std::vector<float>& values = state.values();
  for (const auto& reply : released.pulls) {
    if (auto id = take(Key{shard, true, reply.replica, reply.step})) {
      ++stats_.pulls;
      if (splice_pulls_ && !values.empty()) {
        // The values stay where they lie; the shard's next update goes to fresh storage
        // while this view is held.
        out.push_back(Reply{*id, pull_response_head(shard, reply.replica, reply.step, reply.version, values.size()),
                            true, Buffer::view_of(state.shared_values(), values.data(), values.size() * sizeof(float)),
                            std::string{}});
        continue;
      }
      out.push_back(Reply{*id, encode_pull_response(shard, reply.replica, reply.step, reply.version, values.data(),
                                                    values.size()),
                          true});
    }
  }
  return out;
}

}  // namespace apiary::core::ps
