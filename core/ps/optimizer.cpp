#include "core/ps/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "core/ps/row_slots.hpp"

namespace apiary::core::ps {

const char* to_string(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::sgd: return "sgd";
    case OptimizerKind::momentum: return "momentum";
    case OptimizerKind::adam: return "adam";
  }
  return "unknown";
}

Status validate(const OptimizerConfig& c) {
  if (!(c.learning_rate > 0.0F) || !std::isfinite(c.learning_rate)) {
    return make_error(errc::invalid_argument,
                      "optimizer learning_rate: expected a finite value > 0, got {}; pass a positive rate",
                      c.learning_rate);
  }
  const auto in_unit = [](float x) { return x >= 0.0F && x < 1.0F; };
  if (c.kind == OptimizerKind::momentum && !in_unit(c.momentum)) {
    return make_error(errc::invalid_argument, "optimizer momentum: expected a value in [0, 1), got {}", c.momentum);
  }
  if (c.kind == OptimizerKind::adam && (!in_unit(c.beta1) || !in_unit(c.beta2) || !(c.epsilon >= 0.0F))) {
    return make_error(errc::invalid_argument,
                      "adam: expected beta1, beta2 in [0, 1) and epsilon >= 0, got beta1={} beta2={} epsilon={}",
                      c.beta1, c.beta2, c.epsilon);
  }
  return ok_status();
}

Result<SparseGradient> merge_rows(const SparseGradient& g, std::size_t row_width, std::int64_t num_rows) {
  if (row_width == 0 || g.values.size() != g.rows.size() * row_width) {
    return make_error(errc::invalid_argument,
                      "sparse gradient: expected {} rows x {} values = {} values, got {}; send one row of "
                      "values per index",
                      g.rows.size(), row_width, g.rows.size() * row_width, g.values.size());
  }
  RowSlots slots(num_rows, g.rows.size());
  std::vector<std::size_t> slot_of(g.rows.size());
  for (std::size_t i = 0; i < g.rows.size(); ++i) {
    const std::int64_t row = g.rows[i];
    if (row < 0 || row >= num_rows) {
      return make_error(errc::invalid_argument, "sparse gradient: expected rows in [0, {}), got row {}", num_rows,
                        row);
    }
    slot_of[i] = slots.slot(row);
  }
  // Summed by slot, each row's values in the order given; then laid out by row.
  std::vector<float> sums(slots.rows().size() * row_width, 0.0F);
  for (std::size_t i = 0; i < g.rows.size(); ++i) {
    float* dst = sums.data() + slot_of[i] * row_width;
    const float* src = g.values.data() + i * row_width;
    for (std::size_t j = 0; j < row_width; ++j) dst[j] += src[j];
  }
  SparseGradient out;
  out.rows.reserve(slots.rows().size());
  out.values.reserve(sums.size());
  for (std::size_t s : slots.by_row()) {
    out.rows.push_back(slots.rows()[s]);
    out.values.insert(out.values.end(), sums.begin() + static_cast<std::ptrdiff_t>(s * row_width),
                      sums.begin() + static_cast<std::ptrdiff_t>((s + 1) * row_width));
  }
  return out;
}

Optimizer::Optimizer(OptimizerConfig config, std::size_t size, std::size_t row_width)
    : config_(config), size_(size), row_width_(std::max<std::size_t>(row_width, 1)) {
  if (config_.kind != OptimizerKind::sgd) m_.assign(size_, 0.0F);
  if (config_.kind == OptimizerKind::adam) v_.assign(size_, 0.0F);
}

void Optimizer::update_range(float* params, const float* grad, std::size_t begin, std::size_t n, float lr_t,
                             float scale) {
  // Each loop runs over plain pointers, so that the compiler vectorises it (-O3).
  const float lr = config_.learning_rate;
  float* p = params + begin;
  switch (config_.kind) {
    case OptimizerKind::sgd:
      for (std::size_t i = 0; i < n; ++i) p[i] -= lr * (grad[i] * scale);
      return;
    case OptimizerKind::momentum: {
      // accum = momentum * accum + g; var -= lr * accum (Nesterov: lr * (g + momentum * accum)).
      float* acc = m_.data() + begin;
      const float mu = config_.momentum;
      if (config_.nesterov) {
        for (std::size_t i = 0; i < n; ++i) {
          const float g = grad[i] * scale;
          acc[i] = mu * acc[i] + g;
          p[i] -= lr * (g + mu * acc[i]);
        }
      } else {
        for (std::size_t i = 0; i < n; ++i) {
          acc[i] = mu * acc[i] + grad[i] * scale;
          p[i] -= lr * acc[i];
        }
      }
      return;
    }
    case OptimizerKind::adam: {
      // m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; var -= lr_t m / (sqrt(v) + eps).
      float* m = m_.data() + begin;
      float* v = v_.data() + begin;
      const float b1 = config_.beta1, b2 = config_.beta2, eps = config_.epsilon;
      for (std::size_t i = 0; i < n; ++i) {
        const float g = grad[i] * scale;
        m[i] = b1 * m[i] + (1.0F - b1) * g;
        v[i] = b2 * v[i] + (1.0F - b2) * g * g;
        p[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
      }
      return;
    }
  }
}

namespace {
/// Adam's bias-corrected step size at update t (1-based): lr * sqrt(1-b2^t) / (1-b1^t).
float adam_rate(const OptimizerConfig& c, std::int64_t t) {
  const double b1t = std::pow(static_cast<double>(c.beta1), static_cast<double>(t));
  const double b2t = std::pow(static_cast<double>(c.beta2), static_cast<double>(t));
  return static_cast<float>(static_cast<double>(c.learning_rate) * std::sqrt(1.0 - b2t) / (1.0 - b1t));
}
}  // namespace

Status Optimizer::set_learning_rate(float learning_rate) {
  if (!(learning_rate > 0.0F) || !std::isfinite(learning_rate)) {
    return make_error(errc::invalid_argument, "optimizer learning_rate: expected a finite value > 0, got {}",
                      learning_rate);
  }
  config_.learning_rate = learning_rate;
  return ok_status();
}

Status Optimizer::apply_dense(std::vector<float>& params, const std::vector<float>& grad) {
  return apply_dense_scaled(params, grad, 1.0f);  // g * 1 is g, bit for bit
}

Status Optimizer::apply_dense_scaled(std::vector<float>& params, const std::vector<float>& grad, float scale) {
  if (params.size() != size_ || grad.size() != size_) {
    return make_error(errc::invalid_argument,
                      "dense update: expected {} parameters and {} gradient values, got {} and {}; push a "
                      "gradient of the shard's shape",
                      size_, size_, params.size(), grad.size());
  }
  ++updates_;
  update_range(params.data(), grad.data(), 0, size_, adam_rate(config_, updates_), scale);
  return ok_status();
}

Status Optimizer::restore(State state) {
  if (state.updates < 0 || state.m.size() != m_.size() || state.v.size() != v_.size()) {
    return make_error(errc::invalid_argument,
                      "optimizer state: expected {} momentum/m and {} v values and updates >= 0, got {}, {} and {}",
                      m_.size(), v_.size(), state.m.size(), state.v.size(), state.updates);
  }
  updates_ = state.updates;
  m_ = std::move(state.m);
  v_ = std::move(state.v);
  return ok_status();
}

Status Optimizer::apply_dense_blocks(std::vector<float>& params, float scale, std::size_t block_size,
                                     const GradientBlocks& block) {
  if (params.size() != size_ || block_size == 0) {
    return make_error(errc::invalid_argument, "dense update: expected {} parameters and blocks of >= 1 value, got {} and {}",
                      size_, params.size(), block_size);
  }
  ++updates_;
  const float lr_t = adam_rate(config_, updates_);
  for (std::size_t at = 0; at < size_; at += block_size) {
    const std::size_t n = std::min(block_size, size_ - at);
    update_range(params.data(), block(at, n), at, n, lr_t, scale);
  }
  return ok_status();
}

Status Optimizer::apply_sparse(std::vector<float>& params, const SparseGradient& g) {
  if (params.size() != size_) {
    return make_error(errc::invalid_argument, "sparse update: expected {} parameters, got {}", size_, params.size());
  }
  auto merged = merge_rows(g, row_width_, static_cast<std::int64_t>(size_ / row_width_));
  if (!merged) return merged.error();
  ++updates_;
  const float lr_t = adam_rate(config_, updates_);
  for (std::size_t i = 0; i < merged->rows.size(); ++i) {
    const auto begin = static_cast<std::size_t>(merged->rows[i]) * row_width_;
    update_range(params.data(), merged->values.data() + i * row_width_, begin, row_width_, lr_t);
  }
  return ok_status();
}

}  // namespace apiary::core::ps
