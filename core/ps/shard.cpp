#include "core/ps/shard.hpp"

#include <algorithm>
#include <utility>

namespace apiary::core::ps {

Result<Shard> Shard::create(ShardConfig config, std::vector<float> initial) {
  const std::string& name = config.variable;
  if (initial.size() != config.layout.size()) {
    return make_error(errc::invalid_argument, "shard {}: expected {} initial values for its shape, got {}", name,
                      config.layout.size(), initial.size());
  }
  if (config.replica_hosts.empty()) {
    return make_error(errc::invalid_argument, "shard {}: expected at least one replica in replica_hosts, got none",
                      name);
  }
  if (config.staleness < 0 || (config.staleness > 0 && !config.sync)) {
    return make_error(errc::invalid_argument,
                      "shard {}: expected staleness >= 0, and 0 when sync is false, got staleness {} with sync={}",
                      name, config.staleness, config.sync);
  }
  if (config.sparse && config.layout.shape.empty()) {
    return make_error(errc::invalid_argument, "shard {}: a sparse variable needs rank >= 1, got a scalar", name);
  }
  if (auto s = validate(config.optimizer); !s) return s.error();
  // host_mean weight of replica r: 1 / (hosts * replicas on r's host).
  std::map<std::int32_t, std::size_t> per_host;
  for (auto h : config.replica_hosts) ++per_host[h];
  std::vector<double> host_weight;
  for (auto h : config.replica_hosts) {
    host_weight.push_back(1.0 / (static_cast<double>(per_host.size()) * static_cast<double>(per_host[h])));
  }
  return Shard(std::move(config), std::move(initial), std::move(host_weight));
}

Shard::Shard(ShardConfig config, std::vector<float> initial, std::vector<double> host_weight)
    : config_(std::move(config)),
      values_(std::move(initial)),
      optimizer_(config_.optimizer, values_.size(), config_.layout.row_width()),
      host_weight_(std::move(host_weight)),
      clock_(config_.replica_hosts.size(), 0),
      next_(config_.replica_hosts.size(), 0) {}

std::int64_t Shard::slowest() const { return *std::min_element(clock_.begin(), clock_.end()); }

bool Shard::admitted(std::int64_t step) const { return !config_.sync || step <= slowest() + config_.staleness; }

Status Shard::check(const Push& p) const {
  const std::string& name = config_.variable;
  if (p.replica < 0 || static_cast<std::size_t>(p.replica) >= clock_.size()) {
    return make_error(errc::invalid_argument, "shard {}: expected a replica id in [0, {}), got {}", name,
                      clock_.size(), p.replica);
  }
  if (p.step != next_[static_cast<std::size_t>(p.replica)]) {
    return make_error(errc::protocol, "shard {}: expected replica {} to push step {} next, got step {}", name,
                      p.replica, next_[static_cast<std::size_t>(p.replica)], p.step);
  }
  if (!(p.samples > 0.0)) {
    return make_error(errc::invalid_argument, "shard {}: expected samples > 0 in a push, got {}", name, p.samples);
  }
  const bool is_sparse = std::holds_alternative<SparseGradient>(p.gradient);
  if (is_sparse != config_.sparse) {
    return make_error(errc::invalid_argument, "shard {}: expected a {} gradient, got a {} one", name,
                      config_.sparse ? "sparse" : "dense", is_sparse ? "sparse" : "dense");
  }
  if (!is_sparse) {
    const auto& g = std::get<std::vector<float>>(p.gradient);
    if (g.size() != values_.size()) {
      return make_error(errc::invalid_argument, "shard {}: expected a gradient of {} values, got {}", name,
                        values_.size(), g.size());
    }
    return ok_status();
  }
  auto merged = merge_rows(std::get<SparseGradient>(p.gradient), config_.layout.row_width(),
                           config_.layout.shape.front());
  if (!merged) return make_error(merged.error().code, "shard {}: {}", name, merged.error().message);
  return ok_status();
}

Status Shard::accept(Push p, Released& out) {
  const auto r = static_cast<std::size_t>(p.replica);
  ++clock_[r];
  out.acks.push_back(PushAck{p.replica, p.step});
  if (!config_.sync) {
    // Asynchronous: this gradient alone is one update.
    ++version_;
    if (config_.sparse) return optimizer_.apply_sparse(values_, std::get<SparseGradient>(p.gradient));
    return optimizer_.apply_dense(values_, std::get<std::vector<float>>(p.gradient));
  }
  // Synchronous: add w_r * g_r to the step's sum.
  const bool by_host = config_.aggregation == Aggregation::host_mean;
  const double w = by_host ? host_weight_[r] : p.samples;
  StepSum& sum = sums_[p.step];
  sum.divisor += w;  // host_mean weights sum to 1 over a full step
  if (config_.sparse) {
    const std::size_t width = config_.layout.row_width();
    auto merged = merge_rows(std::get<SparseGradient>(p.gradient), width, config_.layout.shape.front());
    if (!merged) return merged.error();
    for (std::size_t i = 0; i < merged->rows.size(); ++i) {
      auto& row = sum.rows[merged->rows[i]];
      row.resize(width, 0.0F);
      for (std::size_t j = 0; j < width; ++j) row[j] += static_cast<float>(w * merged->values[i * width + j]);
    }
  } else {
    const auto& g = std::get<std::vector<float>>(p.gradient);
    sum.dense.resize(values_.size(), 0.0F);
    for (std::size_t j = 0; j < g.size(); ++j) sum.dense[j] += static_cast<float>(w * g[j]);
  }
  // Every step below the slowest clock has all its gradients: apply them in order.
  while (applied_steps_ < slowest()) {
    if (auto s = apply_step(applied_steps_); !s) return s;
    ++applied_steps_;
  }
  return ok_status();
}

Status Shard::apply_step(std::int64_t step) {
  auto it = sums_.find(step);
  if (it == sums_.end()) {
    return make_error(errc::internal, "shard {}: step {} completed with no gradients", config_.variable, step);
  }
  StepSum sum = std::move(it->second);
  sums_.erase(it);
  const auto scale = static_cast<float>(1.0 / sum.divisor);
  ++version_;
  if (!config_.sparse) {
    for (auto& x : sum.dense) x *= scale;
    return optimizer_.apply_dense(values_, sum.dense);
  }
  SparseGradient g;
  for (auto& [row, v] : sum.rows) {
    g.rows.push_back(row);
    for (float x : v) g.values.push_back(x * scale);
  }
  return optimizer_.apply_sparse(values_, g);
}

PullReply Shard::reply(std::int32_t replica, std::int64_t step) const {
  return PullReply{replica, step, version_, values_};
}

Status Shard::drain(Released& out) {
  // Admitting a push may advance the slowest clock and so admit more; loop to a fixpoint.
  bool progress = true;
  while (progress) {
    progress = false;
    for (auto it = held_pushes_.begin(); it != held_pushes_.end(); ++it) {
      if (!admitted(it->step)) continue;
      Push p = std::move(*it);
      held_pushes_.erase(it);
      if (auto s = accept(std::move(p), out); !s) return s;
      progress = true;
      break;
    }
  }
  for (auto it = held_pulls_.begin(); it != held_pulls_.end();) {
    if (admitted(it->step)) {
      out.pulls.push_back(reply(it->replica, it->step));
      it = held_pulls_.erase(it);
    } else {
      ++it;
    }
  }
  return ok_status();
}

Result<Released> Shard::push(Push p) {
  if (auto s = check(p); !s) return s.error();
  Released out;
  ++next_[static_cast<std::size_t>(p.replica)];
  if (admitted(p.step)) {
    if (auto s = accept(std::move(p), out); !s) return s.error();
  } else {
    held_pushes_.push_back(std::move(p));
  }
  if (auto s = drain(out); !s) return s.error();
  return out;
}

Result<Released> Shard::pull(std::int32_t replica, std::int64_t step) {
  if (replica < 0 || static_cast<std::size_t>(replica) >= clock_.size() || step < 0) {
    return make_error(errc::invalid_argument, "shard {}: expected a replica in [0, {}) and a step >= 0, got {} and {}",
                      config_.variable, clock_.size(), replica, step);
  }
  Released out;
  if (admitted(step)) {
    out.pulls.push_back(reply(replica, step));
  } else {
    held_pulls_.push_back(HeldPull{replica, step});
  }
  return out;
}

}  // namespace apiary::core::ps
