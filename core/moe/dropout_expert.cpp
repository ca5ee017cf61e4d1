#include "core/moe/dropout_expert.hpp"

#include <cmath>
#include <utility>

#include "core/moe/batch_rows.hpp"
#include "core/moe/expert_state.hpp"
#include "core/rng.hpp"

namespace apiary::core::moe {
namespace {

ExpertSchema dropout_schema(std::uint32_t h, pb::CompressionType in, pb::CompressionType out) {
  ExpertSchema s;
  s.args.push_back(TensorSchema{{h}, messages::dtype::float32, false, in, "cpu"});
  s.args.push_back(TensorSchema{{h}, messages::dtype::int64, false, pb::NONE, "cpu"});
  s.outputs.push_back(TensorSchema{{h}, messages::dtype::float32, true, out, "cpu"});
  s.single_output = true;
  return s;
}

}  // namespace

DetDropoutExpert::DetDropoutExpert(const FfnConfig& config, float drop_prob)
    : h_(config.hidden_dim),
      lr_(config.learning_rate),
      keep_(1.0f - drop_prob),
      schema_(dropout_schema(config.hidden_dim, config.input_compression, config.output_compression)),
      w_(std::size_t{config.hidden_dim} * config.hidden_dim),
      b_(config.hidden_dim) {
  Rng rng(config.seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(h_));
  for (float& v : w_) v = static_cast<float>(bound * (2.0 * rng.uniform01() - 1.0));
  for (float& v : b_) v = static_cast<float>(bound * (2.0 * rng.uniform01() - 1.0));
}

void DetDropoutExpert::linear(const float* x, std::size_t rows, float* z) const {
  const std::size_t h = h_;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < h; ++j) {
      float acc = b_[j];
      const float* w = w_.data() + j * h;
      for (std::size_t k = 0; k < h; ++k) acc += w[k] * x[r * h + k];
      z[r * h + j] = acc;
    }
  }
}

Result<std::vector<Tensor>> DetDropoutExpert::forward(const std::vector<Tensor>& inputs) {
  auto rows = check_batch(schema_.forward_inputs(), inputs, "det_dropout forward");
  if (!rows) return rows.error();
  const std::size_t n = *rows * h_;
  Buffer bytes = Buffer::allocate(n * sizeof(float));
  auto* y = reinterpret_cast<float*>(bytes.data());
  linear(inputs[0].data<float>(), *rows, y);
  const auto* mask = inputs[1].data<std::int64_t>();
  for (std::size_t i = 0; i < n; ++i) y[i] = mask[i] != 0 ? y[i] / keep_ : 0.0f;
  auto out = Tensor::make(messages::dtype::float32, {static_cast<std::uint32_t>(*rows), h_}, std::move(bytes));
  if (!out) return out.error();
  return std::vector<Tensor>{std::move(*out)};
}

Result<std::vector<Tensor>> DetDropoutExpert::backward(const std::vector<Tensor>& inputs,
                                                       const std::vector<Tensor>& grad_outputs) {
  auto rows = check_backward(schema_, inputs, grad_outputs, "det_dropout");
  if (!rows) return rows.error();
  const std::size_t h = h_;
  const std::size_t n = *rows;
  const float* x = inputs[0].data<float>();
  const auto* mask = inputs[1].data<std::int64_t>();
  const float* gy = grad_outputs[0].data<float>();
  std::vector<float> gz(n * h);
  for (std::size_t i = 0; i < n * h; ++i) gz[i] = mask[i] != 0 ? gy[i] / keep_ : 0.0f;
  Buffer gx_bytes = Buffer::allocate(n * h * sizeof(float));
  auto* gx = reinterpret_cast<float*>(gx_bytes.data());
  for (std::size_t i = 0; i < n * h; ++i) gx[i] = 0.0f;
  std::vector<float> gw(h * h, 0.0f);
  std::vector<float> gb(h, 0.0f);
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t j = 0; j < h; ++j) {
      const float g = gz[r * h + j];
      gb[j] += g;
      const float* w = w_.data() + j * h;
      float* gwj = gw.data() + j * h;
      for (std::size_t k = 0; k < h; ++k) {
        gwj[k] += g * x[r * h + k];
        gx[r * h + k] += g * w[k];
      }
    }
  }
  for (std::size_t i = 0; i < w_.size(); ++i) w_[i] -= lr_ * gw[i];
  for (std::size_t i = 0; i < b_.size(); ++i) b_[i] -= lr_ * gb[i];
  const std::uint32_t batch = static_cast<std::uint32_t>(n);
  auto gx_tensor = Tensor::make(messages::dtype::float32, {batch, h_}, std::move(gx_bytes));
  if (!gx_tensor) return gx_tensor.error();
  auto gmask = Tensor::zeros(messages::dtype::int64, {batch, h_});
  if (!gmask) return gmask.error();
  return std::vector<Tensor>{std::move(*gx_tensor), std::move(*gmask)};
}

Result<std::string> DetDropoutExpert::state() const { return pack_state("det_dropout", h_, {&w_, &b_}); }

Status DetDropoutExpert::load_state(std::string_view state) {
  return unpack_state(state, "det_dropout", h_, {&w_, &b_});
}

}  // namespace apiary::core::moe
