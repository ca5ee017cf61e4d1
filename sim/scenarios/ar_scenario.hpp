#pragma once
/// The all-reduce side of `apiary sim ps`: a strategy whose variables use
/// AllReduceSynchronizers (AllReduce, PartitionedAR, RandomAxisPartitionAR) runs as one
/// ArReplicaHost per replica on the simulated network, with no PS devices; every link
/// has its own seeded latency; every replica stays bit-identical (the exchange's means),
/// and the variables named in sparse_variables travel as the rows they touch (one
/// gather per step). run_ps_scenario routes such strategies here. Faults: a
/// straggler (the last replica computes longer) and a replica killed when it begins a
/// step; a kill breaks its peers' connections to it after `failure_detection`, and each
/// survivor then fails with an error naming it. The report is a PsScenarioReport: per
/// step the chief's loss and the virtual step times (versions are the step: every
/// replica applies every average), then each replica's outcome, the seed and the trace
/// hash (same config, same hash).
#include "messages/result.hpp"
#include "sim/scenarios/ps_scenario.hpp"

namespace apiary::sim::scenarios {

/// Runs an all-reduce strategy's job to the end. Errors: a config that fails
/// validate(), kill_ps_at set (there is no PS), a strategy plan_allreduce refuses for
/// the logistic-regression model (invalid_argument, or unsupported for NCCL with GPUs),
/// an unknown name in sparse_variables (invalid_argument).
[[nodiscard]] Result<PsScenarioReport> run_ar_scenario(const PsScenarioConfig& config);

}  // namespace apiary::sim::scenarios
