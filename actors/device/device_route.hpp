#pragma once
/// A device actor as the target of roles' Asks (actors/role_actor.hpp: RoleRoutes): the
/// route answers local method core::averaging::k_reduce_method (args ReduceJob) with the
/// device actor's ReducedPart, so a role hosted anywhere hands its part reductions to
/// the device by name ("device") like any other role of the process.
#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/device/device_actor.hpp"
#include "core/averaging/averager_role.hpp"

namespace apiary::actors {

/// Spawns the route to `device` (it stops with the system, or on an exit message).
caf::actor spawn_device_route(caf::actor_system& sys, device_actor device);

}  // namespace apiary::actors
