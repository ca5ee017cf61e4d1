#pragma once
/// Which backend runs the kernels, decided at run time: CUDA when this build compiled it
/// (APIARY_HAVE_CUDA) and the CUDA runtime sees at least one device, otherwise the CPU
/// twins. The environment variable APIARY_BACKEND (cpu | cuda | auto) can force the
/// CPU. Plain C++: the CUDA calls happen behind runtime.hpp and nccl.hpp.
#include <string>
#include <vector>

#include "cuda/runtime.hpp"
#include "cuda/status.hpp"

namespace apiary::cuda {

/// What the process can see of CUDA and NCCL, gathered by probe_cuda().
struct cuda_probe {
  bool compiled = false;     ///< this build has the CUDA kernels
  bool nccl_linked = false;  ///< this build links NCCL
  int device_count = 0;      ///< usable CUDA devices (0 when none or not compiled)
  int driver_version = 0;    ///< 1000*major + 10*minor (13000 = 13.0); 0: no driver
  int runtime_version = 0;   ///< CUDA runtime linked in, same encoding; 0: none
  int nccl_version = 0;      ///< 10000*major + 100*minor + patch; 0: not linked
  std::string device_error;  ///< why device_count is 0 (empty when it is not)
  std::vector<gpu::device_properties> devices;  ///< one entry per device
};

/// Asks the CUDA runtime and NCCL now (a few milliseconds the first time: it loads the
/// driver). Never fails: whatever could not be read stays 0 and is explained.
cuda_probe probe_cuda();

/// What the caller asks for.
enum class backend_preference {
  automatic,  ///< cuda when available, else cpu
  cpu,        ///< always the CPU twins
  cuda,       ///< cuda when available, else cpu (device_info() says why)
};

/// Parses "auto", "cpu" or "cuda" (case-sensitive). Fails on anything else, naming
/// the accepted values; `*out` is then automatic.
status parse_backend_preference(const std::string& text, backend_preference* out);

/// The decision itself: cuda when `preferred` is not cpu and `cuda_devices` > 0.
backend choose_backend(backend_preference preferred, int cuda_devices);

/// The backend for this process, decided once (thread-safe) from APIARY_BACKEND and
/// probe_cuda(); an unparsable APIARY_BACKEND counts as auto.
backend default_backend();

/// Several lines describing the build and the machine: CUDA runtime and driver
/// versions, NCCL version, each device (name, compute capability, SMs, memory), the
/// reason when there is none, and the backend default_backend() picked.
std::string device_info();

}  // namespace apiary::cuda
