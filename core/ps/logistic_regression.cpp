#include "core/ps/logistic_regression.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
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

std::size_t logistic_nonzeros(std::size_t features, double density) {
  const auto k = static_cast<std::size_t>(std::llround(density * static_cast<double>(features)));
  return std::clamp<std::size_t>(k, 1, std::max<std::size_t>(features, 1));
}

Status check_logistic_data_size(std::size_t samples, std::size_t features, double density) {
  if (!(density > 0.0 && density <= 1.0)) {
    return make_error(errc::invalid_argument, "density {}: expected a fraction of the features in (0, 1]", density);
  }
  const bool sparse = density < 1.0;
  if (sparse && features > std::numeric_limits<std::uint32_t>::max()) {
    return make_error(errc::invalid_argument, "{} features: a sparse data set has at most {} (32-bit columns)",
                      features, std::numeric_limits<std::uint32_t>::max());
  }
  const std::size_t per_sample = sparse ? 2 * logistic_nonzeros(features, density) : features;
  if (per_sample != 0 && samples > k_max_logistic_data_values / per_sample) {
    return make_error(errc::invalid_argument,
                      "{} samples x {} features: more data than a replica holds (at most {} values, 4 GiB{})", samples,
                      features, k_max_logistic_data_values,
                      sparse ? fmt::format("; at density {} each of a sample's {} values other than zero counts twice",
                                           density, per_sample / 2)
                             : std::string());
  }
  return ok_status();
}

namespace {

/// `samples` points of k values other than zero each, at k distinct columns drawn by
/// Floyd's algorithm, ascending, then their values; the labels as dense data's.
void fill_sparse(LogisticData& d, std::size_t samples, std::size_t k, const std::vector<float>& truth, float bias,
                 SplitMix64& rng) {
  const std::size_t f = d.features;
  d.row_start.reserve(samples + 1);
  d.row_start.push_back(0);
  d.columns.reserve(samples * k);
  d.values.reserve(samples * k);
  d.y.resize(samples);
  std::vector<bool> taken(f, false);
  std::vector<std::uint32_t> row;
  row.reserve(k);
  for (std::size_t i = 0; i < samples; ++i) {
    row.clear();
    for (std::size_t j = f - k; j < f; ++j) {
      const auto t = static_cast<std::size_t>(rng.next() % (j + 1));
      const std::size_t pick = taken[t] ? j : t;
      taken[pick] = true;
      row.push_back(static_cast<std::uint32_t>(pick));
    }
    std::sort(row.begin(), row.end());
    double z = bias;
    for (std::uint32_t c : row) {
      taken[c] = false;
      const float v = symmetric(rng);
      d.columns.push_back(c);
      d.values.push_back(v);
      z += static_cast<double>(truth[c]) * v;
    }
    d.row_start.push_back(d.columns.size());
    z += 0.1 * symmetric(rng);
    d.y[i] = z > 0 ? 1.0F : 0.0F;
  }
}

}  // namespace

LogisticData make_logistic_data(std::size_t samples, std::size_t features, std::uint64_t seed, double density) {
  SplitMix64 rng(seed);
  std::vector<float> truth(features);
  for (auto& w : truth) w = 2.0F * symmetric(rng);
  const float bias = 0.5F * symmetric(rng);
  LogisticData d;
  d.features = features;
  if (density < 1.0) {
    fill_sparse(d, samples, logistic_nonzeros(features, density), truth, bias, rng);
    return d;
  }
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

namespace {

/// w's mean gradient over sparse samples: zero but at the columns of `indices`' samples,
/// each column's sum taken in sample order in double, as the dense path's. While the sums
/// are taken, a touched column's entry of `gw` (cleared first) holds the bits of its
/// accumulator's number + 1, then its mean: a column is found in one read, without a
/// sort or a map of the batch's columns.
void sparse_gradient(const LogisticData& data, const std::vector<std::size_t>& indices,
                     const std::vector<double>& errors, double n, std::vector<float>& gw) {
  gw.assign(data.features, 0.0F);
  std::vector<std::uint32_t> touched;  // columns in the order first seen
  std::vector<double> acc;
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const std::size_t i = indices[k];
    for (std::size_t p = data.row_start[i]; p < data.row_start[i + 1]; ++p) {
      const std::uint32_t column = data.columns[p];
      std::uint32_t slot = 0;
      std::memcpy(&slot, &gw[column], sizeof slot);
      if (slot == 0) {
        touched.push_back(column);
        acc.push_back(0.0);
        slot = static_cast<std::uint32_t>(touched.size());
        std::memcpy(&gw[column], &slot, sizeof slot);
      }
      acc[slot - 1] += errors[k] * data.values[p];
    }
  }
  for (std::size_t u = 0; u < touched.size(); ++u) gw[touched[u]] = static_cast<float>(acc[u] / n);
}

}  // namespace

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
    double z = b;
    if (data.sparse()) {
      for (std::size_t p = data.row_start[i]; p < data.row_start[i + 1]; ++p) {
        z += static_cast<double>(w[data.columns[p]]) * data.values[p];
      }
    } else {
      const float* x = &data.x[i * d];
      for (std::size_t j = 0; j < d; ++j) z += static_cast<double>(w[j]) * x[j];
    }
    // Cross-entropy in a stable form: log(1 + e^z) - y z.
    loss += (z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z))) - data.y[i] * z;
    errors.push_back(1.0 / (1.0 + std::exp(-z)) - data.y[i]);
  }
  const double n = indices.empty() ? 1.0 : static_cast<double>(indices.size());
  if (gradients != nullptr && data.sparse()) {
    sparse_gradient(data, indices, errors, n, (*gradients)[k_logreg_weights]);
  } else if (gradients != nullptr) {
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
  }
  if (gradients != nullptr) {
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
