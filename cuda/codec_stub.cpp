// The gpu:: codec kernels of codec_kernels.hpp for builds without CUDA: each call fails
// and says how to get the CUDA backend (default_backend() never picks cuda here).
#include "cuda/codec_kernels.hpp"
#include "cuda/missing.hpp"

namespace apiary::cuda::gpu {

using detail::not_compiled;

status row_moments(float*, float*, const float*, std::size_t, std::size_t, float, stream_handle) {
  return not_compiled("gpu::row_moments");
}

status standardize_to_f16(std::uint16_t*, const float*, std::size_t, std::size_t, const float*,
                          const float*, stream_handle) {
  return not_compiled("gpu::standardize_to_f16");
}

status destandardize_from_f16(float*, const std::uint16_t*, std::size_t, std::size_t, const float*,
                              const float*, stream_handle) {
  return not_compiled("gpu::destandardize_from_f16");
}

status sum_squared_deviation(const float*, std::size_t, double, double* out, stream_handle) {
  if (out != nullptr) *out = 0.0;
  return not_compiled("gpu::sum_squared_deviation");
}

status uniform_indices(std::uint8_t*, const float*, std::size_t, float, float, stream_handle) {
  return not_compiled("gpu::uniform_indices");
}

status search_borders(std::uint8_t*, const float*, std::size_t, float, const borders255&,
                      stream_handle) {
  return not_compiled("gpu::search_borders");
}

status key_histogram(std::uint32_t*, const float*, std::size_t, stream_handle) {
  return not_compiled("gpu::key_histogram");
}

status bucket_sums(double*, std::uint64_t*, const float*, const std::uint8_t*, std::size_t,
                   stream_handle) {
  return not_compiled("gpu::bucket_sums");
}

status codebook_lookup(float*, const float*, const std::uint8_t*, std::size_t, stream_handle) {
  return not_compiled("gpu::codebook_lookup");
}

status block_absmax(float*, const float*, std::size_t, stream_handle) {
  return not_compiled("gpu::block_absmax");
}

status blockwise_quantize(std::uint8_t*, const float*, std::size_t, const float*,
                          const borders255&, std::uint8_t, stream_handle) {
  return not_compiled("gpu::blockwise_quantize");
}

status blockwise_dequantize(float*, const std::uint8_t*, std::size_t, const float*, const float*,
                            stream_handle) {
  return not_compiled("gpu::blockwise_dequantize");
}

}  // namespace apiary::cuda::gpu
