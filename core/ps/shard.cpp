#include "core/ps/shard.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace apiary::core::ps {

namespace {

/// The j-th float32 of `g`, read whatever its alignment.
inline float load(const char* g, std::size_t j) {
  float f;
  std::memcpy(&f, g + j * sizeof(float), sizeof(float));
  return f;
}

/// sum[j] = w * g[j] (`first`) or sum[j] += w * g[j], each product rounded to float once
/// as float(w * g[j]) computed in double would be: in float arithmetic when w is exactly
/// a float (the product of two floats is exact in double, so both round the same).
void add_weighted(float* sum, DenseBytes g, double w, bool first) {
  const char* src = g.bytes;
  const std::size_t n = g.count;
  const auto wf = static_cast<float>(w);
  if (static_cast<double>(wf) != w) {
    for (std::size_t j = 0; j < n; ++j) {
      const auto v = static_cast<float>(w * static_cast<double>(load(src, j)));
      sum[j] = first ? v : sum[j] + v;
    }
  } else if (wf == 1.0F && first) {
    if (n > 0) std::memcpy(sum, src, n * sizeof(float));
  } else if (wf == 1.0F) {
    for (std::size_t j = 0; j < n; ++j) sum[j] += load(src, j);
  } else if (first) {
    for (std::size_t j = 0; j < n; ++j) sum[j] = wf * load(src, j);
  } else {
    for (std::size_t j = 0; j < n; ++j) sum[j] += wf * load(src, j);
  }
}

DenseBytes bytes_of(const std::vector<float>& v) {
  return DenseBytes{reinterpret_cast<const char*>(v.data()), v.size()};
}

}  // namespace

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
      values_(std::make_shared<std::vector<float>>(std::move(initial))),
      optimizer_(config_.optimizer, values_->size(), config_.layout.row_width()),
      host_weight_(std::move(host_weight)),
      clock_(config_.replica_hosts.size(), 0),
      next_(config_.replica_hosts.size(), 0),
      dropped_(config_.replica_hosts.size(), false),
      rejoined_at_(config_.replica_hosts.size(), -1) {}

std::int64_t Shard::slowest() const {
  std::int64_t out = -1;
  for (std::size_t r = 0; r < clock_.size(); ++r) {
    if (!dropped_[r] && (out < 0 || clock_[r] < out)) out = clock_[r];
  }
  return out < 0 ? applied_steps_ : out;  // every replica dropped: nothing more completes
}

bool Shard::admitted(std::int64_t step) const { return !config_.sync || step <= slowest() + config_.staleness; }

Status Shard::check_header(std::int32_t replica, std::int64_t step, double samples, bool sparse,
                           std::size_t size, float learning_rate) const {
  const std::string& name = config_.variable;
  if (!(learning_rate >= 0.0F) || !std::isfinite(learning_rate)) {
    return make_error(errc::invalid_argument,
                      "shard {}: expected a learning rate > 0 in a push (or 0: the configured one), got {}", name,
                      learning_rate);
  }
  if (replica < 0 || static_cast<std::size_t>(replica) >= clock_.size()) {
    return make_error(errc::invalid_argument, "shard {}: expected a replica id in [0, {}), got {}", name,
                      clock_.size(), replica);
  }
  if (dropped_[static_cast<std::size_t>(replica)]) {
    return make_error(errc::protocol, "shard {}: replica {} was dropped after it went down; it takes no part any more",
                      name, replica);
  }
  if (step != next_[static_cast<std::size_t>(replica)]) {
    return make_error(errc::protocol, "shard {}: expected replica {} to push step {} next, got step {}", name,
                      replica, next_[static_cast<std::size_t>(replica)], step);
  }
  if (!(samples > 0.0)) {
    return make_error(errc::invalid_argument, "shard {}: expected samples > 0 in a push, got {}", name, samples);
  }
  if (sparse != config_.sparse) {
    return make_error(errc::invalid_argument, "shard {}: expected a {} gradient, got a {} one", name,
                      config_.sparse ? "sparse" : "dense", sparse ? "sparse" : "dense");
  }
  if (!sparse && size != values_->size()) {
    return make_error(errc::invalid_argument, "shard {}: expected a gradient of {} values, got {}", name,
                      values_->size(), size);
  }
  return ok_status();
}

Status Shard::check(const Push& p) const {
  const auto* dense = std::get_if<std::vector<float>>(&p.gradient);
  if (auto s = check_header(p.replica, p.step, p.samples, dense == nullptr, dense ? dense->size() : 0,
                            p.learning_rate);
      !s) {
    return s;
  }
  if (dense != nullptr) return ok_status();
  auto merged = merge_rows(std::get<SparseGradient>(p.gradient), config_.layout.row_width(),
                           config_.layout.shape.front());
  if (!merged) return make_error(merged.error().code, "shard {}: {}", config_.variable, merged.error().message);
  return ok_status();
}

Status Shard::accept(Push p, Released& out) {
  if (config_.sync && !config_.sparse) {
    auto kept = std::make_shared<const std::vector<float>>(std::move(std::get<std::vector<float>>(p.gradient)));
    const DenseBytes g = bytes_of(*kept);
    return accept_dense(p.replica, p.step, p.samples, p.learning_rate, g, std::move(kept), out);
  }
  const auto r = static_cast<std::size_t>(p.replica);
  ++clock_[r];
  out.acks.push_back(PushAck{p.replica, p.step});
  if (!config_.sync) {
    // Asynchronous: this gradient alone is one update, at its own rate.
    ++version_;
    set_rate(p.learning_rate);
    if (config_.sparse) return optimizer_.apply_sparse(writable_values(), std::get<SparseGradient>(p.gradient));
    return optimizer_.apply_dense(writable_values(), std::get<std::vector<float>>(p.gradient));
  }
  // Synchronous, sparse: w_r * g_r waits for the step's sum, in replica order (apply_step).
  const double w = config_.aggregation == Aggregation::host_mean ? host_weight_[r] : p.samples;
  StepSum& sum = sums_[p.step];
  sum.divisor += w;  // host_mean weights sum to 1 over a full step
  sum.rates[p.replica] = p.learning_rate;
  auto merged = merge_rows(std::get<SparseGradient>(p.gradient), config_.layout.row_width(),
                           config_.layout.shape.front());
  if (!merged) return merged.error();
  sum.sparse[p.replica] = std::make_pair(w, std::move(*merged));
  return apply_ready();
}

Status Shard::accept_dense(std::int32_t replica, std::int64_t step, double samples, float learning_rate,
                           DenseBytes g, std::shared_ptr<const void> keep, Released& out) {
  const auto r = static_cast<std::size_t>(replica);
  ++clock_[r];
  out.acks.push_back(PushAck{replica, step});
  // w_r * g_r waits for the step's sum (fold).
  const double w = config_.aggregation == Aggregation::host_mean ? host_weight_[r] : samples;
  StepSum& sum = sums_[step];
  sum.divisor += w;  // host_mean weights sum to 1 over a full step
  sum.rates[replica] = learning_rate;
  sum.pending[replica] = PendingDense{w, g, std::move(keep)};
  sum.pending_bytes += g.count * sizeof(float);
  if (sum.pending_bytes > config_.max_unsummed_bytes) fold(sum, step);
  return apply_ready();
}

std::vector<Shard::PendingDense> Shard::take_run(StepSum& sum, std::int64_t step) const {
  std::vector<PendingDense> run;
  while (static_cast<std::size_t>(sum.folded) < dropped_.size()) {
    auto it = sum.pending.find(sum.folded);
    if (it == sum.pending.end()) {
      // A dropped replica that never pushed this step has no place in its order, nor one
      // that rejoined from a later step.
      const auto f = static_cast<std::size_t>(sum.folded);
      if (!dropped_[f] && rejoined_at_[f] <= step) break;
      ++sum.folded;
      continue;
    }
    sum.pending_bytes -= it->second.g.count * sizeof(float);
    run.push_back(std::move(it->second));
    sum.pending.erase(it);
    ++sum.folded;
  }
  return run;
}

void Shard::sum_block(const std::vector<PendingDense>& run, bool first, std::size_t at, std::size_t n, float* into) {
  // Every gradient of the run in replica order over one block: the block stays in cache
  // while they pass through it, each element summed in the order one whole pass per
  // gradient would sum it.
  for (std::size_t k = 0; k < run.size(); ++k) {
    add_weighted(into, DenseBytes{run[k].g.bytes + at * sizeof(float), n}, run[k].w, first && k == 0);
  }
}

void Shard::fold(StepSum& sum, std::int64_t step) {
  const auto run = take_run(sum, step);
  if (run.empty()) return;
  const bool first = sum.dense.empty();  // nothing summed before
  if (first) {
    if (spare_.size() == values_->size()) sum.dense = std::move(spare_);
    sum.dense.resize(values_->size());
  }
  for (std::size_t at = 0; at < sum.dense.size(); at += k_block) {
    sum_block(run, first, at, std::min(k_block, sum.dense.size() - at), sum.dense.data() + at);
  }
}

Status Shard::apply_ready() {
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
  set_rate(sum.rates.empty() ? 0.0F : sum.rates.begin()->second);  // the lowest-numbered replica's
  if (!config_.sparse) {
    // Every replica has pushed: the rest of the run is summed block by block, and each
    // block of the sum updates the parameters (the mean taken inside the update) while
    // it is in cache. Gradients summed early lie in sum.dense; the rest are added there.
    const bool partial = !sum.dense.empty();
    const auto run = take_run(sum, step);
    if (!sum.pending.empty() || static_cast<std::size_t>(sum.folded) != clock_.size() ||
        (partial && sum.dense.size() != values_->size())) {
      return make_error(errc::internal, "shard {}: step {} completed with {} of {} gradients in replica order",
                        config_.variable, step, sum.folded, clock_.size());
    }
    ++version_;
    block_.resize(k_block);
    auto s = optimizer_.apply_dense_blocks(writable_values(), scale, k_block, [&](std::size_t at, std::size_t n) {
      float* into = partial ? sum.dense.data() + at : block_.data();
      sum_block(run, !partial, at, n, into);
      return static_cast<const float*>(into);
    });
    if (partial) spare_ = std::move(sum.dense);
    return s;
  }
  // Sparse: each row summed over the replicas in replica order, as dense values are.
  const std::size_t width = config_.layout.row_width();
  std::map<std::int64_t, std::vector<float>> rows;
  for (const auto& [replica, weighted] : sum.sparse) {
    const auto& [w, merged] = weighted;
    for (std::size_t i = 0; i < merged.rows.size(); ++i) {
      auto& row = rows[merged.rows[i]];
      row.resize(width, 0.0F);
      for (std::size_t j = 0; j < width; ++j) row[j] += static_cast<float>(w * merged.values[i * width + j]);
    }
  }
  ++version_;
  SparseGradient g;
  for (auto& [row, v] : rows) {
    g.rows.push_back(row);
    for (float x : v) g.values.push_back(x * scale);
  }
  return optimizer_.apply_sparse(writable_values(), g);
}

void Shard::set_rate(float learning_rate) {
  // Checked when the push came in (finite, >= 0); the configured rate passed validation.
  (void)optimizer_.set_learning_rate(learning_rate > 0.0F ? learning_rate : config_.optimizer.learning_rate);
}

PullReply Shard::reply(std::int32_t replica, std::int64_t step) const {
  return PullReply{replica, step, version_, pull_values_ ? *values_ : std::vector<float>{}};
}

std::vector<float>& Shard::writable_values() {
  if (values_.use_count() > 1) values_ = std::make_shared<std::vector<float>>(*values_);
  return *values_;
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

Result<Released> Shard::push_dense(std::int32_t replica, std::int64_t step, double samples, DenseBytes gradient,
                                   std::shared_ptr<const void> keep, float learning_rate) {
  if (auto s = check_header(replica, step, samples, false, gradient.count, learning_rate); !s) return s.error();
  if (!config_.sync || !admitted(step) || keep == nullptr) {
    // Held, applied alone, or in bytes that live only during this call: its own copy.
    std::vector<float> owned(gradient.count);
    if (gradient.count > 0) std::memcpy(owned.data(), gradient.bytes, gradient.count * sizeof(float));
    return push(Push{replica, step, std::move(owned), samples, learning_rate});
  }
  Released out;
  ++next_[static_cast<std::size_t>(replica)];
  if (auto s = accept_dense(replica, step, samples, learning_rate, gradient, std::move(keep), out); !s) return s.error();
  if (auto s = drain(out); !s) return s.error();
  return out;
}

Result<Released> Shard::drop_replica(std::int32_t replica) {
  if (replica < 0 || static_cast<std::size_t>(replica) >= clock_.size()) {
    return make_error(errc::invalid_argument, "shard {}: expected a replica id in [0, {}) to drop, got {}",
                      config_.variable, clock_.size(), replica);
  }
  Released out;
  const auto r = static_cast<std::size_t>(replica);
  if (!config_.sync || dropped_[r]) return out;
  dropped_[r] = true;
  held_pushes_.erase(std::remove_if(held_pushes_.begin(), held_pushes_.end(),
                                    [replica](const Push& p) { return p.replica == replica; }),
                     held_pushes_.end());
  held_pulls_.erase(std::remove_if(held_pulls_.begin(), held_pulls_.end(),
                                   [replica](const HeldPull& p) { return p.replica == replica; }),
                    held_pulls_.end());
  rejoined_at_[r] = -1;
  reweight_hosts();
  if (auto s = apply_ready(); !s) return s.error();
  if (auto s = drain(out); !s) return s.error();
  return out;
}

void Shard::reweight_hosts() {
  // host_mean: each host's weight shared by the replicas it has (pushes already taken in
  // keep theirs; a step's mean divides by the weights it summed).
  std::map<std::int32_t, std::size_t> per_host;
  for (std::size_t i = 0; i < dropped_.size(); ++i) {
    if (!dropped_[i]) ++per_host[config_.replica_hosts[i]];
  }
  for (std::size_t i = 0; i < dropped_.size(); ++i) {
    if (dropped_[i]) continue;
    host_weight_[i] = 1.0 / (static_cast<double>(per_host.size()) *
                             static_cast<double>(per_host[config_.replica_hosts[i]]));
  }
}

bool Shard::rejoining(std::int32_t replica) const {
  if (replica < 0 || static_cast<std::size_t>(replica) >= dropped_.size()) return false;
  const auto r = static_cast<std::size_t>(replica);
  return dropped_[r] || (rejoined_at_[r] >= 0 && next_[r] == rejoined_at_[r]);
}

std::int64_t Shard::rejoin_floor(std::int32_t replica) const {
  std::int64_t floor = applied_steps_;
  for (std::size_t o = 0; o < next_.size(); ++o) {
    if (static_cast<std::int32_t>(o) == replica || dropped_[o]) continue;
    floor = std::max(floor, next_[o]);
  }
  return floor;
}

Status Shard::can_rejoin_from(std::int32_t replica, std::int64_t step) const {
  if (replica < 0 || static_cast<std::size_t>(replica) >= clock_.size()) {
    return make_error(errc::invalid_argument, "shard {}: expected a replica id in [0, {}) to rejoin, got {}",
                      config_.variable, clock_.size(), replica);
  }
  if (!config_.sync) {
    return make_error(errc::invalid_argument, "shard {}: an asynchronous shard takes a replica back as it joins",
                      config_.variable);
  }
  if (!rejoining(replica)) {
    return make_error(errc::protocol, "shard {}: replica {} takes part in the job (pushed up to step {}); only a "
                      "dropped replica rejoins", config_.variable, replica, next_[static_cast<std::size_t>(replica)] - 1);
  }
  const std::int64_t floor = rejoin_floor(replica);
  bool others = false;
  for (std::size_t o = 0; o < dropped_.size(); ++o) others = others || (static_cast<std::int32_t>(o) != replica && !dropped_[o]);
  if (step < floor || (!others && step != floor)) {
    return make_error(errc::protocol, "shard {}: replica {} can rejoin from step {}{}, got step {}", config_.variable,
                      replica, floor, others ? " on" : " (no other replica takes part)", step);
  }
  return ok_status();
}

Result<Released> Shard::rejoin_from(std::int32_t replica, std::int64_t step) {
  if (auto can = can_rejoin_from(replica, step); !can) return can.error();
  const auto r = static_cast<std::size_t>(replica);
  dropped_[r] = false;
  rejoined_at_[r] = step;
  clock_[r] = step;
  next_[r] = step;
  reweight_hosts();
  Released out;
  if (auto s = apply_ready(); !s) return s.error();
  if (auto s = drain(out); !s) return s.error();
  return out;
}

Status Shard::start_at(std::int64_t step) {
  if (!config_.sync) {
    return make_error(errc::invalid_argument,
                      "shard {}: an asynchronous shard cannot continue a job from a checkpoint (the pushes since "
                      "cannot be replayed in the order they were applied); start the job again from it instead",
                      config_.variable);
  }
  if (config_.staleness > 0) {
    return make_error(errc::invalid_argument,
                      "shard {}: an SSP shard (staleness {}) cannot continue a job from a checkpoint (under SSP a "
                      "checkpoint is a snapshot of shards at different steps, not one step's state); start the job "
                      "again from it instead",
                      config_.variable, config_.staleness);
  }
  if (step < 0) {
    return make_error(errc::invalid_argument, "shard {}: expected a step >= 0 to continue from, got {}",
                      config_.variable, step);
  }
  const bool fresh = version_ == 0 && applied_steps_ == 0 && sums_.empty() && held() == 0 &&
                     std::all_of(next_.begin(), next_.end(), [](std::int64_t n) { return n == 0; });
  if (!fresh) {
    return make_error(errc::protocol, "shard {}: expected a shard that has taken nothing to continue from step {}, "
                      "got one at version {}", config_.variable, step, version_);
  }
  std::fill(clock_.begin(), clock_.end(), step);
  std::fill(next_.begin(), next_.end(), step);
  applied_steps_ = step;
  version_ = step;
  return ok_status();
}

Status Shard::rejoin(std::int32_t replica) {
  if (replica < 0 || static_cast<std::size_t>(replica) >= clock_.size()) {
    return make_error(errc::invalid_argument, "shard {}: expected a replica id in [0, {}) to rejoin, got {}",
                      config_.variable, clock_.size(), replica);
  }
  if (config_.sync) return ok_status();
  next_[static_cast<std::size_t>(replica)] = 0;
  clock_[static_cast<std::size_t>(replica)] = 0;
  return ok_status();
}

Result<Released> Shard::pull(std::int32_t replica, std::int64_t step) {
  if (replica < 0 || static_cast<std::size_t>(replica) >= clock_.size() || step < 0) {
    return make_error(errc::invalid_argument, "shard {}: expected a replica in [0, {}) and a step >= 0, got {} and {}",
                      config_.variable, clock_.size(), replica, step);
  }
  if (dropped_[static_cast<std::size_t>(replica)]) {
    return make_error(errc::protocol, "shard {}: replica {} was dropped after it went down; it takes no part any more",
                      config_.variable, replica);
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
