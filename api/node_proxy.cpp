// The job's DHT and node proxies of a multi-process training job (`local_replication`):
// the node's first replica hosts its node's proxy on its gateway, the node's other
// replicas pull through it, found by address or in the job's DHT.
#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "actors/rpc.hpp"
#include "api/training_job_parts.hpp"
#include "core/ps/wire.hpp"
#include "core/strategy/resource_spec.hpp"
#include "messages/identity/multiaddr.hpp"

namespace apiary::training_job {

namespace cps = core::ps;

Result<std::unique_ptr<Dht>> start_job_dht(caf::actor_system& sys, std::shared_ptr<actors::Gateway> gateway,
                                           const std::vector<std::string>& initial_peers) {
  DhtOptions options;
  options.system = &sys;
  options.gateway = std::move(gateway);
  options.initial_peers = initial_peers;
  return Dht::start(options);
}

Result<std::map<std::string, std::string>> split_peers(const Job& a, const cps::TrainingPlan& plan,
                                                       std::map<std::string, actors::PeerKey>& servers,
                                                       std::map<std::string, std::string>& proxies) {
  const std::string prefix = k_proxy_peer_prefix;
  for (auto it = servers.begin(); it != servers.end();) {
    if (it->first.rfind(prefix, 0) != 0) {
      ++it;
      continue;
    }
    proxies[it->first.substr(prefix.size())] = it->second;
    it = servers.erase(it);
  }
  std::map<std::string, std::string> wanted;
  std::vector<std::string> missing;
  for (const auto& device : plan.servers) {
    if (servers.count(device) != 0) continue;
    wanted[device] = ps_key(a.job, device);
    missing.push_back(device);
  }
  if (!missing.empty() && a.initial_peers.empty()) {
    return make_error(errc::invalid_argument,
                      "no address for PS device(s) {}: expected --peers DEVICE=HOST:PORT for each, or "
                      "--initial-peers MULTIADDR of the job's DHT (a PS process prints it as "
                      "'ps DEVICE dht /ip4/.../p2p/...'), got neither",
                      fmt::join(missing, ", "));
  }
  return wanted;
}

Result<NodeProxy> setup_node_proxy(const Job& a, const cps::TrainingPlan& plan, std::int32_t id,
                                   const std::map<std::string, actors::PeerKey>& servers,
                                   const std::map<std::string, std::string>& proxies, caf::actor_system& sys,
                                   std::shared_ptr<actors::Gateway> gateway, Dht* dht, AddressPublisher* publisher) {
  NodeProxy out;
  std::vector<std::size_t> proxied_ids;
  for (std::size_t s = 0; s < plan.shards.size(); ++s) {
    if (plan.shards[s].local_replication) proxied_ids.push_back(s);
  }
  if (proxied_ids.empty()) return out;
  auto device = core::strategy::parse_device_name(plan.replicas.at(static_cast<std::size_t>(id)));
  if (!device) return device.error();
  out.node = device->host;
  // The node's first replica hosts the proxy; its pulls carry that replica's id.
  std::int32_t host = id;
  std::int64_t local = 0;
  for (std::size_t r = 0; r < plan.replicas.size(); ++r) {
    auto other = core::strategy::parse_device_name(plan.replicas[r]);
    if (!other || other->host != out.node) continue;
    host = std::min(host, static_cast<std::int32_t>(r));
    ++local;
  }
  actors::PeerKey address;
  if (host == id) {
    std::map<std::string, core::PeerAddr> shards;  // shard name -> its PS as a multiaddr
    for (auto s : proxied_ids) {
      auto hp = split_host_port(servers.at(plan.shards[s].device), "PS address");
      if (!hp) return hp.error();
      auto m = messages::Multiaddr::from_ip(hp->first, hp->second);
      if (!m) {
        return make_error(errc::invalid_argument,
                          "PS {} at {}: the node proxy expects an IP address, got '{}'; "
                          "give the PS processes --listen IP:PORT",
                          plan.shards[s].device, servers.at(plan.shards[s].device), hp->first);
      }
      shards[plan.shards[s].config.variable] = core::PeerAddr(std::move(*m));
    }
    out.counters = std::make_shared<actors::ProxyCounters>();
    out.actor = actors::spawn_ps_proxy_actor(
        sys, gateway, cps::ProxyServer(out.node, std::move(shards), id, std::chrono::milliseconds(a.timeout_ms)),
        out.counters);
    // Every replica of the node reads every proxied shard once per step and once at the end.
    out.expected_reads = local * (a.steps + 1) * static_cast<std::int64_t>(proxied_ids.size());
    out.readers = local - 1;
    address = gateway->address();
    if (publisher != nullptr) publisher->add(proxy_key(a.job, out.node), address);
    a.out.print(fmt::format("proxy {} at {} shards {}\n", out.node, address, proxied_ids.size()));
  } else if (auto it = proxies.find(out.node); it != proxies.end()) {
    address = it->second;
  } else if (dht != nullptr) {
    auto found = find_addresses(
        *dht, {{out.node, proxy_key(a.job, out.node)}}, std::chrono::milliseconds(a.timeout_ms), "node proxy",
        fmt::format("start replica {} (it hosts the proxy of node {}) with the same --job and --initial-peers", host,
                    out.node));
    if (!found) return found.error();
    address = found->at(out.node);
  } else {
    return make_error(errc::invalid_argument,
                      "the strategy replicates variables on node {} (local_replication) and replica {} hosts its "
                      "proxy: expected --peers {}{}=HOST:PORT (replica {} prints 'proxy {} at HOST:PORT') or "
                      "--initial-peers, got neither",
                      out.node, host, k_proxy_peer_prefix, out.node, host, out.node);
  }
  if (host != id) {
    // The replica hosting the proxy may not serve it yet (the processes start in any order).
    auto serving = wait_until_serving(*gateway, out.node, address, std::chrono::milliseconds(a.timeout_ms),
                                      fmt::format("replica {}", id),
                                      fmt::format("start replica {} (it hosts the proxy of node {})", host, out.node),
                                      core::ps::k_ps_pull_handle, "the proxy of node", a.stop);
    if (!serving) return serving.error();
  }
  for (auto s : proxied_ids) out.pull_via[s] = address;
  return out;
}

void finish_node_proxy(const Job& a, NodeProxy& proxy, actors::Gateway& gateway, std::int32_t id) {
  if (!proxy.actor) {
    if (proxy.pull_via.empty()) return;
    pb::PsPullRequest m;
    m.set_replica(id);
    auto done = actors::unary_call(gateway, proxy.pull_via.begin()->second, core::ps::k_ps_proxy_done_handle,
                                   Buffer::copy_of(m.SerializeAsString()), std::chrono::milliseconds(a.timeout_ms));
    (void)done.answer.get();  // the host waits for it; gone already, it no longer does
    return;
  }
  // The node's other replicas may still read their last step from the proxy, and an
  // answer counts as read when it is sent: each says when it has them all.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.timeout_ms);
  while ((proxy.counters->reads.load() < proxy.expected_reads || proxy.counters->done.load() < proxy.readers) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  a.out.print(fmt::format("proxy {}: {} pulls for {} reads, {} of {} readers done\n", proxy.node,
                          proxy.counters->pulls.load(), proxy.counters->reads.load(), proxy.counters->done.load(),
                          proxy.readers));
  actors::stop_ps_proxy_actor(gateway, proxy.actor);
  proxy.actor = caf::actor{};
}

}  // namespace apiary::training_job
