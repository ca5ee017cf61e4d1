#pragma once
/// The DHT swarm: N simulated nodes each running an unchanged core::dht::Node, joining one
/// after another from a few random earlier nodes. DhtHost adapts one Node to the World;
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
#include "sim/host.hpp"
#include "sim/network.hpp"
#include "sim/world.hpp"

namespace apiary::sim::scenarios {

/// Op id every DhtHost uses for its bootstrap (scenario ops must pick others).
inline constexpr core::dht::OpId k_bootstrap_op = 1;

/// Receives every operation a node finishes: the node's address and the result.
using DhtOpSink = std::function<void(const core::PeerAddr& node, core::dht::OpResult result)>;

/// Runs one core::dht::Node as a simulated node. The World's caller address is passed to
/// the node as the request's sender, so the node registers callers in its routing table
/// as a real node does.
class DhtHost : public Host {
 public:
  /// A node with DHT id `id` listening on `self`, bootstrapping from `bootstrap` when
  /// started; `dht_epoch` (seconds) is added to virtual time to get DHT time; every
  /// finished operation (the bootstrap included) goes to `sink`.
  DhtHost(core::dht::NodeId id, core::PeerAddr self, core::dht::NodeConfig config,
          double dht_epoch, std::vector<core::PeerAddr> bootstrap, DhtOpSink sink);

  [[nodiscard]] core::Effects on_start(core::TimePoint now) override;
  /// A request with no known caller (the World always calls on_request_from).
  [[nodiscard]] core::Effects on_request(core::TimePoint now, core::RequestId id,
                                         const std::string& handle,
                                         const std::string& request) override;
  [[nodiscard]] core::Effects on_request_from(core::TimePoint now, core::RequestId id,
                                              const std::string& handle,
                                              const core::PeerAddr& from,
                                              const std::string& request) override;
  [[nodiscard]] core::Effects on_response(core::TimePoint now, core::CallId call,
                                          const Result<std::string>& response) override;
  [[nodiscard]] core::Effects on_timer(core::TimePoint now, core::TimerId id) override;

  /// Hands `effects` (the output of a call on node()) back after draining the node's
  /// finished operations into the sink; use it for local API calls a scenario makes.
  [[nodiscard]] core::Effects deliver(core::Effects effects);

  /// The node this host runs.
  [[nodiscard]] core::dht::Node& node() { return node_; }

 private:
  core::dht::Node node_;
  std::vector<core::PeerAddr> bootstrap_;
  DhtOpSink sink_;
};

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
