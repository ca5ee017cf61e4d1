// The backend-dispatching kernel entry points: argument checks, then the CPU twin or
// the CUDA kernel. Plain C++: the gpu:: functions live in kernels.cu (or gpu_stub.cpp).
#include "cuda/kernels.hpp"

#include "cuda/dispatch.hpp"

namespace apiary::cuda {

using detail::all_set;
using detail::dispatch;

status weighted_accumulate(backend where, float* acc, const float* x, float w, std::size_t n,
                           stream_handle stream) {
  return dispatch(where, "weighted_accumulate", n, all_set(acc, x),
                  [&] { return gpu::weighted_accumulate(acc, x, w, n, stream); },
                  [&] { cpu::weighted_accumulate(acc, x, w, n); });
}

status cast_f32_to_f16(backend where, std::uint16_t* dst, const float* src, std::size_t n,
                       stream_handle stream) {
  return dispatch(where, "cast_f32_to_f16", n, all_set(dst, src),
                  [&] { return gpu::cast_f32_to_f16(dst, src, n, stream); },
                  [&] { cpu::cast_f32_to_f16(dst, src, n); });
}

status cast_f16_to_f32(backend where, float* dst, const std::uint16_t* src, std::size_t n,
                       stream_handle stream) {
  return dispatch(where, "cast_f16_to_f32", n, all_set(dst, src),
                  [&] { return gpu::cast_f16_to_f32(dst, src, n, stream); },
                  [&] { cpu::cast_f16_to_f32(dst, src, n); });
}

status divide(backend where, float* dst, const float* src, float divisor, std::size_t n,
              stream_handle stream) {
  return dispatch(where, "divide", n, all_set(dst, src),
                  [&] { return gpu::divide(dst, src, divisor, n, stream); },
                  [&] { cpu::divide(dst, src, divisor, n); });
}

status sum(backend where, const float* x, std::size_t n, double* out, stream_handle stream) {
  if (out == nullptr) {
    return status::failure("sum: got a null result pointer; expected the address of a host double");
  }
  if (n == 0) {
    *out = 0.0;
    return ok_status();
  }
  if (x == nullptr) return detail::null_pointer("sum", n);
  if (where == backend::cuda) return gpu::sum(x, n, out, stream);
  *out = cpu::sum(x, n);
  return ok_status();
}

}  // namespace apiary::cuda
