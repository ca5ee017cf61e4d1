#pragma once
/// The failures of the stubs that stand in for CUDA (gpu_stub.cpp, codec_stub.cpp) and
/// NCCL (nccl_stub.cpp) in builds without them: each says how to get what is missing.
/// Internal to cuda/.
#include <string>

#include "cuda/status.hpp"

namespace apiary::cuda::detail {

/// The failure of `what` in a build without the CUDA backend.
inline status not_compiled(const char* what) {
  return status::failure(std::string(what) +
                         ": this build has no CUDA backend; expected a build with "
                         "APIARY_ENABLE_CUDA=ON (nvcc found), or use backend::cpu");
}

/// The failure of `what` in a build without NCCL.
inline status not_linked(const char* what) {
  return status::failure(std::string(what) +
                         ": this build has no NCCL; expected APIARY_ENABLE_CUDA=ON with "
                         "nccl.h and libnccl found (set NCCL_ROOT), then rebuild");
}

}  // namespace apiary::cuda::detail
