#include "core/moe/expert_backend.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/moe/dropout_expert.hpp"
#include "core/moe/expert_state.hpp"
#include "core/moe/transformer_expert.hpp"
#include "core/rng.hpp"

namespace apiary::core::moe {
namespace {

/// The schema of an expert that maps [batch, h] float32 to [batch, h] float32.
ExpertSchema square_schema(std::uint32_t h, pb::CompressionType in, pb::CompressionType out, bool out_grad) {
  ExpertSchema s;
  s.args.push_back(TensorSchema{{h}, messages::dtype::float32, false, in, "cpu"});
  s.outputs.push_back(TensorSchema{{h}, messages::dtype::float32, out_grad, out, "cpu"});
  s.single_output = true;
  return s;
}

/// `n` floats drawn uniformly from [-bound, bound).
std::vector<float> uniform(Rng& rng, std::size_t n, double bound) {
  std::vector<float> out(n);
  for (float& v : out) v = static_cast<float>(bound * (2.0 * rng.uniform01() - 1.0));
  return out;
}

/// A [rows, h] float32 tensor over fresh storage; `fill` writes its elements.
template <class Fill>
Result<Tensor> make_rows(std::size_t rows, std::uint32_t h, Fill fill) {
  Buffer bytes = Buffer::allocate(rows * h * sizeof(float));
  fill(reinterpret_cast<float*>(bytes.data()));
  return Tensor::make(messages::dtype::float32, {static_cast<std::uint32_t>(rows), h}, std::move(bytes));
}

}  // namespace

FfnExpert::FfnExpert(const FfnConfig& config)
    : h_(config.hidden_dim),
      lr_(config.learning_rate),
      schema_(square_schema(config.hidden_dim, config.input_compression, config.output_compression, true)) {
  Rng rng(config.seed);
  const std::size_t h = h_;
  const double bound1 = 1.0 / std::sqrt(static_cast<double>(h));      // fan_in of Linear(h, 4h)
  const double bound2 = 1.0 / std::sqrt(static_cast<double>(4 * h));  // fan_in of Linear(4h, h)
  params_.w1 = uniform(rng, 4 * h * h, bound1);
  params_.b1 = uniform(rng, 4 * h, bound1);
  params_.w2 = uniform(rng, h * 4 * h, bound2);
  params_.b2 = uniform(rng, h, bound2);
}

Status FfnExpert::set_params(FfnParams params) {
  const std::size_t h = h_;
  if (params.w1.size() != 4 * h * h || params.b1.size() != 4 * h || params.w2.size() != 4 * h * h ||
      params.b2.size() != h) {
    return make_error(errc::invalid_argument,
                      "ffn parameters of hidden_dim {} are w1 [{}], b1 [{}], w2 [{}], b2 [{}]; got [{}], [{}], [{}], "
                      "[{}]",
                      h, 4 * h * h, 4 * h, 4 * h * h, h, params.w1.size(), params.b1.size(), params.w2.size(),
                      params.b2.size());
  }
  params_ = std::move(params);
  return ok_status();
}

void FfnExpert::run(const float* x, std::size_t rows, std::vector<float>& z1, float* y) const {
  // Rows that share one pass over the weights: each weight comes from memory once per
  // k_rows rows instead of once per row (W1 and W2 are 16 MiB each at h = 1024), and the
  // k_rows sums run side by side. Every row still sums in the same order, so the bits
  // are those of one row at a time.
  constexpr std::size_t k_rows = 4;
  const std::size_t h = h_;
  const std::size_t f = 4 * h;
  z1.assign(rows * f, 0.0f);
  std::vector<float> relu(k_rows * f);
  for (std::size_t r0 = 0; r0 < rows; r0 += k_rows) {
    const std::size_t n = std::min(k_rows, rows - r0);
    // A last pass of fewer rows repeats its first row in the unused slots (not stored).
    const float* xr[k_rows];
    for (std::size_t q = 0; q < k_rows; ++q) xr[q] = x + (r0 + (q < n ? q : 0)) * h;
    // First layer: z1 = W1 x + b1 (kept for backward), and its ReLU.
    for (std::size_t j = 0; j < f; ++j) {
      const float* w = params_.w1.data() + j * h;
      float acc[k_rows];
      for (float& a : acc) a = params_.b1[j];
      for (std::size_t k = 0; k < h; ++k)
        for (std::size_t q = 0; q < k_rows; ++q) acc[q] += w[k] * xr[q][k];
      for (std::size_t q = 0; q < k_rows; ++q) relu[q * f + j] = acc[q] > 0.0f ? acc[q] : 0.0f;
      for (std::size_t q = 0; q < n; ++q) z1[(r0 + q) * f + j] = acc[q];
    }
    // Second layer on the ReLU of the first: y = W2 relu(z1) + b2.
    for (std::size_t i = 0; i < h; ++i) {
      const float* w = params_.w2.data() + i * f;
      float acc[k_rows];
      for (float& a : acc) a = params_.b2[i];
      for (std::size_t j = 0; j < f; ++j)
        for (std::size_t q = 0; q < k_rows; ++q) acc[q] += w[j] * relu[q * f + j];
      for (std::size_t q = 0; q < n; ++q) y[(r0 + q) * h + i] = acc[q];
    }
  }
}

Result<std::vector<Tensor>> FfnExpert::forward(const std::vector<Tensor>& inputs) {
  auto rows = check_batch(schema_.forward_inputs(), inputs, "ffn forward");
  if (!rows) return rows.error();
  std::vector<float> z1;
  auto y = make_rows(*rows, h_, [&](float* out) { run(inputs[0].data<float>(), *rows, z1, out); });
  if (!y) return y.error();
  return std::vector<Tensor>{std::move(*y)};
}

Result<std::vector<Tensor>> FfnExpert::backward(const std::vector<Tensor>& inputs,
                                                const std::vector<Tensor>& grad_outputs) {
  auto rows = check_backward(schema_, inputs, grad_outputs, "ffn");
  if (!rows) return rows.error();
  const std::size_t n = *rows;
  const std::size_t h = h_;
  const std::size_t f = 4 * h;
  const float* x = inputs[0].data<float>();
  const float* gy = grad_outputs[0].data<float>();
  // Forward again, keeping the first layer's pre-activations.
  std::vector<float> z1;
  std::vector<float> y(n * h);
  run(x, n, z1, y.data());
  FfnParams grad{std::vector<float>(f * h, 0.0f), std::vector<float>(f, 0.0f), std::vector<float>(h * f, 0.0f),
                 std::vector<float>(h, 0.0f)};
  std::vector<float> gz1(n * f, 0.0f);
  for (std::size_t r = 0; r < n; ++r) {
    const float* gyr = gy + r * h;
    const float* zr = z1.data() + r * f;
    float* gzr = gz1.data() + r * f;
    // Second layer: dW2 += gy relu(z1)^T, db2 += gy, d relu(z1) = W2^T gy.
    for (std::size_t i = 0; i < h; ++i) {
      grad.b2[i] += gyr[i];
      const float* w = params_.w2.data() + i * f;
      float* gw = grad.w2.data() + i * f;
      for (std::size_t j = 0; j < f; ++j) {
        gw[j] += gyr[i] * (zr[j] > 0.0f ? zr[j] : 0.0f);
        gzr[j] += w[j] * gyr[i];
      }
    }
    // Through the ReLU: no gradient where z1 <= 0. First layer: dW1 += dz1 x^T, db1 += dz1.
    const float* xr = x + r * h;
    for (std::size_t j = 0; j < f; ++j) {
      if (zr[j] <= 0.0f) gzr[j] = 0.0f;
      grad.b1[j] += gzr[j];
      float* gw = grad.w1.data() + j * h;
      for (std::size_t k = 0; k < h; ++k) gw[k] += gzr[j] * xr[k];
    }
  }
  // Gradient of the inputs, dx = W1^T dz1, with the parameters before the step.
  auto gx = make_rows(n, h_, [&](float* out) {
    for (std::size_t r = 0; r < n; ++r) {
      float* gxr = out + r * h;
      for (std::size_t k = 0; k < h; ++k) gxr[k] = 0.0f;
      for (std::size_t j = 0; j < f; ++j) {
        const float g = gz1[r * f + j];
        const float* w = params_.w1.data() + j * h;
        for (std::size_t k = 0; k < h; ++k) gxr[k] += g * w[k];
      }
    }
  });
  if (!gx) return gx.error();
  // The optimizer step: plain SGD, p -= lr * dp.
  auto step = [this](std::vector<float>& p, const std::vector<float>& g) {
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= lr_ * g[i];
  };
  step(params_.w1, grad.w1);
  step(params_.b1, grad.b1);
  step(params_.w2, grad.w2);
  step(params_.b2, grad.b2);
  return std::vector<Tensor>{std::move(*gx)};
}

Result<std::string> FfnExpert::state() const {
  return pack_state("ffn", h_, {&params_.w1, &params_.b1, &params_.w2, &params_.b2});
}

Status FfnExpert::load_state(std::string_view state) {
  return unpack_state(state, "ffn", h_, {&params_.w1, &params_.b1, &params_.w2, &params_.b2});
}

NopExpert::NopExpert(std::uint32_t hidden_dim, pb::CompressionType compression)
    : schema_(square_schema(hidden_dim, compression, compression, false)) {}

Result<std::vector<Tensor>> NopExpert::forward(const std::vector<Tensor>& inputs) {
  auto rows = check_batch(schema_.forward_inputs(), inputs, "nop forward");
  if (!rows) return rows.error();
  return inputs;
}

Result<std::vector<Tensor>> NopExpert::backward(const std::vector<Tensor>& inputs,
                                                const std::vector<Tensor>& grad_outputs) {
  auto rows = check_backward(schema_, inputs, grad_outputs, "nop");
  if (!rows) return rows.error();
  return grad_outputs;
}

Result<std::unique_ptr<ExpertBackend>> make_expert(const std::string& expert_cls, const FfnConfig& config) {
  if (expert_cls == "ffn") return std::unique_ptr<ExpertBackend>(std::make_unique<FfnExpert>(config));
  if (expert_cls == "nop") {
    return std::unique_ptr<ExpertBackend>(std::make_unique<NopExpert>(config.hidden_dim, config.input_compression));
  }
  if (expert_cls == "det_dropout") {
    return std::unique_ptr<ExpertBackend>(std::make_unique<DetDropoutExpert>(config));
  }
  if (expert_cls == "transformer") {
    return std::unique_ptr<ExpertBackend>(std::make_unique<TransformerExpert>(config));
  }
  return make_error(errc::not_found,
                    "no built-in expert class '{}'; the C++ backend has 'ffn', 'transformer', 'nop' and 'det_dropout'",
                    expert_cls);
}

}  // namespace apiary::core::moe
