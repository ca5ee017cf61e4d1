// Backend selection and the device report. Plain C++ over runtime.hpp and nccl.hpp.
#include "cuda/device.hpp"

#include <cstdio>
#include <cstdlib>

#include "cuda/nccl.hpp"

namespace apiary::cuda {
namespace {

// 13000 -> "13.0"; 0 -> "none".
std::string cuda_version_text(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// 22809 -> "2.28.9"; 0 -> "none".
std::string nccl_version_text(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." +
         std::to_string(v % 100);
}

std::string gib_text(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB",
                static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

}  // namespace

cuda_probe probe_cuda() {
  cuda_probe p;
  p.compiled = gpu::compiled();
  p.nccl_linked = nccl_compiled();
  if (p.nccl_linked) (void)nccl_version(&p.nccl_version);
  if (!p.compiled) {
    p.device_error = "built without CUDA (APIARY_ENABLE_CUDA=OFF or nvcc not found)";
    return p;
  }
  (void)gpu::runtime_version(&p.runtime_version);
  (void)gpu::driver_version(&p.driver_version);
  const status counted = gpu::device_count(&p.device_count);
  if (!counted) {
    p.device_error = counted.message();
    return p;
  }
  if (p.device_count == 0) p.device_error = "cudaGetDeviceCount returned 0 devices";
  for (int d = 0; d < p.device_count; ++d) {
    gpu::device_properties props;
    const status read = gpu::properties(d, &props);
    if (!read) props.name = "unreadable: " + read.message();
    p.devices.push_back(props);
  }
  return p;
}

status parse_backend_preference(const std::string& text, backend_preference* out) {
  *out = backend_preference::automatic;
  if (text == "auto") return ok_status();
  if (text == "cpu") {
    *out = backend_preference::cpu;
    return ok_status();
  }
  if (text == "cuda") {
    *out = backend_preference::cuda;
    return ok_status();
  }
  return status::failure("backend preference \"" + text +
                         "\" is not known; expected one of auto, cpu, cuda");
}

backend choose_backend(backend_preference preferred, int cuda_devices) {
  if (preferred == backend_preference::cpu || cuda_devices <= 0) return backend::cpu;
  return backend::cuda;
}

namespace {

backend_preference preference_from_environment() {
  backend_preference preferred = backend_preference::automatic;
  if (const char* text = std::getenv("APIARY_BACKEND")) {
    (void)parse_backend_preference(text, &preferred);
  }
  return preferred;
}

}  // namespace

backend default_backend() {
  static const backend chosen = [] {
    const backend_preference preferred = preference_from_environment();
    if (preferred == backend_preference::cpu) return backend::cpu;  // skip loading the driver
    return choose_backend(preferred, probe_cuda().device_count);
  }();
  return chosen;
}

std::string device_info() {
  const cuda_probe p = probe_cuda();
  std::string out;
  out += "cuda compiled: " + std::string(p.compiled ? "yes" : "no") + ", runtime " +
         cuda_version_text(p.runtime_version) + ", driver " + cuda_version_text(p.driver_version) +
         "\n";
  out +=
      "nccl: " + (p.nccl_linked ? nccl_version_text(p.nccl_version) : std::string("not linked")) +
      "\n";
  out += "cuda devices: " + std::to_string(p.device_count);
  if (!p.device_error.empty()) out += " (" + p.device_error + ")";
  out += "\n";
  for (std::size_t d = 0; d < p.devices.size(); ++d) {
    const gpu::device_properties& dev = p.devices[d];
    out += "  device " + std::to_string(d) + ": " + dev.name + ", sm_" + std::to_string(dev.major) +
           std::to_string(dev.minor) + ", " + std::to_string(dev.multiprocessors) + " SMs, " +
           gib_text(dev.memory_bytes) + "\n";
  }
  out += "backend: " + std::string(to_string(default_backend()));
  const char* forced = std::getenv("APIARY_BACKEND");
  if (forced != nullptr) out += " (APIARY_BACKEND=" + std::string(forced) + ")";
  out += "\n";
  return out;
}

}  // namespace apiary::cuda
