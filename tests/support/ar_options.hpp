#pragma once
/// What the all-reduce job tests share, whether the job runs in processes or in the
/// simulated world: the builder options of a job over fusion groups of a given size,
/// and how many collectives a step of the logistic-regression model then runs.
#include <cstdint>
#include <optional>

#include "core/strategy/builders.hpp"

namespace apiary::testing {

/// The synchronizer whose spec and compressor the all-reduce jobs pick.
using Sync = pb::autodist::AllReduceSynchronizer;

/// AllReduce builder options: `spec` over fusion groups of `chunk` variables, with
/// `compressor` (each the builder's default when not given).
inline core::strategy::BuilderOptions ar_options(std::int64_t chunk, std::optional<core::strategy::ArSpec> spec,
                                                 std::optional<core::strategy::ArCompressor> compressor = {}) {
  core::strategy::BuilderOptions o;
  o.chunk_size = chunk;
  o.all_reduce_spec = spec;
  o.compressor = compressor;
  return o;
}

/// Collectives per step of the logistic-regression model (w and b) in groups of
/// `chunk`: 1 puts w and b in two groups, 128 fuses them into one.
inline std::int64_t collectives_per_step(std::int64_t chunk) { return chunk == 1 ? 2 : 1; }

}  // namespace apiary::testing
