// nccl.hpp over NCCL (compiled as CUDA because nccl.h includes the CUDA headers).
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <string>

#include "cuda/cuda_check.cuh"
#include "cuda/nccl.hpp"

namespace apiary::cuda {
namespace {

status nccl_failure(const std::string& what, ncclResult_t r, const char* advice) {
  return status::failure(what + " failed: " + ncclGetErrorString(r) + " (ncclResult " +
                         std::to_string(static_cast<int>(r)) + "); " + advice);
}

ncclComm_t comm_of(void* p) { return static_cast<ncclComm_t>(p); }

// Restores the calling thread's current device when a clique call returns.
class current_device_guard {
 public:
  current_device_guard() { (void)cudaGetDevice(&saved_); }
  ~current_device_guard() { (void)cudaSetDevice(saved_); }
  current_device_guard(const current_device_guard&) = delete;
  current_device_guard& operator=(const current_device_guard&) = delete;

 private:
  int saved_ = 0;
};

}  // namespace

bool nccl_compiled() noexcept { return true; }

status nccl_version(int* out) {
  *out = 0;
  const ncclResult_t r = ncclGetVersion(out);
  if (r != ncclSuccess) return nccl_failure("ncclGetVersion", r, "expected a loadable libnccl");
  return ok_status();
}

status nccl_clique::create(const std::vector<int>& devices, std::unique_ptr<nccl_clique>* out) {
  out->reset();
  std::vector<int> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  if (devices.empty() || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return status::failure("nccl_clique::create: got " + std::to_string(devices.size()) +
                           " device ordinals (empty or with repeats); expected each local "
                           "device used at most once");
  }
  std::unique_ptr<nccl_clique> clique(new nccl_clique());
  clique->devices_ = devices;
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  const ncclResult_t r =
      ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data());
  if (r != ncclSuccess) {
    return nccl_failure("ncclCommInitAll over " + std::to_string(devices.size()) + " devices", r,
                        "expected usable CUDA devices with those ordinals (see device_info())");
  }
  clique->comms_.assign(comms.begin(), comms.end());
  const current_device_guard guard;
  for (int dev : devices) {
    cudaStream_t s = nullptr;
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      return detail::cuda_failure("nccl_clique::create: a stream on device " + std::to_string(dev),
                                  e, "expected a healthy device");
    }
    clique->streams_.push_back(static_cast<stream_handle>(s));
  }
  *out = std::move(clique);
  return ok_status();
}

nccl_clique::~nccl_clique() {
  const current_device_guard guard;
  for (std::size_t k = 0; k < streams_.size(); ++k) {
    (void)cudaSetDevice(devices_[k]);
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(streams_[k]));
  }
  for (void* c : comms_) (void)ncclCommDestroy(comm_of(c));
}

status nccl_clique::all_reduce_sum(const std::vector<const float*>& send,
                                   const std::vector<float*>& recv, std::size_t n) {
  if (send.size() != size() || recv.size() != size()) {
    return status::failure("nccl_clique::all_reduce_sum: got " + std::to_string(send.size()) +
                           " send and " + std::to_string(recv.size()) +
                           " receive buffers; expected one of each per rank (" +
                           std::to_string(size()) + ")");
  }
  if (n == 0) return ok_status();
  // Issue every rank's part inside one group so that NCCL can launch them together.
  ncclResult_t r = ncclGroupStart();
  for (std::size_t k = 0; k < size() && r == ncclSuccess; ++k) {
    r = ncclAllReduce(send[k], recv[k], n, ncclFloat32, ncclSum, comm_of(comms_[k]),
                      static_cast<cudaStream_t>(streams_[k]));
  }
  const ncclResult_t ended = ncclGroupEnd();
  if (r == ncclSuccess) r = ended;
  if (r != ncclSuccess) {
    return nccl_failure("ncclAllReduce of " + std::to_string(n) + " floats", r,
                        "expected device buffers of n floats on each rank's device");
  }
  // Wait for every rank's stream.
  const current_device_guard guard;
  for (std::size_t k = 0; k < size(); ++k) {
    cudaError_t e = cudaSetDevice(devices_[k]);
    if (e == cudaSuccess) e = cudaStreamSynchronize(static_cast<cudaStream_t>(streams_[k]));
    if (e != cudaSuccess) {
      return detail::cuda_failure(
          "waiting for ncclAllReduce on device " + std::to_string(devices_[k]), e,
          detail::launch_advice);
    }
  }
  return ok_status();
}

}  // namespace apiary::cuda
