#pragma once
/// The parameter-server role (core::ps::ShardServer) in the generic actor host: it
/// serves the PS handles (core/ps/wire.hpp) over the gateway and sends each answer when
/// the server releases it. apiary::ParameterServer (api/parameter_server.hpp) starts it;
/// replicas talk to it through apiary::Replica (api/replica.hpp).
#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/gateway.hpp"
#include "core/ps/server.hpp"

namespace apiary::actors {

/// What a PS actor tells its owner, updated after every input.
struct PsCounters {
  /// Replicas done with this server: finished (their session ended normally) or dropped.
  std::atomic<std::size_t> replicas_done{0};
};

/// Spawns the PS actor owning `server` on `gw` and registers it for the push and pull
/// handles (one PS actor per gateway); `counters`, when given, follow the server.
caf::actor spawn_ps_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, core::ps::ShardServer server,
                          std::shared_ptr<PsCounters> counters = nullptr);

/// Stops routing the PS handles to the actor on `gw` and stops the actor.
void stop_ps_actor(Gateway& gw, const caf::actor& ps);

}  // namespace apiary::actors
