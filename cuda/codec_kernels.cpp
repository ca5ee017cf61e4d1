// The backend-dispatching codec kernel entry points: argument checks, then the CPU twin
// or the CUDA kernel (codec_kernels.cu, or codec_stub.cpp in builds without CUDA).
#include "cuda/codec_kernels.hpp"

#include <string>

#include "cuda/dispatch.hpp"

namespace apiary::cuda {

using detail::all_set;
using detail::dispatch;
using detail::null_pointer;

status row_moments(backend where, float* means, float* stds, const float* x, std::size_t rows,
                   std::size_t len, float min_std, stream_handle stream) {
  return dispatch(where, "row_moments", rows * len, all_set(means, stds, x),
                  [&] { return gpu::row_moments(means, stds, x, rows, len, min_std, stream); },
                  [&] { cpu::row_moments(means, stds, x, rows, len, min_std); });
}

status standardize_to_f16(backend where, std::uint16_t* dst, const float* x, std::size_t rows,
                          std::size_t len, const float* means, const float* stds,
                          stream_handle stream) {
  return dispatch(where, "standardize_to_f16", rows * len, all_set(dst, x, means, stds),
                  [&] { return gpu::standardize_to_f16(dst, x, rows, len, means, stds, stream); },
                  [&] { cpu::standardize_to_f16(dst, x, rows, len, means, stds); });
}

status destandardize_from_f16(backend where, float* dst, const std::uint16_t* src,
                              std::size_t rows, std::size_t len, const float* means,
                              const float* stds, stream_handle stream) {
  return dispatch(where, "destandardize_from_f16", rows * len, all_set(dst, src, means, stds),
                  [&] {
                    return gpu::destandardize_from_f16(dst, src, rows, len, means, stds, stream);
                  },
                  [&] { cpu::destandardize_from_f16(dst, src, rows, len, means, stds); });
}

status sum_squared_deviation(backend where, const float* x, std::size_t n, double center,
                             double* out, stream_handle stream) {
  if (out == nullptr) {
    return status::failure(
        "sum_squared_deviation: got a null result pointer; expected the address of a host double");
  }
  *out = 0.0;
  if (n == 0) return ok_status();
  if (x == nullptr) return null_pointer("sum_squared_deviation", n);
  if (where == backend::cuda) return gpu::sum_squared_deviation(x, n, center, out, stream);
  *out = cpu::sum_squared_deviation(x, n, center);
  return ok_status();
}

status uniform_indices(backend where, std::uint8_t* idx, const float* x, std::size_t n,
                       float shift, float scale, stream_handle stream) {
  if (n == 0) return ok_status();
  if (!all_set(idx, x)) return null_pointer("uniform_indices", n);
  if (!(scale > 0.0f)) {
    return status::failure("uniform_indices: got scale " + std::to_string(scale) +
                           "; expected a positive step (6 std / 256); send a constant tensor "
                           "as the centre bucket instead");
  }
  if (where == backend::cuda) return gpu::uniform_indices(idx, x, n, shift, scale, stream);
  cpu::uniform_indices(idx, x, n, shift, scale);
  return ok_status();
}

status search_borders(backend where, std::uint8_t* idx, const float* x, std::size_t n,
                      float divisor, const borders255& borders, stream_handle stream) {
  return dispatch(where, "search_borders", n, all_set(idx, x),
                  [&] { return gpu::search_borders(idx, x, n, divisor, borders, stream); },
                  [&] { cpu::search_borders(idx, x, n, divisor, borders); });
}

status key_histogram(backend where, std::uint32_t* counts, const float* x, std::size_t n,
                     stream_handle stream) {
  return dispatch(where, "key_histogram", n, all_set(counts, x),
                  [&] { return gpu::key_histogram(counts, x, n, stream); },
                  [&] { cpu::key_histogram(counts, x, n); });
}

status bucket_sums(backend where, double* sums, std::uint64_t* counts, const float* x,
                   const std::uint8_t* idx, std::size_t n, stream_handle stream) {
  return dispatch(where, "bucket_sums", n, all_set(sums, counts, x, idx),
                  [&] { return gpu::bucket_sums(sums, counts, x, idx, n, stream); },
                  [&] { cpu::bucket_sums(sums, counts, x, idx, n); });
}

status codebook_lookup(backend where, float* out, const float* codebook, const std::uint8_t* idx,
                       std::size_t n, stream_handle stream) {
  return dispatch(where, "codebook_lookup", n, all_set(out, codebook, idx),
                  [&] { return gpu::codebook_lookup(out, codebook, idx, n, stream); },
                  [&] { cpu::codebook_lookup(out, codebook, idx, n); });
}

status block_absmax(backend where, float* absmax, const float* x, std::size_t n,
                    stream_handle stream) {
  return dispatch(where, "block_absmax", n, all_set(absmax, x),
                  [&] { return gpu::block_absmax(absmax, x, n, stream); },
                  [&] { cpu::block_absmax(absmax, x, n); });
}

status blockwise_quantize(backend where, std::uint8_t* q, const float* x, std::size_t n,
                          const float* absmax, const borders255& mids, std::uint8_t zero_index,
                          stream_handle stream) {
  return dispatch(where, "blockwise_quantize", n, all_set(q, x, absmax),
                  [&] {
                    return gpu::blockwise_quantize(q, x, n, absmax, mids, zero_index, stream);
                  },
                  [&] { cpu::blockwise_quantize(q, x, n, absmax, mids, zero_index); });
}

status blockwise_dequantize(backend where, float* out, const std::uint8_t* q, std::size_t n,
                            const float* absmax, const float* code, stream_handle stream) {
  return dispatch(where, "blockwise_dequantize", n, all_set(out, q, absmax, code),
                  [&] { return gpu::blockwise_dequantize(out, q, n, absmax, code, stream); },
                  [&] { cpu::blockwise_dequantize(out, q, n, absmax, code); });
}

}  // namespace apiary::cuda
