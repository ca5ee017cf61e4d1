#pragma once
/// The mixed side of `apiary sim ps`: a strategy whose variables use PSSynchronizers and
/// AllReduceSynchronizers (Parallax: sparse -> PS, dense -> all-reduce) runs as one
/// PsServerHost per PS device of its PS part (core::collective::ps_part) and one
/// MixedReplicaHost per replica (sim/scenarios/mixed_host.hpp), every link with its own
/// seeded latency; run_ps_scenario routes such strategies here. The variables named in
/// sparse_variables are sparse (pushed to a PS as the rows they touch, or all-gathered
/// as rows when all-reduced). Faults: a straggler, a PS device killed when the chief
/// begins a step, a replica killed when it begins a step; a kill breaks its peers'
/// connections to it after `failure_detection`, and each survivor then fails with an
/// error naming it. The report is a PsScenarioReport (seed and trace hash included:
/// same config, same hash).
#include "messages/result.hpp"
#include "sim/scenarios/ps_scenario.hpp"

namespace apiary::sim::scenarios {

/// Runs a mixed strategy's job to the end. Errors: a config that fails validate(), a
/// strategy plan_allreduce (with PS variables allowed) or plan_training refuses for the
/// logistic-regression model, an unknown name in sparse_variables (invalid_argument).
[[nodiscard]] Result<PsScenarioReport> run_mixed_scenario(const PsScenarioConfig& config);

/// Whether any node or part of `strategy` uses a PSSynchronizer.
[[nodiscard]] bool uses_ps(const pb::autodist::Strategy& strategy);

}  // namespace apiary::sim::scenarios
