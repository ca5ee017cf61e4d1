#pragma once
/// How the ranks of a NCCL group (nccl_group.hpp) agree on its unique id before joining:
/// rank 0 makes and serves it, the others fetch it from rank 0, and rank 0 waits until
/// every other rank has fetched it, so that one which never will ends the group with an
/// error instead of NCCL waiting for it.
#include <memory>
#include <mutex>
#include <set>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/collective/nccl_group.hpp"
#include "cuda/nccl_comm.hpp"

namespace apiary::actors {

/// The peers that fetched the id from rank 0.
struct NcclFetchers {
  std::mutex mutex;
  std::set<PeerKey> peers;
};

/// The group's id: made and served by rank 0 (`*server` then serves it and records who
/// fetched it in `fetchers`), fetched from rank 0 by every other rank, retrying until
/// config.timeout passes.
Result<cuda::nccl_id> agree_on_nccl_id(caf::actor_system& sys, const std::shared_ptr<Gateway>& gw,
                                       const NcclGroupConfig& config, caf::actor* server,
                                       const std::shared_ptr<NcclFetchers>& fetchers);

/// Rank 0: waits until every other rank fetched the id, or config.timeout passes.
Status wait_for_nccl_fetchers(const NcclGroupConfig& config, NcclFetchers& fetchers);

}  // namespace apiary::actors
