#pragma once
/// Vocabulary shared by every cuda/ API: the backend enum, the outcome of a call, and
/// an opaque stream handle. Plain C++17 with no dependencies, because cuda/ also builds
/// on machines that have only a compiler, CMake and the CUDA toolkit (no fmt, so no
/// apiary::Result here; the device actor turns a failed `status` into an apiary::Error).
#include <cstdint>
#include <string>
#include <utility>

namespace apiary::cuda {

/// Where a kernel runs and where the memory it touches lives.
enum class backend : std::uint8_t {
  cpu = 0,   ///< host memory, the CPU twins in cpu_kernels.cpp
  cuda = 1,  ///< device memory of the current CUDA device, kernels.cu
};

/// "cpu" or "cuda".
inline const char* to_string(backend b) { return b == backend::cuda ? "cuda" : "cpu"; }

/// A CUDA stream as an opaque pointer (a `cudaStream_t`), so that plain C++ callers need
/// no CUDA headers. nullptr is the device's default stream. The CPU backend ignores it.
using stream_handle = void*;

/// Outcome of a call that can fail: success, or a message that says what was expected,
/// what came and what to do. Cheap to return on success (empty string, no allocation).
class [[nodiscard]] status {
 public:
  /// A successful outcome.
  status() = default;

  /// A failed outcome carrying `message` (must not be empty).
  static status failure(std::string message) {
    status s;
    s.message_ = message.empty() ? std::string("unknown failure") : std::move(message);
    return s;
  }

  /// True when the call succeeded.
  [[nodiscard]] bool ok() const { return message_.empty(); }
  explicit operator bool() const { return ok(); }

  /// Why the call failed; empty on success.
  [[nodiscard]] const std::string& message() const { return message_; }

 private:
  std::string message_;
};

/// A successful status (reads better than `status{}` at a return site).
inline status ok_status() { return status{}; }

}  // namespace apiary::cuda
