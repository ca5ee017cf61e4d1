// nccl.hpp for builds without NCCL: every call fails and says how to get NCCL.
#include "cuda/missing.hpp"
#include "cuda/nccl.hpp"
#include "cuda/nccl_comm.hpp"

namespace apiary::cuda {

using detail::not_linked;

bool nccl_compiled() noexcept { return false; }

status nccl_version(int* out) {
  *out = 0;
  return not_linked("nccl_version");
}

status nccl_clique::create(const std::vector<int>& /*devices*/, std::unique_ptr<nccl_clique>* out) {
  out->reset();
  return not_linked("nccl_clique::create");
}

nccl_clique::~nccl_clique() = default;

status nccl_clique::all_reduce_sum(const std::vector<const float*>& /*send*/,
                                   const std::vector<float*>& /*recv*/, std::size_t /*n*/) {
  return not_linked("nccl_clique::all_reduce_sum");
}

status nccl_new_id(nccl_id* out) {
  *out = nccl_id{};
  return not_linked("nccl_new_id");
}

status nccl_communicator::create(const nccl_id& /*id*/, int /*ranks*/, int /*rank*/, int /*device*/,
                                 std::unique_ptr<nccl_communicator>* out) {
  out->reset();
  return not_linked("nccl_communicator::create");
}

nccl_communicator::~nccl_communicator() = default;

status nccl_communicator::all_reduce(const float*, float*, std::size_t, nccl_op, const abort_probe&) {
  return not_linked("nccl_communicator::all_reduce");
}

status nccl_communicator::all_gather(const float*, float*, std::size_t, const abort_probe&) {
  return not_linked("nccl_communicator::all_gather");
}

}  // namespace apiary::cuda
