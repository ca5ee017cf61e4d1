#pragma once
/// The generic actor host: one CAF actor that runs any core::Role (a core::Mux of several
/// included) over the gateway. It serves the role's handles, turns deliveries and timer
/// wake-ups into core::Inputs, executes the effects through the shared EffectExecutor,
/// and hands each Complete to the caller of its local operation. It holds no protocol
/// decision: everything it does is the same for every role (role_runner.hpp).
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/gateway.hpp"
#include "actors/role_host.hpp"
#include "core/role.hpp"

namespace apiary::actors {

/// Waits (a few seconds at most) until what was posted to `gw`'s transport thread before
/// this call has run there, so that serve() and unserve() calls made before it apply to
/// every frame the thread handles after it returns (that thread may handle a frame that
/// arrived before it takes up its posted work). At once on the transport thread.
void settle_routes(Gateway& gw);

/// spawn_role() with HostKind::actor, as the actor. Its handles are served when it
/// returns: a request sent after it reaches the role.
caf::actor spawn_role_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, std::unique_ptr<core::Role> role,
                            RoleRoutes routes = {});

/// Unregisters the handles of a role host and stops it. A request routed to the host
/// before is in its mailbox ahead of the exit, and is answered; a later one finds the
/// handle gone (or the next host serving it), never a host that has exited.
void stop_role_actor(Gateway& gw, const caf::actor& host, const std::vector<std::string>& handles);

/// The core's name for a caller, from its connection: its listen "host:port" (as the
/// caller announced it) and its PeerID bytes, as a multiaddr with /p2p/ when the PeerID
/// is known; "" when the caller announced no listen address, or a malformed one.
[[nodiscard]] core::PeerAddr peer_addr_of(const std::string& listen_host_port, const std::string& peer_id_bytes);

}  // namespace apiary::actors
