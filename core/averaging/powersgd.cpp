#include "core/averaging/powersgd.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/rng.hpp"

namespace apiary::core::averaging {

Status validate(const PowerSgdConfig& config, const std::vector<std::int64_t>& tensor_sizes) {
  if (config.rank < 1) return make_error(errc::invalid_argument, "expected a PowerSGD rank >= 1, got 0");
  if (config.matrices.size() != tensor_sizes.size()) {
    return make_error(errc::invalid_argument, "expected one PowerSGD matrix shape per averaged tensor ({}), got {}",
                      tensor_sizes.size(), config.matrices.size());
  }
  for (std::size_t t = 0; t < tensor_sizes.size(); ++t) {
    const PowerSgdMatrix& m = config.matrices[t];
    if (m.rows == 0 && m.cols == 0) continue;
    if (m.rows <= 0 || m.cols <= 0 || m.rows * m.cols != tensor_sizes[t]) {
      return make_error(errc::invalid_argument,
                        "expected tensor {}'s PowerSGD matrix to hold its {} elements (rows x cols, both > 0; "
                        "0 x 0 to average it plainly), got {} x {}",
                        t, tensor_sizes[t], m.rows, m.cols);
    }
  }
  return ok_status();
}

std::vector<std::int64_t> flatten_greedy_dims(std::vector<std::int64_t> shape) {
  while (shape.size() > 2) {
    std::size_t best = 0;
    for (std::size_t i = 1; i + 1 < shape.size(); ++i) {
      if (shape[i] * shape[i + 1] < shape[best] * shape[best + 1]) best = i;
    }
    shape[best] *= shape[best + 1];
    shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  return shape;
}

PowerSgdMatrix powersgd_matrix(const std::vector<std::int64_t>& shape, std::size_t rank,
                               double min_compression_ratio) {
  if (shape.size() < 2) return {};
  const auto dims = flatten_greedy_dims(shape);
  const double rows = static_cast<double>(dims[0]);
  const double cols = static_cast<double>(dims[1]);
  if (rows <= 0 || cols <= 0) return {};
  const double saved = 1.0 - static_cast<double>(rank) * (rows + cols) / (rows * cols);
  if (saved < min_compression_ratio) return {};
  return PowerSgdMatrix{dims[0], dims[1]};
}

std::vector<float> powersgd_initial_q(std::uint64_t seed, std::size_t index, std::int64_t cols, std::size_t rank) {
  std::uint64_t mix = seed ^ (0x9e3779b97f4a7c15ULL * (index + 1));
  Rng rng(splitmix64_next(mix));
  std::vector<float> q(static_cast<std::size_t>(cols) * rank);
  for (float& v : q) v = static_cast<float>(rng.uniform01());
  return q;
}

void powersgd_project(const float* m, const float* q, std::int64_t rows, std::int64_t cols, std::size_t rank,
                      float* out) {
  for (std::int64_t i = 0; i < rows; ++i) {
    float* o = out + i * static_cast<std::int64_t>(rank);
    std::fill(o, o + rank, 0.0F);
    const float* row = m + i * cols;
    for (std::int64_t j = 0; j < cols; ++j) {
      const float x = row[j];
      const float* qj = q + j * static_cast<std::int64_t>(rank);
      for (std::size_t k = 0; k < rank; ++k) o[k] += x * qj[k];
    }
  }
}

void powersgd_back_project(const float* m, const float* p, std::int64_t rows, std::int64_t cols, std::size_t rank,
                           float* out) {
  std::fill(out, out + cols * static_cast<std::int64_t>(rank), 0.0F);
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* row = m + i * cols;
    const float* pi = p + i * static_cast<std::int64_t>(rank);
    for (std::int64_t j = 0; j < cols; ++j) {
      const float x = row[j];
      float* o = out + j * static_cast<std::int64_t>(rank);
      for (std::size_t k = 0; k < rank; ++k) o[k] += x * pi[k];
    }
  }
}

void powersgd_reconstruct(const float* p, const float* q, std::int64_t rows, std::int64_t cols, std::size_t rank,
                          float* out) {
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* pi = p + i * static_cast<std::int64_t>(rank);
    float* o = out + i * cols;
    for (std::int64_t j = 0; j < cols; ++j) {
      const float* qj = q + j * static_cast<std::int64_t>(rank);
      float sum = 0.0F;
      for (std::size_t k = 0; k < rank; ++k) sum += pi[k] * qj[k];
      o[j] = sum;
    }
  }
}

void powersgd_orthogonalize(float* p, std::int64_t rows, std::size_t rank, float eps) {
  const auto r = static_cast<std::int64_t>(rank);
  for (std::int64_t c = 0; c < r; ++c) {
    double norm2 = 0;
    for (std::int64_t i = 0; i < rows; ++i) norm2 += static_cast<double>(p[i * r + c]) * p[i * r + c];
    const float scale = 1.0F / std::max(static_cast<float>(std::sqrt(norm2)), eps);
    for (std::int64_t i = 0; i < rows; ++i) p[i * r + c] *= scale;
    for (std::int64_t d = c + 1; d < r; ++d) {
      double dot = 0;
      for (std::int64_t i = 0; i < rows; ++i) dot += static_cast<double>(p[i * r + c]) * p[i * r + d];
      const auto f = static_cast<float>(dot);
      for (std::int64_t i = 0; i < rows; ++i) p[i * r + d] -= f * p[i * r + c];
    }
  }
}

PowerSgdState::PowerSgdState(PowerSgdConfig cfg) : config(std::move(cfg)) {
  errors.resize(config.matrices.size());
  qs.resize(config.matrices.size());
  for (std::size_t t = 0; t < config.matrices.size(); ++t) {
    const PowerSgdMatrix& m = config.matrices[t];
    if (!m.compressed()) continue;
    errors[t].assign(static_cast<std::size_t>(m.rows * m.cols), 0.0F);
    qs[t] = powersgd_initial_q(config.seed, t, m.cols, config.rank);
  }
}

}  // namespace apiary::core::averaging
