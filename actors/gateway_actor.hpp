#pragma once
/// The gateway actor: the message-based front of a process's gateway, for actors that
/// prefer request/then to the direct calls of gateway.hpp. It owns a reference to the
/// gateway (and so its transport); the direct calls stay the fast path (one thread
/// hand-off each way instead of two).
///
/// Messages:
///   (serve_atom, std::string handle, caf::actor service)          → routes the handle
///   (call_atom, std::string peer, std::string handle, Buffer request, caf::timespan timeout)
///       → Result<Buffer>: the unary response, or the call's error
#include <memory>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/gateway.hpp"

namespace apiary::actors {

/// Spawns the gateway actor over `gw`. When it exits it stops the gateway.
caf::actor spawn_gateway_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw);

}  // namespace apiary::actors
