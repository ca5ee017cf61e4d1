#pragma once
/// Strategy search (`apiary strategy search`): the candidates of the eight builders and
/// their options for one model and cluster, each built, deduplicated (two option sets that
/// place every variable alike are one candidate) and run through the training scenario
/// (ps_scenario.hpp) on the machine a cost profile describes; the candidates ranked by the
/// chief's predicted step time, with the bytes the job sends per step and the model bytes
/// each host holds.
///
/// The model is the one the scenario trains and `apiary ps` runs: the logistic regression
/// (variables logreg/w:0 [F] and logreg/b:0 [1]), w's gradient sparse when the graph item
/// marks it so. A graph item of another model is refused, saying so.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/strategy/builders.hpp"
#include "core/strategy/graph_item.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/cost_profile.hpp"
#include "strategy.pb.h"

namespace apiary::sim::scenarios {

/// One candidate: a builder, its options, and what they built.
struct SearchCandidate {
  core::strategy::BuilderKind kind = core::strategy::BuilderKind::ps;
  core::strategy::BuilderOptions options;
  std::string label;  ///< "PSLoadBalancing proxy", "AllReduce HorovodCompressor chunk 1", ...
  pb::autodist::Strategy strategy;
};

/// What to search.
struct SearchConfig {
  core::strategy::GraphItem item;
  core::strategy::ResourceSpec spec;
  std::optional<CostProfile> profile;  ///< without: the scenario's default latency and compute
  std::int64_t steps = 8;              ///< simulated steps per candidate (>= 2: the first is not timed)
  std::size_t batch = 16;
  std::size_t samples = 1024;
  double density = 1.0;  ///< the data's (core/ps/logistic_regression.hpp)
  std::uint64_t seed = 1;
  std::size_t budget = 0;     ///< candidates simulated at most (0: all); the builders' defaults first
  bool stale = false;         ///< also SSP (staleness 2) and asynchronous PS candidates
  core::Duration compute = std::chrono::milliseconds(10);  ///< without a profile: compute per step
};

/// One simulated candidate.
struct SearchRow {
  SearchCandidate candidate;
  std::string error;                     ///< why it could not be simulated ("": it ran)
  double step_ms = 0.0;                  ///< the chief's mean virtual step time, steps 1..steps-1
  double bytes_per_step = 0.0;           ///< payload bytes every node sent, per step
  /// With a profile: processor time of every machine per step (ms), step_ms times the
  /// machines' mean load over the run (their processor time over the virtual time).
  double cpu_ms_per_step = 0.0;
  std::map<std::string, double> memory;  ///< host -> model bytes held there (values, gradients, shards, proxies)
  double peak_memory = 0.0;              ///< the largest of `memory`
};

/// The model's feature count when `item` is the logistic regression's graph item
/// (sparse marks allowed); otherwise invalid_argument naming what differs.
[[nodiscard]] Result<std::size_t> logistic_features(const core::strategy::GraphItem& item);

/// The candidates, in search order: each builder with its defaults, then the variants
/// (PS builders with a proxy on every worker; AllReduce with float16 compressors and one
/// variable per fusion group; with `stale`, SSP and asynchronous PS builders), every
/// option set that builds, without repeats. Errors: none of them builds.
[[nodiscard]] Result<std::vector<SearchCandidate>> search_candidates(const core::strategy::GraphItem& item,
                                                                     const core::strategy::ResourceSpec& spec,
                                                                     bool stale);

/// Simulates up to `budget` candidates and returns them ranked, fastest first (the
/// failed ones last, with their errors). Errors: a graph item of another model, steps
/// below 2, no candidate.
[[nodiscard]] Result<std::vector<SearchRow>> search_strategies(const SearchConfig& config);

/// The ranked table: rank, candidate, predicted ms per step, MB per step, peak MB per host.
[[nodiscard]] std::string format_search_table(const std::vector<SearchRow>& rows);

}  // namespace apiary::sim::scenarios
