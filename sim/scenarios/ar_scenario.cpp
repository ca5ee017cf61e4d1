#include "sim/scenarios/ar_scenario.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "core/collective/ar_plan.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/strategy/resource_spec.hpp"
#include "sim/scenarios/replica_host.hpp"
#include "sim/scenarios/dht_swarm.hpp"

namespace apiary::sim::scenarios {

namespace cc = core::collective;
namespace cps = core::ps;
using core::TimePoint;

namespace {

/// The job in one World.
struct ArRun {
  explicit ArRun(std::uint64_t seed) : world(seed) {}
  World world;
  std::vector<core::PeerAddr> addrs;
  std::vector<ReplicaHost*> replicas;
};

/// "all-reduce, 2 collectives per step: group 0 [w NoneCompressor], ...".
std::string mode_of(const cc::ArPlan& plan) {
  std::string groups;
  for (const auto& g : plan.groups) {
    groups += fmt::format("{}group {} {} [", groups.empty() ? "" : ", ", g.group, cc::to_string(g.transport));
    for (std::size_t k = 0; k < g.tensors.size(); ++k) {
      const auto& t = plan.tensors[g.tensors[k]];
      groups += fmt::format("{}{} {}", k == 0 ? "" : ", ", t.name, cc::to_string(t.compressor));
    }
    groups += "]";
  }
  for (const auto& sp : plan.sparse) groups += fmt::format("{}gather [{} sparse]", groups.empty() ? "" : ", ", sp.name);
  const std::size_t collectives = plan.groups.size() + (plan.sparse.empty() ? 0 : 1);
  return fmt::format("all-reduce, {} collectives per step: {}", collectives, groups);
}

Status add_replicas(ArRun& run, const PsScenarioConfig& c, const std::shared_ptr<const cc::ArPlan>& plan) {
  const std::size_t n = plan->replicas.size();
  for (std::size_t r = 0; r < n; ++r) run.addrs.push_back(fmt::format("replica/{}/{}", r, plan->replicas[r]));
  auto data = std::make_shared<const cps::LogisticData>(cps::make_logistic_data(c.samples, c.features, c.data_seed));
  for (std::size_t r = 0; r < n; ++r) {
    core::train::ReplicaConfig s;
    s.replica = static_cast<std::int32_t>(r);
    s.ar = plan;
    s.members = run.addrs;
    s.job = "apiary.sim.allreduce";
    s.initial = cps::logistic_initial(c.features);
    s.optimizer = c.optimizer;
    // A collective waits for the others' parts a quarter of call_timeout, each call half of it.
    s.exchange_timeout = c.call_timeout / 4;
    s.label = "all-reduce replica";
    TrainerSettings t;
    t.replicas = n;
    t.data = data;
    t.batch = c.batch;
    t.steps = c.steps;
    t.compute = c.compute + (r + 1 == n ? c.straggler : core::Duration::zero());
    t.full_loss = r == 0;
    auto host = ReplicaHost::create(s, std::move(t));
    if (!host) return host.error();
    run.replicas.push_back(host->get());
    if (auto added = run.world.add_node(run.addrs[r], std::move(*host)); !added) return added.error();
    if (auto st = run.world.start_node(run.addrs[r], TimePoint{}); !st) return st.error();
  }
  return ok_status();
}

/// Kills `victim`; after `detection` every live replica sees its connection to it break
/// (the World's failure detector).
void kill(ArRun& run, const core::PeerAddr& victim, core::Duration detection) {
  run.world.set_peer_down_detection(detection);
  (void)run.world.kill_node(victim, run.world.now());
}

void collect(const ArRun& run, const PsScenarioConfig& c, const cc::ArPlan& plan, PsScenarioReport& report) {
  const std::size_t n = run.replicas.size();
  std::vector<const std::vector<PsReplicaStep>*> steps;
  for (const auto* host : run.replicas) steps.push_back(&host->steps());
  report.steps = step_reports(steps, c.steps);
  for (std::size_t r = 0; r < n; ++r) {
    const auto* host = run.replicas[r];
    PsReplicaOutcome o;
    o.replica = static_cast<std::int32_t>(r);
    o.device = plan.replicas[r];
    o.finished = host->finished();
    o.killed = run.world.killed(run.addrs[r]);
    if (host->error()) o.error = host->error()->what();
    o.steps = static_cast<std::int64_t>(host->steps().size());
    if (o.finished) {
      o.final_version = c.steps;
      o.final_parameters = host->parameters();
    }
    o.end = host->end_time();
    report.replicas.push_back(std::move(o));
  }
}

}  // namespace

Result<PsScenarioReport> run_ar_scenario(const PsScenarioConfig& c) {
  if (auto st = validate(c); !st) return st.error();
  if (c.kill_ps_at >= 0) {
    return make_error(errc::invalid_argument,
                      "kill_ps_at (--kill-ps-at): expected -1 for an all-reduce strategy (it has no PS devices), got "
                      "{}; kill a replica instead",
                      c.kill_ps_at);
  }
  cc::ArOptions options;
  // The simulator models the network, not GPUs: a NCCL spec runs as its ring (the plan
  // notes it), as on a cluster without GPUs.
  auto item = cps::logistic_graph_item(c.features);
  for (const auto& name : c.sparse_variables) {
    auto var =
        std::find_if(item.variables.begin(), item.variables.end(), [&](const auto& v) { return v.name == name; });
    if (var == item.variables.end()) {
      return make_error(errc::invalid_argument,
                        "sparse_variables: expected a variable of the model ({} or {}), got '{}'",
                        cps::k_logreg_weights, cps::k_logreg_bias, name);
    }
    var->sparse = true;
  }
  auto plan = cc::plan_allreduce(c.strategy, item, options);
  if (!plan) return plan.error();
  if (plan->replicas.empty()) {
    return make_error(errc::invalid_argument, "strategy: expected at least one replica, got none");
  }
  auto shared_plan = std::make_shared<const cc::ArPlan>(std::move(*plan));

  auto run = std::make_unique<ArRun>(c.seed);
  auto rule = dht_link_rule(c.seed, c.min_latency, c.max_latency, 0.0);
  if (!rule) return rule.error();
  run->world.network().set_rule(std::move(rule.value()));
  if (auto st = add_replicas(*run, c, shared_plan); !st) return st.error();

  PsScenarioReport report;
  report.seed = c.seed;
  report.mode = mode_of(*shared_plan);
  drive_replicas(
      run->world, run->replicas, run->addrs, core::PeerAddr{},
      [&](const core::PeerAddr& victim) { kill(*run, victim, c.failure_detection); },
      [](const ReplicaHost& r) { return r.id(); }, c, report);
  collect(*run, c, *shared_plan, report);
  record_world(run->world, report);
  return report;
}

}  // namespace apiary::sim::scenarios
