#pragma once
// Turning CUDA runtime errors into cuda::status. Included by .cu files only, so that
// g++-compiled files never see CUDA headers.
#include <cuda_runtime.h>

#include <string>

#include "cuda/status.hpp"

namespace apiary::cuda::detail {

/// "<what> failed: cudaErrorX (text); <advice>".
inline status cuda_failure(const std::string& what, cudaError_t error, const char* advice) {
  return status::failure(what + " failed: " + cudaGetErrorName(error) + " (" +
                         cudaGetErrorString(error) + "); " + advice);
}

/// The advice attached to kernel launch failures.
inline constexpr const char* launch_advice =
    "expected device pointers of the current device (allocate with device_buffer on "
    "backend::cuda) and a healthy device; see device_info()";

/// ok_status() when `error` is cudaSuccess, otherwise cuda_failure(what, error, advice).
inline status check(cudaError_t error, const std::string& what, const char* advice) {
  return error == cudaSuccess ? ok_status() : cuda_failure(what, error, advice);
}

}  // namespace apiary::cuda::detail
