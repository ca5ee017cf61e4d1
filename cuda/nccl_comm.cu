// nccl_comm.hpp over NCCL (compiled as CUDA because nccl.h includes the CUDA headers).
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "cuda/cuda_check.cuh"
#include "cuda/nccl_comm.hpp"

namespace apiary::cuda {
namespace {

static_assert(sizeof(ncclUniqueId) == nccl_id_bytes, "ncclUniqueId is 128 bytes");

status nccl_failure(const std::string& what, ncclResult_t r, const char* advice) {
  return status::failure(what + " failed: " + ncclGetErrorString(r) + " (ncclResult " +
                         std::to_string(static_cast<int>(r)) + "); " + advice);
}

ncclRedOp_t nccl_of(nccl_op op) {
  switch (op) {
    case nccl_op::prod: return ncclProd;
    case nccl_op::min: return ncclMin;
    case nccl_op::max: return ncclMax;
    case nccl_op::avg: return ncclAvg;
    case nccl_op::sum: break;
  }
  return ncclSum;
}

}  // namespace

status nccl_new_id(nccl_id* out) {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    return nccl_failure("ncclGetUniqueId", r, "expected a loadable libnccl and a usable network interface");
  }
  std::memcpy(out->bytes.data(), &id, nccl_id_bytes);
  return ok_status();
}

status nccl_communicator::create(const nccl_id& id, int ranks, int rank, int device,
                                 std::unique_ptr<nccl_communicator>* out) {
  out->reset();
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    return status::failure("nccl_communicator::create: got rank " + std::to_string(rank) + " of " +
                           std::to_string(ranks) + "; expected 0 <= rank < ranks");
  }
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return detail::cuda_failure("nccl_communicator::create: cudaSetDevice(" + std::to_string(device) + ")",
                                e, "expected a usable CUDA device with that ordinal (see device_info())");
  }
  std::unique_ptr<nccl_communicator> c(new nccl_communicator());
  c->ranks_ = ranks;
  c->rank_ = rank;
  c->device_ = device;
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess) {
    return detail::cuda_failure("nccl_communicator::create: a stream", e, "expected a healthy device");
  }
  c->stream_ = stream;
  ncclUniqueId unique;
  std::memcpy(&unique, id.bytes.data(), nccl_id_bytes);
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRank(&comm, ranks, unique, rank);
  if (r != ncclSuccess) {
    return nccl_failure("ncclCommInitRank (rank " + std::to_string(rank) + " of " +
                            std::to_string(ranks) + ")",
                        r, "expected every rank to join with the same id, a distinct rank and its own GPU");
  }
  c->comm_ = comm;
  *out = std::move(c);
  return ok_status();
}

nccl_communicator::~nccl_communicator() {
  (void)cudaSetDevice(device_);
  if (comm_ != nullptr) (void)ncclCommDestroy(static_cast<ncclComm_t>(comm_));
  if (stream_ != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

status nccl_communicator::usable(const char* what) {
  if (!aborted_why_.empty()) {
    return status::failure(std::string(what) + ": the communicator was aborted (" + aborted_why_ +
                           "); expected a new group to be formed");
  }
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
    return detail::cuda_failure(std::string(what) + ": cudaSetDevice", e, detail::launch_advice);
  }
  return ok_status();
}

status nccl_communicator::finish(int result, const std::string& what, const abort_probe& probe) {
  const auto r = static_cast<ncclResult_t>(result);
  const auto stream = static_cast<cudaStream_t>(stream_);
  if (r != ncclSuccess) {
    return nccl_failure(what, r, "expected device buffers of the stated sizes on this rank's device, "
                                 "and every rank calling the same collectives in the same order");
  }
  if (!probe) {
    return detail::check(cudaStreamSynchronize(stream), "waiting for " + what + " on device " + std::to_string(device_),
                         detail::launch_advice);
  }
  // Polled instead of synchronized, so that a member that went down does not keep this
  // rank waiting inside NCCL for ever: the communicator is aborted instead.
  const auto comm = static_cast<ncclComm_t>(comm_);
  while (true) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return ok_status();
    if (q != cudaErrorNotReady) {
      return detail::check(q, "waiting for " + what + " on device " + std::to_string(device_), detail::launch_advice);
    }
    std::string why;
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
      why = std::string("NCCL reported ") + ncclGetErrorString(async);
    } else {
      why = probe();
    }
    if (!why.empty()) {
      (void)ncclCommAbort(comm);
      comm_ = nullptr;
      aborted_why_ = why;
      return status::failure(what + " aborted on rank " + std::to_string(rank_) + ": " + why);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

status nccl_communicator::all_reduce(const float* send, float* recv, std::size_t n, nccl_op op,
                                     const abort_probe& probe) {
  if (auto st = usable("nccl all_reduce"); !st) return st;
  if (n == 0) return ok_status();
  const ncclResult_t r = ncclAllReduce(send, recv, n, ncclFloat32, nccl_of(op), static_cast<ncclComm_t>(comm_),
                                       static_cast<cudaStream_t>(stream_));
  return finish(r, "ncclAllReduce of " + std::to_string(n) + " floats", probe);
}

status nccl_communicator::all_gather(const float* send, float* recv, std::size_t n, const abort_probe& probe) {
  if (auto st = usable("nccl all_gather"); !st) return st;
  if (n == 0) return ok_status();
  const ncclResult_t r = ncclAllGather(send, recv, n, ncclFloat32, static_cast<ncclComm_t>(comm_),
                                       static_cast<cudaStream_t>(stream_));
  return finish(r, "ncclAllGather of " + std::to_string(n) + " floats per rank", probe);
}

}  // namespace apiary::cuda
