#pragma once
/// A NCCL communicator for one rank of a group spread over processes (one GPU each):
/// the ranks agree on a 128-byte unique id made by one of them and shared out of band
/// (actors/device/nccl_bootstrap.hpp serves and fetches it over apiary's RPC), then each
/// joins with its rank. All-reduce and all-gather of float32 device buffers, issued on
/// the communicator's own stream and waited for. Implemented in nccl_comm.cu when NCCL
/// is linked, by nccl_stub.cpp otherwise (every call then fails, saying why).
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cuda/status.hpp"

namespace apiary::cuda {

/// Bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES).
inline constexpr std::size_t nccl_id_bytes = 128;

/// An ncclUniqueId as plain bytes, so it can travel in any message.
struct nccl_id {
  std::array<std::uint8_t, nccl_id_bytes> bytes{};  ///< opaque to everyone but NCCL
};

/// A fresh unique id (ncclGetUniqueId), made by the group's first rank.
status nccl_new_id(nccl_id* out);

/// The reduction of all_reduce.
enum class nccl_op : std::uint8_t { sum, prod, min, max, avg };

/// Asked while a collective waits: empty to go on waiting, else why to give up (say, a
/// member of the group went down; NCCL itself would wait for it for ever).
using abort_probe = std::function<std::string()>;

/// One rank's communicator, its CUDA device and one stream on it. Not thread-safe.
class nccl_communicator {
 public:
  /// Joins group `id` as `rank` (0 <= rank < ranks) on CUDA device `device` into `*out`
  /// (ncclCommInitRank: returns once every rank has joined).
  [[nodiscard]] static status create(const nccl_id& id, int ranks, int rank, int device,
                                     std::unique_ptr<nccl_communicator>* out);
  ~nccl_communicator();
  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;

  /// Ranks in the group.
  [[nodiscard]] int ranks() const { return ranks_; }
  /// This rank.
  [[nodiscard]] int rank() const { return rank_; }
  /// The CUDA ordinal this rank uses.
  [[nodiscard]] int device() const { return device_; }
  /// The stream collectives run on.
  [[nodiscard]] stream_handle stream() const { return stream_; }

  /// recv[i] = op over every rank's send[i], i < n (float32 device pointers on device();
  /// send may equal recv). Returns when the result is in place. While it waits, `probe`
  /// (if set) is asked about every 50 us; when it gives a reason, or NCCL reports an
  /// asynchronous error (a peer's connection lost), the communicator is aborted
  /// (ncclCommAbort) and the call fails saying why; every later call then fails too.
  status all_reduce(const float* send, float* recv, std::size_t n, nccl_op op = nccl_op::sum,
                    const abort_probe& probe = {});
  /// recv[r * n + i] = rank r's send[i], i < n: recv holds ranks() * n floats. Returns when
  /// the result is in place. `probe`: as all_reduce.
  status all_gather(const float* send, float* recv, std::size_t n, const abort_probe& probe = {});
  /// Whether the communicator was aborted (see all_reduce); it is then unusable.
  [[nodiscard]] bool aborted() const { return !aborted_why_.empty(); }

 private:
  nccl_communicator() = default;

  int ranks_ = 0;
  int rank_ = 0;
  int device_ = 0;
  /// Waits for the collective `what` enqueued with result `r` on the stream (see all_reduce).
  status finish(int r, const std::string& what, const abort_probe& probe);
  /// Why a call cannot run: the communicator was aborted, or the device cannot be selected.
  status usable(const char* what);

  void* comm_ = nullptr;            // ncclComm_t; null once aborted
  stream_handle stream_ = nullptr;  // cudaStream_t
  std::string aborted_why_;         // empty while usable
};

}  // namespace apiary::cuda
