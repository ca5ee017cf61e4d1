// The synthetic model of `apiary bench ps` and its BSP plan over K PS shards.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "bench/ps_bench_process.hpp"

namespace apiary::bench {

std::size_t PsBenchModel::bytes() const {
  std::size_t n = 0;
  for (const auto& v : variables) n += v.second;
  return n * sizeof(float);
}

std::pair<std::size_t, std::size_t> PsBenchModel::extremes() const {
  if (variables.empty()) return {0, 0};
  const auto cmp = [](const auto& a, const auto& b) { return a.second < b.second; };
  return {std::max_element(variables.begin(), variables.end(), cmp)->second,
          std::min_element(variables.begin(), variables.end(), cmp)->second};
}

PsBenchModel ps_bench_model(std::size_t bytes) {
  const std::size_t total = bytes / sizeof(float);
  PsBenchModel m;
  std::size_t used = 0;
  const auto add = [&](const std::string& name, std::size_t n) {
    n = std::min(n, total - used);
    if (n == 0) return;
    m.variables.emplace_back(name, n);
    used += n;
  };
  // Large tensors (embeddings, big dense layers): percent of the model each.
  const std::size_t large_pct[] = {32, 24, 16, 16};
  for (std::size_t i = 0; i < 4; ++i) add(fmt::format("large{}", i), total * large_pct[i] / 100);
  // Medium layers: 1% each.
  for (std::size_t i = 0; i < 6; ++i) add(fmt::format("medium{}", i), total / 100);
  // Small tensors (biases, norms, small layers): 4, 16, 64 and 256 KiB in turn.
  const std::size_t small_elems[] = {1024, 4096, 16384, 65536};
  for (std::size_t i = 0; used < total; ++i) add(fmt::format("small{}", i), small_elems[i % 4]);
  return m;
}

Result<core::ps::TrainingPlan> ps_bench_plan(const PsBenchModel& model, std::size_t shards, std::size_t replicas) {
  if (shards == 0 || replicas == 0)
    return make_error(errc::invalid_argument, "PS bench plan: expected >= 1 shard and >= 1 replica, got {} and {}",
                      shards, replicas);
  core::ps::TrainingPlan plan;
  for (std::size_t r = 0; r < replicas; ++r) plan.replicas.push_back(fmt::format("localhost:GPU:{}", r));
  for (std::size_t i = 0; i < shards; ++i) plan.servers.push_back(fmt::format("localhost:CPU:{}", i));
  // Largest first onto the least loaded shard (ties: the lower index).
  std::vector<std::size_t> order(model.variables.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return model.variables[a].second > model.variables[b].second; });
  std::vector<std::size_t> load(shards, 0), where(model.variables.size(), 0);
  for (const auto v : order) {
    const auto least = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    where[v] = least;
    load[least] += model.variables[v].second;
  }
  core::ps::OptimizerConfig sgd;
  sgd.kind = core::ps::OptimizerKind::sgd;
  sgd.learning_rate = 1.0F;  // w -= g exactly
  for (std::size_t v = 0; v < model.variables.size(); ++v) {
    const auto& [name, n] = model.variables[v];
    const std::vector<std::int64_t> shape{static_cast<std::int64_t>(n)};
    auto layouts = core::ps::shard_layouts(shape, "");
    if (!layouts) return layouts.error();
    core::ps::PlannedShard s;
    s.variable = name;
    s.config.variable = name;
    s.config.layout = layouts->front();
    s.config.optimizer = sgd;
    s.config.sync = true;
    s.config.staleness = 0;  // BSP
    s.config.replica_hosts.assign(replicas, 0);
    s.device = plan.servers[where[v]];
    plan.variables.push_back({name, shape, "", false, {plan.shards.size()}});
    plan.shards.push_back(std::move(s));
  }
  return plan;
}

std::size_t ps_bench_bytes_on(const core::ps::TrainingPlan& plan, const std::string& device) {
  std::size_t n = 0;
  for (const auto id : plan.shards_on(device)) n += plan.shards[id].config.layout.size();
  return n * sizeof(float);
}

}  // namespace apiary::bench
