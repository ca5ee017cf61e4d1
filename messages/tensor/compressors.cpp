#include "messages/tensor/compressors.hpp"

#include <algorithm>
#include <cmath>

#include "messages/tensor/codec_kernels.hpp"
#include "messages/tensor/float16.hpp"

namespace apiary::messages {
namespace {

/// A float16 tensor of `tensor`'s shape holding fp16(values[i]).
Result<Tensor> half_tensor(const Tensor& tensor, const float* values) {
  const std::size_t n = tensor.numel();
  Buffer bytes = Buffer::allocate(n * sizeof(std::uint16_t));
  compress_f16(reinterpret_cast<std::uint16_t*>(bytes.data()), values, n);
  return Tensor::make(dtype::float16, tensor.shape(), std::move(bytes), tensor.requires_grad());
}

/// A float32 tensor of `wire`'s shape holding the exact values of its float16 elements.
Result<Tensor> float_tensor(const Tensor& wire) {
  const std::size_t n = wire.numel();
  Buffer bytes = Buffer::allocate(n * sizeof(float));
  auto* out = reinterpret_cast<float*>(bytes.data());
  kernels::halves_to_floats(out, wire.data<std::uint16_t>(), n);
  return Tensor::make(dtype::float32, wire.shape(), std::move(bytes), wire.requires_grad());
}

}  // namespace

void compress_f16(std::uint16_t* dst, const float* src, std::size_t n) {
  // Clamped to +-half_max (infinities too; NaN passes), rounded to nearest even.
  kernels::floats_to_halves_clamped(dst, src, n);
}

Result<Tensor> NoneCompressor::compress(const std::string& /*key*/, const Tensor& tensor) {
  return tensor;
}

Result<Tensor> NoneCompressor::decompress(const Tensor& wire) { return wire; }

Result<Tensor> HorovodCompressor::compress(const std::string& /*key*/, const Tensor& tensor) {
  if (tensor.type() != dtype::float32) return tensor;
  return half_tensor(tensor, tensor.data<float>());
}

Result<Tensor> HorovodCompressor::decompress(const Tensor& wire) {
  if (wire.type() != dtype::float16) return wire;
  return float_tensor(wire);
}

Result<Tensor> HorovodCompressorEF::compress(const std::string& key, const Tensor& tensor) {
  if (tensor.type() != dtype::float32) {
    return make_error(errc::unsupported,
                      "HorovodCompressorEF of '{}': expected a float32 tensor, got {}; cast it "
                      "to float32 or use HorovodCompressor",
                      key, to_string(tensor.type()));
  }
  const std::size_t n = tensor.numel();
  auto [it, fresh] = residuals_.try_emplace(key);
  Residual& r = it->second;
  if (fresh) {
    r.shape = tensor.shape();
    r.values.assign(n, 0.0f);
  } else if (r.shape != tensor.shape()) {
    return make_error(errc::invalid_argument,
                      "HorovodCompressorEF of '{}': expected shape {} as at the previous step, "
                      "got {}; call reset(\"{}\") when the tensor changes shape",
                      key, format_shape(r.shape), format_shape(tensor.shape()), key);
  }
  // Add what rounding lost before, then round to float16 and keep what is lost now.
  const float* x = tensor.data<float>();
  std::vector<float> corrected(n);
  for (std::size_t i = 0; i < n; ++i) corrected[i] = x[i] + r.values[i];
  auto wire = half_tensor(tensor, corrected.data());
  if (!wire) return wire;
  const auto* sent = wire->data<std::uint16_t>();
  for (std::size_t i = 0; i < n; ++i) r.values[i] = corrected[i] - half_to_float(sent[i]);
  return wire;
}

Status HorovodCompressorEF::round_in_place(const std::string& key, float* x, std::size_t n) {
  auto [it, fresh] = residuals_.try_emplace(key);
  Residual& r = it->second;
  if (fresh) {
    r.shape = {static_cast<std::uint32_t>(n)};
    r.values.assign(n, 0.0f);
  } else if (r.values.size() != n) {
    return make_error(errc::invalid_argument,
                      "HorovodCompressorEF of '{}': expected {} values as at the previous step, got {}; call "
                      "reset(\"{}\") when the tensor changes size",
                      key, r.values.size(), n, key);
  }
  constexpr std::size_t k_block = 2048;
  float corrected[k_block];
  std::uint16_t halves[k_block];
  for (std::size_t at = 0; at < n; at += k_block) {
    const std::size_t m = std::min(k_block, n - at);
    float* xs = x + at;
    float* rs = r.values.data() + at;
    for (std::size_t i = 0; i < m; ++i) corrected[i] = xs[i] + rs[i];
    compress_f16(halves, corrected, m);
    kernels::halves_to_floats(xs, halves, m);
    for (std::size_t i = 0; i < m; ++i) rs[i] = corrected[i] - xs[i];
  }
  return ok_status();
}

Result<Tensor> HorovodCompressorEF::decompress(const Tensor& wire) {
  if (wire.type() != dtype::float16) {
    return make_error(errc::unsupported,
                      "HorovodCompressorEF: expected a float16 wire tensor to decompress, got {}; "
                      "pass the tensor compress() returned",
                      to_string(wire.type()));
  }
  return float_tensor(wire);
}

const std::vector<float>& HorovodCompressorEF::residual(const std::string& key) const {
  static const std::vector<float> none;
  auto it = residuals_.find(key);
  return it == residuals_.end() ? none : it->second.values;
}

}  // namespace apiary::messages
