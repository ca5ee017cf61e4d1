// Strategy search: candidates from the builders, each simulated, ranked.
#include "sim/scenarios/strategy_search.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "core/collective/ar_plan.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/ps/plan.hpp"
#include "sim/scenarios/ps_scenario.hpp"

namespace apiary::sim::scenarios {

namespace cs = core::strategy;
namespace cps = core::ps;

Result<std::size_t> logistic_features(const cs::GraphItem& item) {
  const cs::Variable* w = item.find("logreg/w:0");
  const cs::Variable* b = item.find("logreg/b:0");
  if (w == nullptr || b == nullptr || item.variables.size() != 2 || w->shape.size() != 1 || w->shape[0] < 1 ||
      b->shape != std::vector<std::int64_t>{1}) {
    std::string names;
    for (const auto& v : item.variables) names += (names.empty() ? "" : ", ") + v.name;
    return make_error(errc::invalid_argument,
                      "expected the graph item of the logistic-regression job apiary ps trains (logreg/w:0 of shape "
                      "[F] and logreg/b:0 of shape [1]), the model the simulator runs; got the variables [{}]",
                      names);
  }
  return static_cast<std::size_t>(w->shape[0]);
}

namespace {

bool ps_family(cs::BuilderKind kind) {
  return kind == cs::BuilderKind::ps || kind == cs::BuilderKind::ps_load_balancing ||
         kind == cs::BuilderKind::partitioned_ps || kind == cs::BuilderKind::uneven_partitioned_ps;
}

/// Every option set worth a try for `kind`, its defaults first, with the label's suffix.
std::vector<std::pair<cs::BuilderOptions, std::string>> option_sets(cs::BuilderKind kind, bool stale) {
  std::vector<std::pair<cs::BuilderOptions, std::string>> out{{{}, ""}};
  cs::BuilderOptions o;
  if (ps_family(kind)) {
    o = {};
    o.local_proxy_variable = true;
    out.emplace_back(o, " proxy");
  }
  if (kind == cs::BuilderKind::all_reduce) {
    for (auto c : {pb::autodist::AllReduceSynchronizer::HorovodCompressor,
                   pb::autodist::AllReduceSynchronizer::HorovodCompressorEF}) {
      o = {};
      o.compressor = c;
      out.emplace_back(o, std::string(" ") + pb::autodist::AllReduceSynchronizer::Compressor_Name(c));
    }
  }
  if (kind == cs::BuilderKind::all_reduce || kind == cs::BuilderKind::partitioned_ar ||
      kind == cs::BuilderKind::random_axis_partition_ar || kind == cs::BuilderKind::parallax) {
    o = {};
    o.chunk_size = 1;
    out.emplace_back(o, " chunk 1");
  }
  if (stale && (ps_family(kind) || kind == cs::BuilderKind::parallax)) {
    o = {};
    o.staleness = 2;
    out.emplace_back(o, " SSP 2");
    o = {};
    o.sync = false;
    out.emplace_back(o, " async");
  }
  return out;
}

/// Model bytes each host holds: every replica its parameters and gradients, every PS
/// device its shards, every node with replicas a proxy copy of the proxied shards.
std::map<std::string, double> memory_by_host(const pb::autodist::Strategy& strategy, const cs::GraphItem& item) {
  std::map<std::string, double> out;
  auto host_of = [](const std::string& device) {
    auto name = cs::parse_device_name(device);
    return name ? name->host : device;
  };
  double model = 0.0;
  for (const auto& v : item.variables) {
    double n = 1.0;
    for (auto d : v.shape) n *= static_cast<double>(d);
    model += 4.0 * n;
  }
  std::set<std::string> replica_hosts;
  for (const auto& r : strategy.graph_config().replicas()) {
    out[host_of(r)] += 2.0 * model;
    replica_hosts.insert(host_of(r));
  }
  const auto ps = core::collective::ps_part(strategy);
  if (ps.node_config_size() == 0) return out;
  auto plan = cps::plan_training(ps, item, {});
  if (!plan) return out;
  for (const auto& shard : plan->shards) {
    const double bytes = 4.0 * static_cast<double>(shard.config.layout.size());
    out[host_of(shard.device)] += bytes;
    if (shard.local_replication) {
      for (const auto& h : replica_hosts) out[h] += bytes;
    }
  }
  return out;
}

}  // namespace

Result<std::vector<SearchCandidate>> search_candidates(const cs::GraphItem& item, const cs::ResourceSpec& spec,
                                                       bool stale) {
  std::vector<SearchCandidate> defaults, variants;
  std::set<std::string> seen;
  std::string why;
  for (auto kind : cs::all_builder_kinds) {
    bool first = true;
    for (auto& [options, suffix] : option_sets(kind, stale)) {
      auto built = cs::build_strategy(kind, options, item, spec, "search");
      if (!built) {
        if (why.empty()) why = built.error().message;
        first = false;
        continue;
      }
      if (!seen.insert(built->SerializeAsString()).second) continue;  // places every variable as another does
      SearchCandidate c{kind, options, std::string(cs::to_string(kind)) + suffix, std::move(*built)};
      (first ? defaults : variants).push_back(std::move(c));
      first = false;
    }
  }
  if (defaults.empty() && variants.empty()) {
    return make_error(errc::invalid_argument, "no builder could place this model on this cluster: {}", why);
  }
  for (auto& v : variants) defaults.push_back(std::move(v));
  return defaults;
}

Result<std::vector<SearchRow>> search_strategies(const SearchConfig& config) {
  if (config.steps < 2) {
    return make_error(errc::invalid_argument,
                      "expected at least 2 simulated steps (the first is not timed: it opens the connections), got "
                      "{}",
                      config.steps);
  }
  auto features = logistic_features(config.item);
  if (!features) return features.error();
  auto candidates = search_candidates(config.item, config.spec, config.stale);
  if (!candidates) return candidates.error();
  if (config.budget > 0 && candidates->size() > config.budget) candidates->resize(config.budget);
  std::vector<std::string> sparse;
  for (const auto& v : config.item.variables) {
    if (v.sparse) sparse.push_back(v.name);
  }
  std::vector<SearchRow> rows;
  for (auto& candidate : *candidates) {
    SearchRow row;
    PsScenarioConfig sc;
    sc.seed = config.seed;
    sc.strategy = candidate.strategy;
    sc.features = *features;
    sc.samples = config.samples;
    sc.density = config.density;
    sc.batch = config.batch;
    sc.steps = config.steps;
    sc.compute = config.compute;
    sc.profile = config.profile;
    sc.sparse_variables = sparse;
    auto report = run_ps_scenario(sc);
    if (!report) {
      row.error = report.error().message;
    } else if (report->hung || report->replicas.empty() || !report->replicas.front().finished) {
      row.error = report->hung ? "the simulated job hung"
                               : fmt::format("the chief did not finish: {}", report->replicas.empty()
                                                                                 ? std::string("no replica")
                                                                                 : report->replicas.front().error);
    } else {
      double total = 0.0;
      std::size_t timed = 0;
      for (const auto& s : report->steps) {
        if (s.step < 1) continue;
        total += std::chrono::duration<double, std::milli>(s.chief_time).count();
        ++timed;
      }
      row.step_ms = timed > 0 ? total / static_cast<double>(timed) : 0.0;
      row.bytes_per_step = static_cast<double>(report->world.bytes) / static_cast<double>(config.steps);
      const double run_ms = std::chrono::duration<double, std::milli>(report->virtual_time).count();
      if (run_ms > 0) {
        row.cpu_ms_per_step = row.step_ms * std::chrono::duration<double, std::milli>(report->cpu).count() / run_ms;
      }
      row.memory = memory_by_host(candidate.strategy, config.item);
      for (const auto& [host, bytes] : row.memory) row.peak_memory = std::max(row.peak_memory, bytes);
    }
    row.candidate = std::move(candidate);
    rows.push_back(std::move(row));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const SearchRow& a, const SearchRow& b) {
    if (a.error.empty() != b.error.empty()) return a.error.empty();
    return a.error.empty() && a.step_ms < b.step_ms;
  });
  return rows;
}

std::string format_search_table(const std::vector<SearchRow>& rows) {
  std::string out = fmt::format("{:>4}  {:<42} {:>12} {:>12} {:>16} {:>12}\n", "rank", "candidate", "ms/step",
                                "MB/step", "peak MB/host", "CPU ms/step");
  std::size_t rank = 0;
  for (const auto& r : rows) {
    ++rank;
    if (!r.error.empty()) {
      out += fmt::format("{:>4}  {:<42} failed: {}\n", rank, r.candidate.label, r.error);
      continue;
    }
    out += fmt::format("{:>4}  {:<42} {:>12.3f} {:>12.3f} {:>16.3f} {:>12.3f}\n", rank, r.candidate.label, r.step_ms,
                       r.bytes_per_step / 1e6, r.peak_memory / 1e6, r.cpu_ms_per_step);
  }
  return out;
}

}  // namespace apiary::sim::scenarios
