#pragma once
/// How the processes of one `apiary ps` job find each other through the DHT instead of
/// (or besides) explicit --peers (api/job_directory.hpp): every process runs a DHT node
/// on its own gateway; a PS process publishes its address under `<job>.ps.<device>`, the
/// replica hosting a node's proxy under `<job>.proxy.<node>`, and refreshes them while it
/// serves; a replica reads the keys it has no --peers entry for until they appear or its
/// --timeout-ms passes.
/// Also the node proxy of a multi-process job (`local_replication`): the node's first
/// replica hosts it on its gateway, the node's other replicas pull through it.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>

#include "actors/gateway.hpp"
#include "actors/ps/proxy_actor.hpp"
#include "api/dht.hpp"
#include "api/job_directory.hpp"
#include "apps/ps_roles.hpp"
#include "core/ps/plan.hpp"
#include "messages/result.hpp"

namespace apiary::apps::ps_roles {

/// The --peers prefix naming a node's proxy: `proxy:<node>=HOST:PORT`.
inline constexpr const char* k_proxy_peer_prefix = "proxy:";

/// The DHT key a PS process publishes its "host:port" under.
[[nodiscard]] std::string ps_key(const std::string& job, const std::string& device);
/// The DHT key the replica hosting node `node`'s proxy publishes its "host:port" under.
[[nodiscard]] std::string proxy_key(const std::string& job, const std::string& node);

/// Starts a DHT node on the role's actor system and gateway (one transport per process;
/// the node is addressed by its own PeerID there), bootstrapping from `initial_peers`
/// (multiaddrs with /p2p/; none: this node is the first of the job). Errors: as
/// Dht::start (bad multiaddr, no initial peer answered).
[[nodiscard]] Result<std::unique_ptr<Dht>> start_job_dht(caf::actor_system& sys,
                                                         std::shared_ptr<actors::Gateway> gateway,
                                                         const std::vector<std::string>& initial_peers);

using Publisher = AddressPublisher;

/// Moves the `proxy:<node>` entries of `servers` (parsed --peers) to `proxies` (node ->
/// "host:port") and returns the PS devices of `plan` left without an address, with their
/// DHT keys (device -> key). Errors: invalid_argument naming them when there are some and
/// no --initial-peers to look them up with.
[[nodiscard]] Result<std::map<std::string, std::string>> split_peers(const PsArgs& a,
                                                                    const core::ps::TrainingPlan& plan,
                                                                    std::map<std::string, actors::PeerKey>& servers,
                                                                    std::map<std::string, std::string>& proxies);

/// This replica's part in its node's proxy (shards with local_replication).
struct NodeProxy {
  std::string node;                                 ///< host of the replica's device
  std::map<std::size_t, actors::PeerKey> pull_via;  ///< proxied shard id -> the proxy's "host:port"
  /// Set on the node's first replica, which hosts the proxy on its gateway.
  caf::actor actor;
  std::shared_ptr<actors::ProxyCounters> counters;
  std::int64_t expected_reads = 0;  ///< reads of a whole job by all the node's replicas
};

/// Sets up replica `id`'s proxy: none when no shard has local_replication; on the node's
/// first replica, spawns the proxy on `gateway` (its PS addresses from `servers`) and
/// publishes it on `dht` when there is one; on the others, finds the proxy's address in
/// `proxies` (node -> "host:port", from --peers proxy:<node>=...) or else on `dht`.
/// Errors: invalid_argument when a non-first replica has neither; deadline_exceeded
/// when the proxy does not show up in the DHT within a.timeout_ms.
[[nodiscard]] Result<NodeProxy> setup_node_proxy(const PsArgs& a, const core::ps::TrainingPlan& plan, std::int32_t id,
                                                 const std::map<std::string, actors::PeerKey>& servers,
                                                 const std::map<std::string, std::string>& proxies,
                                                 caf::actor_system& sys, std::shared_ptr<actors::Gateway> gateway,
                                                 Dht* dht, Publisher* publisher);

/// On the proxy's host, after its own training: waits (up to a.timeout_ms) until the
/// node's other replicas have read their last step, prints the proxy's counters
/// ("proxy <node>: P pulls for R reads") and stops it. Nothing on other replicas.
void finish_node_proxy(const PsArgs& a, NodeProxy& proxy, actors::Gateway& gateway);

}  // namespace apiary::apps::ps_roles
