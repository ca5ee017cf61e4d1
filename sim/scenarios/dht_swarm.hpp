#pragma once
/// The DHT swarm: N simulated nodes each running an unchanged core::dht::Node, joining one
/// after another from a few random earlier nodes. DhtHost runs one node's role in the World;
/// DhtSwarm builds the swarm and adds fresh joiners later (churn); dht_link_rule gives
/// every link its own latency, drawn once from a seeded hash.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dht/node.hpp"
#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "core/dht/node_role.hpp"
#include "sim/role_host.hpp"
#include "sim/network.hpp"
#include "sim/world.hpp"

namespace apiary::sim::scenarios {

/// Op id the sink sees for every node's bootstrap (scenario ops must pick others).
inline constexpr core::dht::OpId k_bootstrap_op = 1;

/// Receives every operation a node finishes: the node's address and the result.
using DhtOpSink = std::function<void(const core::PeerAddr& node, core::dht::OpResult result)>;

/// One simulated DHT node: the generic host running a core::dht::NodeRole (its node
/// is role().node()). The World's caller address reaches the node as the request's
/// sender, so it registers callers in its routing table as a real node does.
using DhtHost = RoleHost<core::dht::NodeRole>;

/// Starts `run` (a NodeOp) on running node `addr` of `world` now; its OpResult, with
/// `op` as its id, goes to `sink`. Nothing happens when the node is not running.
void run_dht_op(World& world, const core::PeerAddr& addr, DhtHost& host, core::dht::OpId op, core::dht::NodeOp run,
                const DhtOpSink& sink);

/// How a DHT swarm is built.
struct DhtSwarmOptions {
  std::size_t nodes = 100;           ///< swarm size (>= 1); node 0 starts alone
  core::dht::NodeConfig node{};      ///< every node's config (its seed is set per node)
  double dht_epoch = 1.7e9;          ///< DHT time (s) at virtual time 0, so times look real
  std::size_t bootstrap_peers = 3;   ///< random earlier nodes each node bootstraps from (>= 1)
  core::TimePoint start_at{};        ///< when node 0 starts (virtual ns)
  core::Duration start_interval = std::chrono::milliseconds(5);  ///< node i starts at
                                     ///< start_at + i * start_interval
};

/// The address of DHT swarm node `i`: "/ip4/10.A.B.C/tcp/4000/p2p/12D3KooW..." with a
/// PeerID whose key bytes are derived from `id` and `i` (the same pair gives the same
/// address).
[[nodiscard]] core::PeerAddr dht_addr(std::size_t i, const core::dht::NodeId& id);

/// A link rule giving each unordered pair of nodes one one-way latency drawn uniformly
/// from [min_latency, max_latency] by a hash of `seed` and the two addresses (no jitter),
/// and loss probability `loss` per message. Errors: a bad range or loss.
[[nodiscard]] Result<LinkRule> dht_link_rule(std::uint64_t seed, core::Duration min_latency,
                                             core::Duration max_latency, double loss);

/// A DHT swarm added to a World (the World owns the hosts; keep it alive as long).
class DhtSwarm {
 public:
  /// Adds `options.nodes` DhtHosts to `world` (ids from the world's Rng) and schedules
  /// their starts; each node's finished operations go to `sink`. Errors: bad options or
  /// addresses already taken in `world`.
  [[nodiscard]] static Result<DhtSwarm> create(World& world, const DhtSwarmOptions& options,
                                               DhtOpSink sink);

  /// Adds one fresh node that starts at `at`, bootstrapping from options.bootstrap_peers
  /// random nodes of the swarm alive at `at` (drawn then); returns its index.
  [[nodiscard]] Result<std::size_t> add_joiner(World& world, core::TimePoint at);

  /// Number of nodes (joiners included).
  [[nodiscard]] std::size_t size() const { return addrs_.size(); }
  /// Address of node `i` (< size()).
  [[nodiscard]] const core::PeerAddr& addr(std::size_t i) const { return addrs_[i]; }
  /// Every node's address, in the order added.
  [[nodiscard]] const std::vector<core::PeerAddr>& addrs() const { return addrs_; }
  /// Where every node's bootstrap and run_dht_op results go.
  [[nodiscard]] const DhtOpSink& sink() const { return sink_; }
  /// The host of node `i` (< size()).
  [[nodiscard]] DhtHost& host(std::size_t i) const { return *hosts_[i]; }
  /// The index of a node picked uniformly among those running now, or an error if none.
  [[nodiscard]] Result<std::size_t> random_running(World& world) const;

 private:
  DhtSwarm() = default;
  [[nodiscard]] Result<std::size_t> add(World& world, std::vector<core::PeerAddr> bootstrap,
                                        core::TimePoint at);

  DhtSwarmOptions options_;
  DhtOpSink sink_;
  std::vector<core::PeerAddr> addrs_;
  std::vector<DhtHost*> hosts_;
};

}  // namespace apiary::sim::scenarios
