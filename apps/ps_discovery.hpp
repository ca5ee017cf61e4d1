#pragma once
/// How the processes of one `apiary ps` job find each other through the DHT instead of
/// (or besides) explicit --peers: every process runs a DHT node on its own gateway; a PS
/// process publishes its address under `<job>.ps.<device>`, the replica hosting a node's
/// proxy under `<job>.proxy.<node>`, and refreshes them while it serves; a replica reads
/// the keys it has no --peers entry for until they appear or its --timeout-ms passes.
/// Also the node proxy of a multi-process job (`local_replication`): the node's first
/// replica hosts it on its gateway, the node's other replicas pull through it.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor.hpp>

#include "actors/gateway.hpp"
#include "actors/ps/proxy_actor.hpp"
#include "api/dht.hpp"
#include "apps/ps_roles.hpp"
#include "core/ps/plan.hpp"
#include "messages/result.hpp"

namespace apiary::apps::ps_roles {

/// Seconds a published address stays in the DHT without a refresh: a process that died
/// stops being found about this long after its last refresh.
inline constexpr double k_record_ttl_s = 30.0;
/// Seconds between refreshes: a third of the lifetime, so two lost refreshes in a row
/// still leave the record alive.
inline constexpr double k_refresh_s = 10.0;
/// Milliseconds between two reads of keys not found yet (a process starting up takes
/// about this long to publish once it listens).
inline constexpr int k_poll_ms = 200;
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

/// Publishes records (key -> "host:port") and refreshes them every k_refresh_s seconds,
/// each living k_record_ttl_s seconds, on its own thread until destroyed.
class Publisher {
 public:
  /// Publishes on `dht`, which must outlive this.
  explicit Publisher(Dht& dht);
  /// Stops refreshing (the records then expire on their own).
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  /// Publishes `address` under `key` now and at every refresh.
  void add(const std::string& key, const std::string& address);

 private:
  void loop();

  Dht& dht_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::string, std::string> records_;
  std::atomic<bool> stop_{false};
  bool dirty_ = false;
  std::thread thread_;
};

/// Reads every key of `wanted` (name -> key) until each holds a "host:port" or `timeout`
/// passes; returns name -> "host:port". `what` names the kind of thing looked up ("PS
/// device"), `hint` says what to do when some are missing. Errors: deadline_exceeded
/// naming the names not found; malformed for a record that is not a "host:port" string.
[[nodiscard]] Result<std::map<std::string, std::string>> find_addresses(
    Dht& dht, const std::map<std::string, std::string>& wanted, std::chrono::milliseconds timeout, const char* what,
    const std::string& hint);

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
