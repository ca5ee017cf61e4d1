#pragma once
/// The host of a replica's NCCL group as a role route: an actor (detached: a mean blocks
/// in NCCL) that answers the "mean" Asks of core/train's AllReduceRole
/// (core::train::NcclMeanArgs -> the averaged tensors) through NcclGroup::mean. Give it
/// to the replica's host as RoleRoutes{{"nccl", actor}}.
#include <memory>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/collective/nccl_group.hpp"

namespace apiary::actors {

/// Spawns the route; it holds `group` until it exits (caf::anon_send_exit).
caf::actor spawn_nccl_route(caf::actor_system& sys, std::shared_ptr<NcclGroup> group);

}  // namespace apiary::actors
