#pragma once
/// What the backend-dispatching entry points (kernels.cpp, codec_kernels.cpp) share:
/// the null-pointer failure and the checks-then-twin-or-kernel shape of an element-wise
/// call. Internal to cuda/.
#include <cstddef>
#include <string>

#include "cuda/status.hpp"

namespace apiary::cuda::detail {

/// The failure of `kernel` called with a null pointer for `n` elements.
inline status null_pointer(const char* kernel, std::size_t n) {
  return status::failure(std::string(kernel) + ": got a null pointer for " + std::to_string(n) +
                         " elements; expected buffers of at least n elements (pass n = 0 "
                         "for an empty range)");
}

/// True when every pointer is set.
template <class... P>
bool all_set(P... pointers) {
  return ((pointers != nullptr) && ...);
}

/// An element-wise call over `n` elements: nothing to do when n is 0; null_pointer when
/// not every pointer is set (`pointers_set`); else `gpu()` (returning a status) on the
/// cuda backend or `cpu()` (the twin, which cannot fail) on the cpu backend.
template <class Gpu, class Cpu>
status dispatch(backend where, const char* kernel, std::size_t n, bool pointers_set, Gpu&& gpu,
                Cpu&& cpu) {
  if (n == 0) return ok_status();
  if (!pointers_set) return null_pointer(kernel, n);
  if (where == backend::cuda) return gpu();
  cpu();
  return ok_status();
}

}  // namespace apiary::cuda::detail
