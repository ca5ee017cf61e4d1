#pragma once
/// NCCL from plain C++: the library version, and a clique of communicators for one
/// process that drives several local GPUs (ncclCommInitAll), the shape of the AllReduce
/// synchronizer's NCCL path inside one host. Implemented in nccl.cu when NCCL is
/// linked (APIARY_HAVE_NCCL), by nccl_stub.cpp otherwise (every call then fails).
#include <cstddef>
#include <memory>
#include <vector>

#include "cuda/status.hpp"

namespace apiary::cuda {

/// True when this build links NCCL.
bool nccl_compiled() noexcept;

/// NCCL's version code, 10000*major + 100*minor + patch (22809 = 2.28.9). Works without
/// a GPU; fails only when NCCL is not linked.
status nccl_version(int* out);

/// One NCCL communicator per listed device, all owned by this process, plus one stream
/// per device. Collectives are issued as one NCCL group and waited for.
class nccl_clique {
 public:
  /// Creates communicators over the CUDA ordinals `devices` (non-empty, no repeats)
  /// into `*out`.
  [[nodiscard]] static status create(const std::vector<int>& devices,
                                     std::unique_ptr<nccl_clique>* out);

  ~nccl_clique();
  nccl_clique(const nccl_clique&) = delete;
  nccl_clique& operator=(const nccl_clique&) = delete;

  /// Number of ranks (devices).
  [[nodiscard]] std::size_t size() const { return devices_.size(); }

  /// The CUDA ordinal of rank `rank`.
  [[nodiscard]] int device(std::size_t rank) const { return devices_[rank]; }

  /// For each rank k: recv[k][i] = sum over ranks r of send[r][i], for i < n (float32).
  /// send[k] and recv[k] are device pointers on device(k) and may be equal (in place).
  /// Returns when every rank's result is in place.
  status all_reduce_sum(const std::vector<const float*>& send, const std::vector<float*>& recv,
                        std::size_t n);

 private:
  nccl_clique() = default;

  std::vector<int> devices_;
  std::vector<void*> comms_;            // ncclComm_t per rank
  std::vector<stream_handle> streams_;  // cudaStream_t per rank
};

}  // namespace apiary::cuda
