#include "actors/collective/nccl_id_agreement.hpp"

#include <algorithm>
#include <thread>

#include <caf/scoped_actor.hpp>

#include "actors/device/nccl_bootstrap.hpp"
#include "actors/rpc.hpp"
#include "cuda/nccl.hpp"

namespace apiary::actors {
namespace {

/// Pause between two fetches of the id while rank 0 is not serving it yet, ms: short
/// next to a group's forming, long enough not to flood rank 0.
constexpr std::chrono::milliseconds k_fetch_retry{50};
/// The longest a single fetch of the id may wait for its answer, ms.
constexpr std::chrono::milliseconds k_fetch_call{2000};

}  // namespace

Status wait_for_nccl_fetchers(const NcclGroupConfig& config, NcclFetchers& fetchers) {
  const auto deadline = std::chrono::steady_clock::now() + config.timeout;
  while (true) {
    std::size_t got = 0;
    {
      std::lock_guard<std::mutex> lock(fetchers.mutex);
      got = fetchers.peers.size();
    }
    if (got + 1 >= config.ranks) return ok_status();
    if (std::chrono::steady_clock::now() >= deadline) {
      return make_error(errc::deadline_exceeded,
                        "NCCL group '{}': replica 0 expected the {} other replica(s) to fetch the group's id within "
                        "{} ms, got {}; a replica that cannot join says why in its own output; raise --timeout-ms if "
                        "they are only slow to start",
                        config.group, config.ranks - 1, config.timeout.count(), got);
    }
    std::this_thread::sleep_for(k_fetch_retry);
  }
}

Result<cuda::nccl_id> agree_on_nccl_id(caf::actor_system& sys, const std::shared_ptr<Gateway>& gw,
                                       const NcclGroupConfig& config, caf::actor* server,
                                       const std::shared_ptr<NcclFetchers>& fetchers) {
  cuda::nccl_id id;
  if (config.rank == 0) {
    if (auto st = cuda::nccl_new_id(&id); !st) {
      return make_error(errc::unavailable, "NCCL group '{}': expected a fresh unique id, got: {}", config.group,
                        st.message());
    }
    // Served as fetch_nccl_id expects it: the raw bytes under nccl_id_handle(group).
    *server = serve_unary(sys, gw, nccl_id_handle(config.group), [id, fetchers](const Delivery& d) -> Result<Buffer> {
      {
        std::lock_guard<std::mutex> lock(fetchers->mutex);
        fetchers->peers.insert(d.peer);
      }
      return Buffer::copy_of(id.bytes.data(), id.bytes.size());
    });
    return id;
  }
  caf::scoped_actor self{sys};
  const auto deadline = std::chrono::steady_clock::now() + config.timeout;
  while (true) {
    using std::chrono::milliseconds;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    auto got = fetch_nccl_id(self, *gw, config.root, config.group, std::clamp(left, milliseconds{1}, k_fetch_call));
    if (got) return got;
    if (got.error().code == errc::malformed) return got.error();
    if (std::chrono::steady_clock::now() + k_fetch_retry >= deadline) {
      return make_error(errc::deadline_exceeded,
                        "NCCL group '{}': replica {} expected the group's id from replica 0 at {} within {} ms, got "
                        "none (last: {}); is replica 0 running with the same strategy? raise --timeout-ms",
                        config.group, config.rank, config.root, config.timeout.count(), got.error().what());
    }
    std::this_thread::sleep_for(k_fetch_retry);  // rank 0 may not serve it yet
  }
}

}  // namespace apiary::actors
