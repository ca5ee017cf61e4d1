#pragma once
/// A node's proxy of dense PS variables (`local_replication`) in the generic actor host:
/// core::ps::ProxyServer serving the pull handle (core/ps/wire.hpp) on its own
/// gateway. The node's replicas pull proxied shards from it (ReplicaConfig::pull_via,
/// core/train/replica_role.hpp); it sends one pull per shard per step to the PS.
#include <atomic>
#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <cstdint>
#include <memory>

#include "actors/gateway.hpp"
#include "core/ps/proxy_server.hpp"

namespace apiary::actors {

/// The proxy's counters, readable from any thread while it runs.
struct ProxyCounters {
  std::atomic<std::int64_t> pulls{0};  ///< pulls sent to the PS (one per shard per step)
  std::atomic<std::int64_t> reads{0};  ///< reads answered to local replicas
  std::atomic<std::int64_t> done{0};   ///< replicas that said they are done reading
};

/// Spawns the proxy actor owning `proxy` on `gw` and registers it for the pull handle
/// (one proxy per gateway; the gateway must serve no PS). `counters`, when given, is
/// kept up to date.
caf::actor spawn_ps_proxy_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, core::ps::ProxyServer proxy,
                                std::shared_ptr<ProxyCounters> counters = nullptr);

/// Stops routing the proxy's handles to it on `gw` and stops the actor.
void stop_ps_proxy_actor(Gateway& gw, const caf::actor& proxy);

}  // namespace apiary::actors
