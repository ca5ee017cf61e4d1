#include "actors/device/nccl_bootstrap.hpp"

#include <cstring>

#include "actors/rpc.hpp"

namespace apiary::actors {

std::string nccl_id_handle(const std::string& group) { return "nccl.id/" + group; }

caf::actor serve_nccl_id(caf::actor_system& sys, std::shared_ptr<Gateway> gw, const std::string& group,
                         const cuda::nccl_id& id) {
  return serve_unary(sys, std::move(gw), nccl_id_handle(group),
                     [id](const Delivery&) -> Result<Buffer> {
                       return Buffer::copy_of(id.bytes.data(), id.bytes.size());
                     });
}

Result<cuda::nccl_id> fetch_nccl_id(caf::scoped_actor& self, Gateway& gw, const PeerKey& root,
                                    const std::string& group, std::chrono::milliseconds timeout) {
  auto answer = call_unary(self, gw, root, nccl_id_handle(group), Buffer{}, timeout);
  if (!answer) return answer.error();
  if (answer->size() != cuda::nccl_id_bytes) {
    return make_error(errc::malformed,
                      "NCCL id of group '{}' from {}: expected {} bytes, got {}; the peer serves "
                      "something else under {}",
                      group, root, cuda::nccl_id_bytes, answer->size(), nccl_id_handle(group));
  }
  cuda::nccl_id id;
  std::memcpy(id.bytes.data(), answer->data(), cuda::nccl_id_bytes);
  return id;
}

}  // namespace apiary::actors
