#include "core/ps/proxy_server.hpp"

#include <fmt/format.h>

#include "core/ps/wire.hpp"

namespace apiary::core::ps {

ProxyServer::ProxyServer(std::string node, std::map<std::string, PeerAddr> shards, std::int32_t replica,
                         Duration call_timeout)
    : node_(std::move(node)), shards_(std::move(shards)), replica_(replica), call_timeout_(call_timeout) {}

Reply ProxyServer::answer(RequestId id, const std::string& shard, std::int32_t replica, std::int64_t step,
                          std::int64_t version, const ProxyValues& values) {
  ++reads_;
  const std::size_t count = values ? values->size() : 0;
  if (splice_reads_ && count > 0) {
    return Reply{id, pull_response_head(shard, replica, step, version, count), true,
                 Buffer::view_of(values, values->data(), count * sizeof(float)), std::string{}};
  }
  return Reply{id, encode_pull_response(shard, replica, step, version, count > 0 ? values->data() : nullptr, count),
               true};
}

void ProxyServer::pull(Effects& out, const std::string& shard, std::int64_t step) {
  pb::PsPullRequest m;
  m.set_shard(shard);
  m.set_replica(replica_);
  m.set_step(step);
  pulls_.emplace(next_call_, std::make_pair(shard, step));
  out.push_back(unary_call(next_call_++, shards_.at(shard), k_ps_pull_handle, m.SerializeAsString(), call_timeout_));
}

std::vector<std::string> ProxyServer::handles() const { return {k_ps_pull_handle, k_ps_proxy_done_handle}; }

Effects ProxyServer::on(TimePoint now, Input input) {
  if (auto* r = std::get_if<Request>(&input)) return on_request(now, r->id, r->handle, std::string(r->body.view()));
  if (auto* r = std::get_if<Response>(&input)) return on_response(now, r->call, r->result);
  if (auto* p = std::get_if<PeerDown>(&input)) return peer_down(now, p->peer);
  if (auto* c = std::get_if<LocalCall>(&input)) {
    if (c->method == k_proxy_counters_method) return {Complete{c->op, Value::of(ProxyCounts{pulls(), reads(), done()})}};
    return {unknown_method(*c, "the PS proxy")};
  }
  return {};
}

Effects ProxyServer::on_request(TimePoint /*now*/, RequestId id, const std::string& handle,
                                const std::string& request) {
  if (handle == k_ps_proxy_done_handle) {
    pb::PsPullRequest m;
    if (!m.ParseFromString(request)) {
      return {Reply{id, make_error(errc::malformed, "proxy of {}: {} bytes are not a PsPullRequest", node_,
                                   request.size()), true}};
    }
    done_.insert(m.replica());
    return {Reply{id, std::string{}, true}};
  }
  if (handle != k_ps_pull_handle) {
    return {Reply{
        id, make_error(errc::not_found, "proxy of {}: expected handle {}, got '{}'", node_, k_ps_pull_handle, handle),
        true}};
  }
  pb::PsPullRequest m;
  if (!m.ParseFromString(request)) {
    return {Reply{
        id, make_error(errc::malformed, "proxy of {}: {} bytes are not a PsPullRequest", node_, request.size()), true}};
  }
  if (shards_.count(m.shard()) == 0) {
    return {Reply{
        id,
        make_error(errc::not_found, "proxy of {}: expected a proxied shard, got '{}'; pull it from its PS instead",
                   node_, m.shard()),
        true}};
  }
  if (auto f = failed_.find(m.shard()); f != failed_.end()) return {Reply{id, f->second, true}};
  auto read = cache_.read(m.replica(), m.shard(), m.step());
  Effects out;
  switch (read.outcome) {
    case ProxyOutcome::hit:
      out.push_back(answer(id, m.shard(), m.replica(), m.step(), read.version, read.values));
      break;
    case ProxyOutcome::pull:
      waiting_[Key{m.shard(), m.replica(), m.step()}].push_back(id);
      pull(out, m.shard(), m.step());
      break;
    case ProxyOutcome::wait:
      waiting_[Key{m.shard(), m.replica(), m.step()}].push_back(id);
      break;
  }
  return out;
}

Effects ProxyServer::on_response(TimePoint /*now*/, CallId call, const Result<std::string>& response) {
  auto it = pulls_.find(call);
  if (it == pulls_.end()) return {};
  const std::string shard = it->second.first;
  const std::int64_t step = it->second.second;
  pulls_.erase(it);
  Effects out;
  auto refresh = [&]() -> Result<ProxyRefresh> {
    if (!response.ok()) return response.error();
    PullReply reply;  // the values copied once, out of the answer's bytes
    if (!decode_pull_response_into(*response, reply)) {
      return make_error(errc::malformed, "the PS answered with no PsPullResponse");
    }
    return cache_.on_refresh(shard, step, reply.version, std::move(reply.values));
  }();
  if (!refresh.ok()) {
    // The PS went away (its connection broke, nobody answers): fail the readers waiting
    // now, with that code, and refresh afresh at the next read (replicas that wait for a
    // PS started again read once it is back). Any other failure: the copy can no longer
    // be refreshed, its readers fail now and later.
    const errc code = refresh.error().code;
    const Error e = make_error(code, "proxy of {}: refresh of shard '{}' (step {}) failed: {}", node_, shard, step,
                               refresh.error().message);
    if (code == errc::peer_down || code == errc::unavailable) {
      cache_.on_failed(shard);
    } else {
      failed_.emplace(shard, e);
    }
    for (auto w = waiting_.begin(); w != waiting_.end();) {
      if (std::get<0>(w->first) != shard) {
        ++w;
        continue;
      }
      for (auto id : w->second) out.push_back(Reply{id, e, true});
      w = waiting_.erase(w);
    }
    return out;
  }
  for (const auto& r : refresh->released) {
    auto w = waiting_.find(Key{shard, r.replica, r.step});
    if (w == waiting_.end() || w->second.empty()) continue;
    out.push_back(answer(w->second.front(), shard, r.replica, r.step, r.version, r.values));
    w->second.erase(w->second.begin());
    if (w->second.empty()) waiting_.erase(w);
  }
  if (refresh->pull_step >= 0) pull(out, shard, refresh->pull_step);
  return out;
}

Effects ProxyServer::peer_down(TimePoint now, const PeerAddr& peer) {
  std::vector<CallId> broken;
  for (const auto& [call, what] : pulls_) {
    if (shards_.at(what.first) == peer) broken.push_back(call);
  }
  Effects out;
  for (auto call : broken) {
    auto fx = on_response(now, call, make_error(errc::peer_down, "the connection to the PS at {} broke", peer));
    out.insert(out.end(), std::make_move_iterator(fx.begin()), std::make_move_iterator(fx.end()));
  }
  return out;
}

}  // namespace apiary::core::ps
