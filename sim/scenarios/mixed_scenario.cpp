#include "sim/scenarios/mixed_scenario.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "core/collective/ar_plan.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/ps/plan.hpp"
#include "core/strategy/resource_spec.hpp"
#include "sim/scenarios/dht_swarm.hpp"
#include "sim/scenarios/replica_host.hpp"
#include "sim/scenarios/ps_host.hpp"

namespace apiary::sim::scenarios {

namespace cc = core::collective;
namespace cps = core::ps;
using core::TimePoint;

namespace {

/// The job in one World.
struct MixedRun {
  explicit MixedRun(std::uint64_t seed) : world(seed) {}
  World world;
  std::vector<core::PeerAddr> server_addrs;
  std::vector<PsServerHost*> servers;
  std::vector<core::PeerAddr> replica_addrs;
  std::vector<ReplicaHost*> replicas;
};

/// "mixed: PS [w (sparse)] BSP; all-reduce, 1 collective per step: group 0 [b]".
std::string mode_of(const cps::TrainingPlan& ps, const cc::ArPlan& ar) {
  std::string on_ps;
  for (const auto& v : ps.variables) {
    on_ps += fmt::format("{}{}{}", on_ps.empty() ? "" : ", ", v.name, v.sparse ? " (sparse)" : "");
  }
  const auto& first = ps.shards.front().config;
  const std::string sync =
      !first.sync ? "async" : first.staleness == 0 ? "BSP" : fmt::format("SSP staleness {}", first.staleness);
  std::string groups;
  for (const auto& g : ar.groups) {
    groups += fmt::format("{}group {} [", groups.empty() ? "" : ", ", g.group);
    for (std::size_t k = 0; k < g.tensors.size(); ++k) groups += (k == 0 ? "" : ", ") + ar.tensors[g.tensors[k]].name;
    groups += "]";
  }
  for (const auto& sp : ar.sparse) groups += fmt::format("{}gather [{} sparse]", groups.empty() ? "" : ", ", sp.name);
  const std::size_t collectives = ar.groups.size() + (ar.sparse.empty() ? 0 : 1);
  return fmt::format("mixed: PS [{}] {}; all-reduce, {} collectives per step: {}", on_ps, sync, collectives, groups);
}

Status add_hosts(MixedRun& run, const PsScenarioConfig& c, const std::shared_ptr<const cps::TrainingPlan>& ps,
                 const std::shared_ptr<const cc::ArPlan>& ar) {
  World& world = run.world;
  auto servers = add_ps_servers(world, *ps, c.features, run.server_addrs, run.servers);
  if (!servers) return servers.error();
  const std::map<std::string, core::PeerAddr>& addrs = *servers;
  const std::size_t n = ar->replicas.size();
  for (std::size_t r = 0; r < n; ++r) run.replica_addrs.push_back(fmt::format("replica/{}/{}", r, ar->replicas[r]));
  auto data = std::make_shared<const cps::LogisticData>(cps::make_logistic_data(c.samples, c.features, c.data_seed));
  for (std::size_t r = 0; r < n; ++r) {
    core::train::ReplicaConfig s;
    s.replica = static_cast<std::int32_t>(r);
    s.ps = ps;
    s.ar = ar;
    s.servers = addrs;
    s.members = run.replica_addrs;
    s.job = "apiary.sim.mixed";
    s.initial = cps::logistic_initial(c.features);
    s.optimizer = c.optimizer;
    s.call_timeout = c.call_timeout;
    // A collective waits for the others' parts a quarter of call_timeout, each call half of it.
    s.exchange_timeout = c.call_timeout / 4;
    s.label = "mixed replica";
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
    if (auto added = world.add_node(run.replica_addrs[r], std::move(*host)); !added) return added.error();
    if (auto st = world.start_node(run.replica_addrs[r], TimePoint{}); !st) return st.error();
  }
  return ok_status();
}

/// Kills `victim` now; after `detection` every live peer sees its connection to it break
/// (the World's failure detector).
void kill(MixedRun& run, const core::PeerAddr& victim, core::Duration detection) {
  run.world.set_peer_down_detection(detection);
  (void)run.world.kill_node(victim, run.world.now());
}

void collect(const MixedRun& run, const PsScenarioConfig& c, const cc::ArPlan& ar, PsScenarioReport& report) {
  std::vector<const std::vector<PsReplicaStep>*> steps;
  for (const auto* host : run.replicas) steps.push_back(&host->steps());
  report.steps = step_reports(steps, c.steps);
  for (std::size_t r = 0; r < run.replicas.size(); ++r) {
    const auto* host = run.replicas[r];
    PsReplicaOutcome o;
    o.replica = host->id();
    o.device = ar.replicas[r];
    o.finished = host->finished();
    o.killed = run.world.killed(run.replica_addrs[r]);
    if (host->error()) o.error = host->error()->what();
    o.steps = static_cast<std::int64_t>(host->steps().size());
    if (o.finished) {
      o.final_version = host->final_version();
      o.final_parameters = host->parameters();
    }
    o.end = host->end_time();
    report.replicas.push_back(std::move(o));
  }
  for (const auto* server : run.servers) report.ps_pulls += server->role().stats().pulls;
}

}  // namespace

bool uses_ps(const pb::autodist::Strategy& strategy) {
  for (const auto& node : strategy.node_config()) {
    if (node.has_pssynchronizer()) return true;
    for (const auto& part : node.part_config()) {
      if (part.has_pssynchronizer()) return true;
    }
  }
  return false;
}

Result<PsScenarioReport> run_mixed_scenario(const PsScenarioConfig& c) {
  if (auto st = validate(c); !st) return st.error();
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
  cc::ArOptions options;
  options.allow_ps = true;
  // The simulator models the network, not GPUs: a NCCL spec runs as its ring (the plan
  // notes it), as on a cluster without GPUs.
  auto ar = cc::plan_allreduce(c.strategy, item, options);
  if (!ar) return ar.error();
  auto ps = cps::plan_training(cc::ps_part(c.strategy), item, c.optimizer, c.aggregation);
  if (!ps) return ps.error();
  auto ar_plan = std::make_shared<const cc::ArPlan>(std::move(*ar));
  auto ps_plan = std::make_shared<const cps::TrainingPlan>(std::move(*ps));

  auto run = std::make_unique<MixedRun>(c.seed);
  auto rule = dht_link_rule(c.seed, c.min_latency, c.max_latency, 0.0);
  if (!rule) return rule.error();
  run->world.network().set_rule(std::move(rule.value()));
  if (auto st = add_hosts(*run, c, ps_plan, ar_plan); !st) return st.error();

  PsScenarioReport report;
  report.seed = c.seed;
  report.servers = ps_plan->servers;
  report.shards = ps_plan->shards.size();
  report.mode = mode_of(*ps_plan, *ar_plan);
  drive_replicas(
      run->world, run->replicas, run->replica_addrs, run->server_addrs.front(),
      [&](const core::PeerAddr& victim) { kill(*run, victim, c.failure_detection); },
      [](const ReplicaHost& r) { return r.id(); }, c, report);
  collect(*run, c, *ar_plan, report);
  record_world(run->world, report);
  return report;
}

}  // namespace apiary::sim::scenarios
