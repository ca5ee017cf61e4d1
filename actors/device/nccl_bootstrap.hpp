#pragma once
/// Sharing a NCCL group's unique id over apiary's RPC: the group's first rank makes the
/// id (cuda::nccl_new_id) and serves it under a handle named after the group; every
/// other rank fetches it from that peer, then all join with cuda::nccl_communicator.
/// The id travels as its raw 128 bytes.
#include <chrono>
#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/gateway.hpp"
#include "cuda/nccl_comm.hpp"
#include "messages/result.hpp"

namespace apiary::actors {

/// The RPC handle under which group `group`'s id is served ("nccl.id/<group>").
std::string nccl_id_handle(const std::string& group);

/// Spawns an actor serving `id` for `group` on `gw` (any request is answered with the
/// 128 bytes). Stop it with an exit message when the group has formed.
caf::actor serve_nccl_id(caf::actor_system& sys, std::shared_ptr<Gateway> gw, const std::string& group,
                         const cuda::nccl_id& id);

/// Fetches group `group`'s id from `root` (the peer serving it), waiting at most
/// `timeout`. errc::malformed when the answer is not 128 bytes; the call's own error
/// (not_found when root does not serve the group, unavailable, deadline_exceeded)
/// otherwise.
Result<cuda::nccl_id> fetch_nccl_id(caf::scoped_actor& self, Gateway& gw, const PeerKey& root,
                                    const std::string& group, std::chrono::milliseconds timeout);

}  // namespace apiary::actors
