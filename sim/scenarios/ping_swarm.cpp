#include "sim/scenarios/ping_swarm.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "sim/scenarios/swarm_size.hpp"

namespace apiary::sim::scenarios {

core::PeerAddr swarm_addr(std::size_t i) {
  return swarm_address(i, 4100);
}

Result<PingSwarm> PingSwarm::create(World& world, const PingSwarmOptions& options) {
  if (auto st = check_swarm_size(options.nodes, "PingSwarmOptions", "swarm_addr"); !st) return st.error();
  if (auto st = core::ping::validate(options.ping); !st) return st.error();
  if (options.start_spread < core::Duration::zero()) {
    return make_error(errc::invalid_argument,
                      "expected start_spread >= 0 ns, got {} ns; set "
                      "PingSwarmOptions::start_spread", options.start_spread.count());
  }

  PingSwarm swarm;
  const core::PeerAddr bootstrap = swarm_addr(0);
  const auto spread = static_cast<std::uint64_t>(options.start_spread.count()) + 1;
  for (std::size_t i = 0; i < options.nodes; ++i) {
    // Node 0 starts alone; everyone else knows only node 0.
    core::PeerAddr addr = swarm_addr(i);
    std::vector<core::PeerAddr> seeds;
    if (i != 0) seeds.push_back(bootstrap);
    auto host = std::make_unique<PingHost>(addr, options.ping, std::move(seeds));
    const PingHost* typed = host.get();
    if (auto added = world.add_node(addr, std::move(host)); !added) return added.error();
    // The bootstrap starts first, the others spread after it.
    const core::TimePoint at =
        options.start_at +
        (i == 0 ? core::Duration::zero()
                : core::Duration(static_cast<core::Duration::rep>(world.rng().uniform(spread))));
    if (auto st = world.start_node(addr, at); !st) return st.error();
    swarm.addrs_.push_back(std::move(addr));
    swarm.hosts_.push_back(typed);
  }
  return swarm;
}

Status check_full_mesh(const World& world, const PingSwarm& swarm) {
  for (std::size_t i = 0; i < swarm.size(); ++i) {
    if (world.killed(swarm.addr(i))) continue;
    if (!world.running(swarm.addr(i))) {
      return make_error(errc::unavailable,
                        "expected {} to be running, got a node not started yet; run the "
                        "world past the swarm's start times", swarm.addr(i));
    }
    const auto& peers = swarm.pinger(i).peers();
    for (std::size_t j = 0; j < swarm.size(); ++j) {
      if (j == i) continue;
      auto it = peers.find(swarm.addr(j));
      if (it == peers.end()) {
        return make_error(errc::not_found,
                          "expected {} to know all {} other nodes, got {} known and {} "
                          "missing; run longer or check the network model",
                          swarm.addr(i), swarm.size() - 1, peers.size(), swarm.addr(j));
      }
      if (world.running(swarm.addr(j)) && it->second.rtts.empty()) {
        return make_error(errc::not_found,
                          "expected {} to hold an RTT sample for {}, got none ({} sent, {} "
                          "failed, last error '{}'); run longer or lower the loss",
                          swarm.addr(i), swarm.addr(j), it->second.sent, it->second.failed,
                          it->second.last_error);
      }
    }
  }
  return ok_status();
}

Result<core::TimePoint> run_until_converged(World& world, const PingSwarm& swarm,
                                            core::TimePoint deadline,
                                            core::Duration check_every) {
  if (check_every <= core::Duration::zero()) {
    return make_error(errc::invalid_argument,
                      "expected check_every > 0 ns, got {} ns; pass a positive step",
                      check_every.count());
  }
  Status last = check_full_mesh(world, swarm);
  while (!last.ok() && world.now() < deadline) {
    world.run_until(std::min(world.now() + check_every, deadline));
    last = check_full_mesh(world, swarm);
  }
  if (!last.ok()) {
    return make_error(errc::deadline_exceeded,
                      "expected the swarm to converge by {} ns, got not converged: {}",
                      deadline.count(), last.error().what());
  }
  return world.now();
}

}  // namespace apiary::sim::scenarios
