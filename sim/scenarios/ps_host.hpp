#pragma once
/// Parameter-server training as simulated nodes: PsServerHost serves one PS device's
/// shards (core::ps::ShardServer) over the World's network; each replica is a
/// ReplicaHost (sim/scenarios/replica_host.hpp) running the replica's roles of
/// core/train/. Both speak the wire of core/ps/wire.hpp, exactly as the processes of
/// `apiary ps` do, so the simulation exercises the same protocol code.
///
/// Broken connections: the World has no transport, so it tells hosts when a peer's
/// connection breaks (PeerDown), as the gateway does for real processes.
#include "core/ps/server.hpp"
#include "sim/role_host.hpp"
#include "sim/scenarios/replica_host.hpp"

namespace apiary::sim::scenarios {

/// One PS device's shards as a simulated node: the generic host running the server
/// (role() gives its shards, lost replicas and counters).
using PsServerHost = RoleHost<core::ps::ShardServer>;

}  // namespace apiary::sim::scenarios
