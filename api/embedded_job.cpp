// A training job embedded in one process: every PS device, node proxy and replica of the
// job, each on its own in-process gateway.
#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <fmt/format.h>

#include "api/startup.hpp"
#include "api/training_job_parts.hpp"
#include "core/strategy/resource_spec.hpp"

namespace apiary::training_job {

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

Status run_embedded(const Job& a, const cps::TrainingPlan& plan, std::shared_ptr<const core::collective::ArPlan> ar,
                    const std::string& header, const std::string& nccl_job) {
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
      return a.out.fail(ps.error());
    }
    servers[device] = (*gw)->address();
    a.out.print(fmt::format("ps {} embedded at {} shards {}\n", device, (*gw)->address(), (*ps)->shard_names()));
    devices.push_back(std::move(*ps));
  }
  const std::size_t replicas = plan.replicas.size();
  // One proxy per node (host of the replicas' devices) for the shards with local_replication.
  std::map<std::string, core::PeerAddr> proxied;  // shard name -> its PS as a multiaddr
  for (const auto& s : plan.shards) {
    if (!s.local_replication) continue;
    auto addr = core::PeerAddr::from_host_port(servers.at(s.device), "PS address");
    if (!addr) return a.out.fail(addr.error());
    proxied[s.config.variable] = std::move(*addr);
  }
  std::vector<EmbeddedProxy> proxies;
  std::vector<std::map<std::size_t, actors::PeerKey>> pull_via(replicas);
  for (std::size_t r = 0; r < replicas && !proxied.empty(); ++r) {
    auto device = cs::parse_device_name(plan.replicas[r]);
    if (!device) return a.out.fail(device.error());
    auto it = std::find_if(proxies.begin(), proxies.end(), [&](const auto& p) { return p.node == device->host; });
    if (it == proxies.end()) {
      auto gw = start_gateway();
      if (!gw) return a.out.fail(gw.error());
      EmbeddedProxy p{device->host, *gw, {}};
      p.actor = actors::spawn_ps_proxy_actor(sys, *gw,
                                             cps::ProxyServer(device->host, proxied, static_cast<std::int32_t>(r),
                                                              std::chrono::milliseconds(a.timeout_ms)),
                                             p.counters);
      a.out.print(fmt::format("proxy {} embedded at {} shards {}\n", p.node, (*gw)->address(), proxied.size()));
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
      return a.out.fail(member.error());
    }
    replica_gateways.push_back(*gw);
    part.members.push_back(*member);
  }
  if (!ar) part.members.clear();
  a.out.print(header);
  std::vector<Status> results(replicas, ok_status());
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < replicas; ++r) {
    // Each replica starts on its own thread: an NCCL group forms only once every replica joins it.
    threads.emplace_back([&, r] {
      auto replica = start_replica(a, sys, replica_gateways[r], static_cast<std::int32_t>(r), &plan, servers,
                                   pull_via[r], part, nccl_job);
      results[r] = replica ? train(a, **replica, replicas, ar != nullptr) : Status(a.out.fail(replica.error()));
    });
  }
  for (auto& t : threads) t.join();
  std::string summary;
  for (const auto& p : proxies) {
    summary += fmt::format("proxy {}: {} pulls for {} reads\n", p.node, p.counters->pulls.load(),
                           p.counters->reads.load());
    actors::stop_ps_proxy_actor(*p.gateway, p.actor);
  }
  if (!summary.empty()) a.out.print(summary);
  devices.clear();
  stop_all();
  for (const auto& result : results) {
    if (!result) return result;
  }
  return ok_status();
}

}  // namespace apiary::training_job
