#include "core/ps/logistic_regression.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/rng.hpp"

namespace apiary::core::ps {
namespace {

/// Uniform in [-1, 1) from SplitMix64 (the same numbers on every platform): the top 24
/// bits of the next draw (exact in float).
float symmetric(SplitMix64& rng) {
  return static_cast<float>(rng.next() >> 40) / static_cast<float>(1 << 23) - 1.0F;
}

}  // namespace

Status check_logistic_data_size(std::size_t samples, std::size_t features) {
  if (features != 0 && samples > k_max_logistic_data_values / features) {
    return make_error(errc::invalid_argument,
                      "{} samples x {} features: more data than a replica holds (at most {} values, 4 GiB)",
                      samples, features, k_max_logistic_data_values);
  }
  return ok_status();
}

LogisticData make_logistic_data(std::size_t samples, std::size_t features, std::uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> truth(features);
  for (auto& w : truth) w = 2.0F * symmetric(rng);
  const float bias = 0.5F * symmetric(rng);
  LogisticData d;
  d.features = features;
  d.x.resize(samples * features);
  d.y.resize(samples);
  for (std::size_t i = 0; i < samples; ++i) {
    double z = bias;
    for (std::size_t j = 0; j < features; ++j) {
      d.x[i * features + j] = symmetric(rng);
      z += static_cast<double>(truth[j]) * d.x[i * features + j];
    }
    z += 0.1 * symmetric(rng);
    d.y[i] = z > 0 ? 1.0F : 0.0F;
  }
  return d;
}

strategy::GraphItem logistic_graph_item(std::size_t features) {
  strategy::GraphItem item;
  strategy::Variable w;
  w.name = k_logreg_weights;
  w.shape = {static_cast<std::int64_t>(features)};
  strategy::Variable b;
  b.name = k_logreg_bias;
  b.shape = {1};
  item.variables = {w, b};
  item.grad_target_pairs = {{"gradients/logreg/w_grad:0", k_logreg_weights},
                            {"gradients/logreg/b_grad:0", k_logreg_bias}};
  return item;
}

std::map<std::string, std::vector<float>> logistic_initial(std::size_t features) {
  return {{k_logreg_weights, std::vector<float>(features, 0.0F)}, {k_logreg_bias, std::vector<float>(1, 0.0F)}};
}

std::vector<std::size_t> logistic_batch(const LogisticData& data, std::size_t replicas, std::size_t replica,
                                        std::int64_t step, std::size_t batch) {
  std::vector<std::size_t> out(batch);
  const std::size_t n = data.samples();
  const std::size_t start = ((static_cast<std::size_t>(step) * replicas + replica) * batch) % n;
  for (std::size_t i = 0; i < batch; ++i) out[i] = (start + i) % n;
  return out;
}

double logistic_loss(const LogisticData& data, const std::vector<std::size_t>& indices,
                     const std::map<std::string, std::vector<float>>& params,
                     std::map<std::string, std::vector<float>>* gradients) {
  const auto& w = params.at(k_logreg_weights);
  const double b = params.at(k_logreg_bias).at(0);
  const std::size_t d = data.features;
  // First each sample's loss and error, then the gradient feature by feature, summed over
  // the samples in their order (the bits of a per-sample accumulation, without a
  // double-precision copy of w's gradient or any gradient work for a loss alone).
  std::vector<double> errors;
  errors.reserve(indices.size());
  double loss = 0.0;
  for (std::size_t i : indices) {
    const float* x = &data.x[i * d];
    double z = b;
    for (std::size_t j = 0; j < d; ++j) z += static_cast<double>(w[j]) * x[j];
    // Cross-entropy in a stable form: log(1 + e^z) - y z.
    loss += (z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z))) - data.y[i] * z;
    errors.push_back(1.0 / (1.0 + std::exp(-z)) - data.y[i]);
  }
  const double n = indices.empty() ? 1.0 : static_cast<double>(indices.size());
  if (gradients != nullptr) {
    std::vector<const float*> rows;
    rows.reserve(indices.size());
    for (std::size_t i : indices) rows.push_back(&data.x[i * d]);
    auto& gw = (*gradients)[k_logreg_weights];  // its storage is reused from call to call
    gw.resize(d);
    // A block of features at a time: sample by sample into a small accumulator (each
    // feature's sum in sample order), then out as float.
    constexpr std::size_t k_block = 512;
    double acc[k_block];
    for (std::size_t j0 = 0; j0 < d; j0 += k_block) {
      const std::size_t m = std::min(k_block, d - j0);
      std::fill(acc, acc + m, 0.0);
      for (std::size_t k = 0; k < rows.size(); ++k) {
        const double e = errors[k];
        const float* x = rows[k] + j0;
        for (std::size_t j = 0; j < m; ++j) acc[j] += e * x[j];
      }
      for (std::size_t j = 0; j < m; ++j) gw[j0 + j] = static_cast<float>(acc[j] / n);
    }
    double gb = 0.0;
    for (double e : errors) gb += e;
    (*gradients)[k_logreg_bias] = {static_cast<float>(gb / n)};
  }
  return loss / n;
}

double logistic_full_loss(const LogisticData& data, const std::map<std::string, std::vector<float>>& params) {
  std::vector<std::size_t> all(data.samples());
  std::iota(all.begin(), all.end(), std::size_t{0});
  return logistic_loss(data, all, params, nullptr);
}

}  // namespace apiary::core::ps
