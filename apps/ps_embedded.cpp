// `apiary ps --embedded`: every PS device, node proxy and replica of the job in this one
// process, each on its own in-process gateway.
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/ps/proxy_actor.hpp"
#include "api/startup.hpp"
#include "apps/ps_allreduce.hpp"
#include "apps/ps_roles.hpp"
#include "core/strategy/resource_spec.hpp"

namespace apiary::apps::ps_roles {

namespace cps = core::ps;
namespace cs = core::strategy;

namespace {

/// A node's proxy in an embedded job.
struct EmbeddedProxy {
  std::string node;
  std::shared_ptr<actors::Gateway> gateway;
  caf::actor actor;
  std::shared_ptr<actors::ProxyCounters> counters = std::make_shared<actors::ProxyCounters>();
};

}  // namespace

/// --embedded: every PS device and every replica of the job in this process, on one
/// actor system; each PS device, each node's proxy (shards with local_replication) and
/// each replica has its own in-process gateway, so the roles talk over the same RPC as
/// separate processes do. Replicas train on their own threads. Returns the first
/// failing replica's exit code, or 0.
int run_embedded(const PsArgs& a, const cps::TrainingPlan& plan, std::shared_ptr<const core::collective::ArPlan> ar) {
  auto config = api::node_actor_system_config(0);
  caf::actor_system sys(*config);
  std::vector<std::shared_ptr<actors::Gateway>> gateways;  // PS devices', then replicas'
  auto start_gateway = [&]() -> Result<std::shared_ptr<actors::Gateway>> {
    actors::GatewayConfig gc;
    gc.backend = actors::Backend::local;
    auto gw = actors::Gateway::start(sys, gc);
    if (gw) gateways.push_back(*gw);
    return gw;
  };
  auto stop_all = [&gateways] {
    for (auto& gw : gateways) gw->stop();
  };
  std::map<std::string, actors::PeerKey> servers;
  std::vector<std::unique_ptr<ParameterServer>> devices;
  for (const auto& device : plan.servers) {
    auto gw = start_gateway();
    auto ps = gw ? ParameterServer::start(sys, *gw, ps_options(a, plan, device))
                 : Result<std::unique_ptr<ParameterServer>>(gw.error());
    if (!ps) {
      devices.clear();
      stop_all();
      return fail(ps.error());
    }
    servers[device] = (*gw)->address();
    std::printf("ps %s embedded at %s shards %s\n", device.c_str(), (*gw)->address().c_str(),
                (*ps)->shard_names().c_str());
    devices.push_back(std::move(*ps));
  }
  const std::size_t replicas = plan.replicas.size();
  // One proxy per node (host of the replicas' devices) for the shards with local_replication.
  std::map<std::string, core::PeerAddr> proxied;  // shard name -> its PS as a multiaddr
  for (const auto& s : plan.shards) {
    if (!s.local_replication) continue;
    auto hp = split_host_port(servers.at(s.device), "PS address");
    if (!hp) return fail(hp.error());
    proxied[s.config.variable] = fmt::format("/ip4/{}/tcp/{}", hp->first, hp->second);
  }
  std::vector<EmbeddedProxy> proxies;
  std::vector<std::map<std::size_t, actors::PeerKey>> pull_via(replicas);
  for (std::size_t r = 0; r < replicas && !proxied.empty(); ++r) {
    auto device = cs::parse_device_name(plan.replicas[r]);
    if (!device) return fail(device.error());
    auto it = std::find_if(proxies.begin(), proxies.end(), [&](const auto& p) { return p.node == device->host; });
    if (it == proxies.end()) {
      auto gw = start_gateway();
      if (!gw) return fail(gw.error());
      EmbeddedProxy p{device->host, *gw, {}};
      p.actor = actors::spawn_ps_proxy_actor(sys, *gw,
                                             cps::ProxyServer(device->host, proxied, static_cast<std::int32_t>(r),
                                                              std::chrono::milliseconds(a.timeout_ms)),
                                             p.counters);
      std::printf("proxy %s embedded at %s shards %zu\n", p.node.c_str(), (*gw)->address().c_str(), proxied.size());
      proxies.push_back(std::move(p));
      it = proxies.end() - 1;
    }
    for (std::size_t id = 0; id < plan.shards.size(); ++id) {
      if (plan.shards[id].local_replication) pull_via[r][id] = it->gateway->address();
    }
  }
  // Every replica's gateway first: a mixed job's replicas all-reduce among them.
  std::vector<std::shared_ptr<actors::Gateway>> replica_gateways;
  AllReducePart part{ar, {}};
  for (std::size_t r = 0; r < replicas; ++r) {
    auto gw = start_gateway();
    auto member = gw ? replica_multiaddr((*gw)->address(), "replica gateway") : Result<core::PeerAddr>(gw.error());
    if (!member) {
      stop_all();
      return fail(member.error());
    }
    replica_gateways.push_back(*gw);
    part.members.push_back(*member);
  }
  if (!ar) part.members.clear();
  std::printf("embedded job: %zu PS devices, %zu replicas: %lld steps of %zu samples\n", plan.servers.size(), replicas,
              static_cast<long long>(a.steps), a.batch);
  std::fflush(stdout);
  if (a.stdin_stops) watch_stdin();
  std::vector<int> rcs(replicas, 0);
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < replicas; ++r) {
    // Each replica starts on its own thread: an NCCL group forms only once every replica joins it.
    threads.emplace_back([&, r] {
      auto replica = start_replica(a, sys, replica_gateways[r], static_cast<std::int32_t>(r), &plan, servers,
                                   pull_via[r], part, "apiary.ps.mixed");
      rcs[r] = replica ? train(a, **replica, replicas, ar != nullptr) : fail(replica.error());
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& p : proxies) {
    std::printf("proxy %s: %lld pulls for %lld reads\n", p.node.c_str(),
                static_cast<long long>(p.counters->pulls.load()), static_cast<long long>(p.counters->reads.load()));
    actors::stop_ps_proxy_actor(*p.gateway, p.actor);
  }
  std::fflush(stdout);
  devices.clear();
  stop_all();
  for (int rc : rcs) {
    if (rc != 0) return rc;
  }
  return 0;
}

}  // namespace apiary::apps::ps_roles
