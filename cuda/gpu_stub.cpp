// The gpu:: functions of kernels.hpp and runtime.hpp for builds without CUDA: each one
// fails with a message that says how to get the CUDA backend. default_backend() never
// picks cuda in such a build, so these are reached only by explicit requests.
#include "cuda/kernels.hpp"
#include "cuda/missing.hpp"
#include "cuda/runtime.hpp"

namespace apiary::cuda::gpu {

using detail::not_compiled;

bool compiled() noexcept { return false; }

status device_count(int* count) {
  *count = 0;
  return not_compiled("cudaGetDeviceCount");
}

status driver_version(int* version) {
  *version = 0;
  return not_compiled("cudaDriverGetVersion");
}

status runtime_version(int* version) {
  *version = 0;
  return not_compiled("cudaRuntimeGetVersion");
}

status properties(int /*device*/, device_properties* /*out*/) {
  return not_compiled("cudaGetDeviceProperties");
}

status set_device(int /*device*/) { return not_compiled("cudaSetDevice"); }

status allocate(void** ptr, std::size_t /*bytes*/) {
  *ptr = nullptr;
  return not_compiled("cudaMalloc");
}

void release(void* /*ptr*/) noexcept {}

status copy_to_device(void*, const void*, std::size_t) { return not_compiled("cudaMemcpy"); }

status copy_to_host(void*, const void*, std::size_t) { return not_compiled("cudaMemcpy"); }

status fill_bytes(void*, int, std::size_t) { return not_compiled("cudaMemset"); }

status create_stream(stream_handle* out) {
  *out = nullptr;
  return not_compiled("cudaStreamCreate");
}

void destroy_stream(stream_handle /*stream*/) noexcept {}

status synchronize(stream_handle /*stream*/) { return not_compiled("cudaStreamSynchronize"); }

status weighted_accumulate(float*, const float*, float, std::size_t, stream_handle) {
  return not_compiled("gpu::weighted_accumulate");
}

status cast_f32_to_f16(std::uint16_t*, const float*, std::size_t, stream_handle) {
  return not_compiled("gpu::cast_f32_to_f16");
}

status cast_f16_to_f32(float*, const std::uint16_t*, std::size_t, stream_handle) {
  return not_compiled("gpu::cast_f16_to_f32");
}

status divide(float*, const float*, float, std::size_t, stream_handle) {
  return not_compiled("gpu::divide");
}

status sum(const float*, std::size_t, double* out, stream_handle) {
  if (out != nullptr) *out = 0.0;
  return not_compiled("gpu::sum");
}

}  // namespace apiary::cuda::gpu
