// runtime.hpp over the CUDA runtime API (linked statically: CUDA::cudart_static).
#include <cuda_runtime.h>

#include <string>

#include "cuda/cuda_check.cuh"
#include "cuda/runtime.hpp"

namespace apiary::cuda::gpu {
namespace {

constexpr const char* memory_advice =
    "expected a device pointer from gpu::allocate and a host pointer of at least that "
    "many bytes; check sizes and that the device is healthy (device_info())";

std::string bytes_text(std::size_t bytes) { return std::to_string(bytes) + " bytes"; }

}  // namespace

bool compiled() noexcept { return true; }

status device_count(int* count) {
  *count = 0;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so later calls start clean
    return detail::cuda_failure("cudaGetDeviceCount", e,
                                "expected an NVIDIA driver and at least one device; the CPU "
                                "backend is used instead");
  }
  *count = n;
  return ok_status();
}

status driver_version(int* version) {
  *version = 0;
  return detail::check(cudaDriverGetVersion(version), "cudaDriverGetVersion",
                       "expected an NVIDIA driver to be installed");
}

status runtime_version(int* version) {
  *version = 0;
  return detail::check(cudaRuntimeGetVersion(version), "cudaRuntimeGetVersion",
                       "expected a working CUDA runtime");
}

status properties(int device, device_properties* out) {
  cudaDeviceProp p{};
  const cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) {
    return detail::cuda_failure("cudaGetDeviceProperties(" + std::to_string(device) + ")", e,
                                "expected a device ordinal below gpu::device_count()");
  }
  out->name = p.name;
  out->major = p.major;
  out->minor = p.minor;
  out->multiprocessors = p.multiProcessorCount;
  out->memory_bytes = p.totalGlobalMem;
  return ok_status();
}

status set_device(int device) {
  return detail::check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")",
                       "expected a device ordinal below gpu::device_count()");
}

status allocate(void** ptr, std::size_t bytes) {
  *ptr = nullptr;
  if (bytes == 0) return ok_status();
  return detail::check(cudaMalloc(ptr, bytes), "cudaMalloc of " + bytes_text(bytes),
                       "expected that much free device memory; free buffers or allocate less");
}

void release(void* ptr) noexcept {
  if (ptr != nullptr) (void)cudaFree(ptr);
}

status copy_to_device(void* device_dst, const void* host_src, std::size_t bytes) {
  if (bytes == 0) return ok_status();
  status st = detail::check(cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice),
                            "cudaMemcpy host->device of " + bytes_text(bytes), memory_advice);
  if (!st) return st;
  // From pageable memory cudaMemcpy may return before the DMA lands; kernels on
  // non-blocking streams are not ordered after it, so wait for it here.
  return detail::check(cudaStreamSynchronize(cudaStreamLegacy),
                       "waiting for a host->device copy of " + bytes_text(bytes), memory_advice);
}

status copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) {
  if (bytes == 0) return ok_status();
  return detail::check(cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost),
                       "cudaMemcpy device->host of " + bytes_text(bytes), memory_advice);
}

status fill_bytes(void* device_dst, int value, std::size_t bytes) {
  if (bytes == 0) return ok_status();
  status st = detail::check(cudaMemset(device_dst, value, bytes),
                            "cudaMemset of " + bytes_text(bytes), memory_advice);
  if (!st) return st;
  return detail::check(cudaStreamSynchronize(cudaStreamLegacy),
                       "waiting for a cudaMemset of " + bytes_text(bytes), memory_advice);
}

status create_stream(stream_handle* out) {
  cudaStream_t s = nullptr;
  *out = nullptr;
  status st = detail::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                            "cudaStreamCreateWithFlags", "expected a healthy current device");
  if (st) *out = static_cast<stream_handle>(s);
  return st;
}

void destroy_stream(stream_handle stream) noexcept {
  if (stream != nullptr) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}

status synchronize(stream_handle stream) {
  return detail::check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
                       "cudaStreamSynchronize (a kernel queued on the stream failed)",
                       detail::launch_advice);
}

}  // namespace apiary::cuda::gpu
