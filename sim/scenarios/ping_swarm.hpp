#pragma once
/// The ping swarm scenario: N nodes run core::ping::Pinger, node 0 is the bootstrap
/// every other node starts from. Workload (PingSwarm), checker (check_full_mesh) and a
/// helper that runs until the checker passes.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/effects.hpp"
#include "core/ping/pinger.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/role_host.hpp"
#include "sim/world.hpp"

namespace apiary::sim::scenarios {

/// One simulated ping node: the generic host running a core::ping::Pinger.
using PingHost = RoleHost<core::ping::Pinger>;

/// How a swarm is built.
struct PingSwarmOptions {
  std::size_t nodes = 50;          ///< swarm size (>= 1); node 0 is the bootstrap
  core::ping::Config ping{};       ///< every node's pinger config
  core::TimePoint start_at{};      ///< earliest start time (virtual ns)
  core::Duration start_spread{};   ///< node 0 starts at start_at, each other node at a
                                   ///< time drawn from [start_at, start_at + spread]
};

/// The listen address of swarm node `i`: "/ip4/10.<i/65536>.<i/256%256>.<i%256>/tcp/4100".
[[nodiscard]] core::PeerAddr swarm_addr(std::size_t i);

/// A ping swarm added to a World (the World owns the hosts; keep it alive as long).
class PingSwarm {
 public:
  /// Adds `options.nodes` PingHosts to `world` and schedules their starts. Errors: bad
  /// options (zero nodes, invalid ping config) or addresses already taken in `world`.
  [[nodiscard]] static Result<PingSwarm> create(World& world, const PingSwarmOptions& options);

  /// Number of nodes.
  [[nodiscard]] std::size_t size() const { return addrs_.size(); }
  /// Address of node `i` (< size()).
  [[nodiscard]] const core::PeerAddr& addr(std::size_t i) const { return addrs_[i]; }
  /// Every node's address, node 0 first.
  [[nodiscard]] const std::vector<core::PeerAddr>& addrs() const { return addrs_; }
  /// The pinger of node `i` (< size()).
  [[nodiscard]] const core::ping::Pinger& pinger(std::size_t i) const {
    return hosts_[i]->role();
  }

 private:
  PingSwarm() = default;
  std::vector<core::PeerAddr> addrs_;
  std::vector<const PingHost*> hosts_;
};

/// Checker: every node is running or killed; every running node knows all size()-1
/// other nodes and holds at least one RTT sample for every other running node. The error names the first node that falls
/// short and what it lacks.
[[nodiscard]] Status check_full_mesh(const World& world, const PingSwarm& swarm);

/// Runs `world` in steps of `check_every` until check_full_mesh passes, and returns the
/// virtual time it first passed; errc::deadline_exceeded with the checker's last
/// complaint if it has not passed by `deadline`.
[[nodiscard]] Result<core::TimePoint> run_until_converged(World& world, const PingSwarm& swarm,
                                                          core::TimePoint deadline,
                                                          core::Duration check_every);

}  // namespace apiary::sim::scenarios
