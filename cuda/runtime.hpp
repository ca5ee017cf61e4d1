#pragma once
/// Thin, plain-C++ wrappers over the CUDA runtime calls that host code needs: device
/// discovery, memory, copies and streams. Implemented in runtime.cu when CUDA is
/// compiled, and by gpu_stub.cpp otherwise (every call then fails, saying so).
#include <cstddef>
#include <string>

#include "cuda/status.hpp"

namespace apiary::cuda::gpu {

/// What one CUDA device reports about itself.
struct device_properties {
  std::string name;              ///< e.g. "NVIDIA H200"
  int major = 0;                 ///< compute capability major (9 on Hopper)
  int minor = 0;                 ///< compute capability minor
  int multiprocessors = 0;       ///< SM count
  std::size_t memory_bytes = 0;  ///< total global memory, bytes
};

/// True when this build compiled the CUDA kernels (APIARY_HAVE_CUDA).
bool compiled() noexcept;

/// Number of CUDA devices visible to this process. On failure (no driver, no device,
/// not compiled) `*count` is 0 and the message carries cudaGetDeviceCount's error.
status device_count(int* count);

/// CUDA driver version as 1000*major + 10*minor (13000 = 13.0); 0 without a driver.
status driver_version(int* version);

/// Version of the CUDA runtime linked into this binary, same encoding.
status runtime_version(int* version);

/// Properties of device `device` (0-based ordinal).
status properties(int device, device_properties* out);

/// Makes `device` current for this host thread.
status set_device(int device);

/// cudaMalloc of `bytes` on the current device (`*ptr` = nullptr for 0 bytes).
status allocate(void** ptr, std::size_t bytes);

/// cudaFree; nullptr is ignored. Errors are dropped (nothing useful to do with them).
void release(void* ptr) noexcept;

/// Copies `bytes` from host memory to device memory and waits until it is done.
status copy_to_device(void* device_dst, const void* host_src, std::size_t bytes);

/// Copies `bytes` from device memory to host memory and waits until it is done. It is
/// ordered after work on the default stream only: synchronize other streams first.
status copy_to_host(void* host_dst, const void* device_src, std::size_t bytes);

/// Sets `bytes` of device memory to the byte `value` and waits until it is done.
status fill_bytes(void* device_dst, int value, std::size_t bytes);

/// Creates a non-blocking stream on the current device.
status create_stream(stream_handle* out);

/// Destroys a stream made by create_stream; nullptr is ignored.
void destroy_stream(stream_handle stream) noexcept;

/// Waits until all work queued on `stream` (nullptr: the default stream) has finished,
/// and reports any error a kernel on it raised.
status synchronize(stream_handle stream = nullptr);

}  // namespace apiary::cuda::gpu
