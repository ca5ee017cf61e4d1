#include "sim/scenarios/ps_scenario.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "core/collective/ar_plan.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/ps/plan.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/validate.hpp"
#include "sim/scenarios/ar_scenario.hpp"
#include "sim/scenarios/dht_swarm.hpp"
#include "sim/scenarios/mixed_scenario.hpp"
#include "sim/scenarios/ps_host.hpp"
#include "sim/scenarios/ps_proxy_host.hpp"

namespace apiary::sim::scenarios {

namespace cps = core::ps;
using core::TimePoint;

Status validate(const PsScenarioConfig& c) {
  auto bad = [](const char* field, const std::string& got, const char* want) {
    return make_error(errc::invalid_argument, "expected {} {}, got {}; fix the scenario config", field, want, got);
  };
  auto ns = [](core::Duration d) { return fmt::format("{} ns", d.count()); };
  if (c.features < 1) return bad("features", "0", ">= 1");
  if (c.samples < 1) return bad("samples", "0", ">= 1");
  if (c.batch < 1) return bad("batch", "0", ">= 1");
  if (c.steps < 0) return bad("steps", std::to_string(c.steps), ">= 0");
  if (c.min_latency < core::Duration::zero() || c.max_latency < c.min_latency) {
    return bad("latencies", ns(c.min_latency) + "-" + ns(c.max_latency), "0 <= min <= max");
  }
  if (c.compute < core::Duration::zero()) return bad("compute", ns(c.compute), ">= 0");
  if (c.straggler < core::Duration::zero()) return bad("straggler", ns(c.straggler), ">= 0");
  if (c.failure_detection < core::Duration::zero()) return bad("failure_detection", ns(c.failure_detection), ">= 0");
  if (c.call_timeout <= core::Duration::zero()) return bad("call_timeout", ns(c.call_timeout), "> 0");
  if (c.max_time <= core::Duration::zero()) return bad("max_time", ns(c.max_time), "> 0");
  if (c.local_latency < core::Duration::zero()) return bad("local_latency", ns(c.local_latency), ">= 0");
  return ok_status();
}

namespace {

/// The job in one World.
struct Run {
  explicit Run(std::uint64_t seed) : world(seed) {}
  World world;
  std::vector<core::PeerAddr> server_addrs;
  std::vector<PsServerHost*> servers;
  std::vector<core::PeerAddr> replica_addrs;
  std::vector<ReplicaHost*> replicas;
  std::vector<core::PeerAddr> proxy_addrs;
  std::vector<PsProxyHost*> proxies;
  std::vector<PsProxyReport> proxy_reports;
};

/// One PsProxyHost per node whose replicas read proxied shards; fills each replica's pull_via.
Status add_proxies(Run& run, const PsScenarioConfig& c, const cps::TrainingPlan& plan,
                   const std::map<std::string, core::PeerAddr>& servers, std::vector<core::train::ReplicaConfig>& replicas) {
  std::vector<std::size_t> ids;  // shards read through the proxies
  for (std::size_t id = 0; id < plan.shards.size(); ++id) {
    if (plan.shards[id].local_replication) ids.push_back(id);
  }
  if (!c.proxies || ids.empty()) return ok_status();
  std::map<std::string, std::vector<std::size_t>> nodes;  // host -> its replicas
  for (std::size_t r = 0; r < plan.replicas.size(); ++r) {
    auto name = core::strategy::parse_device_name(plan.replicas[r]);
    if (!name) return name.error();
    nodes[name->host].push_back(r);
  }
  std::map<std::string, core::PeerAddr> shards;  // shard name -> its PS
  for (auto id : ids) shards[plan.shards[id].config.variable] = servers.at(plan.shards[id].device);
  for (const auto& [node, local] : nodes) {
    core::PeerAddr addr = "proxy/" + node;
    auto host = std::make_unique<PsProxyHost>(
        cps::ProxyServer(node, shards, static_cast<std::int32_t>(local.front()), c.call_timeout));
    run.proxies.push_back(host.get());
    if (auto added = run.world.add_node(addr, std::move(host)); !added) return added.error();
    if (auto st = run.world.start_node(addr, TimePoint{}); !st) return st.error();
    for (auto r : local) {
      for (auto id : ids) replicas[r].pull_via[id] = addr;
    }
    run.proxy_reports.push_back(PsProxyReport{node, local.size(), ids.size(), 0, 0});
    run.proxy_addrs.push_back(std::move(addr));
  }
  return ok_status();
}

std::string mode_of(const cps::TrainingPlan& plan) {
  if (plan.shards.empty()) return "none";
  const auto& c = plan.shards.front().config;
  if (!c.sync) return "async";
  return c.staleness == 0 ? "BSP" : fmt::format("SSP staleness {}", c.staleness);
}

Status add_hosts(Run& run, const PsScenarioConfig& c, std::shared_ptr<const cps::TrainingPlan> plan) {
  World& world = run.world;
  auto servers = add_ps_servers(world, *plan, c.features, run.server_addrs, run.servers);
  if (!servers) return servers.error();
  const std::map<std::string, core::PeerAddr>& addrs = *servers;
  auto data = std::make_shared<const cps::LogisticData>(cps::make_logistic_data(c.samples, c.features, c.data_seed));
  const auto last = static_cast<std::int32_t>(plan->replicas.size()) - 1;
  std::vector<core::train::ReplicaConfig> settings(plan->replicas.size());
  if (auto st = add_proxies(run, c, *plan, addrs, settings); !st) return st.error();
  for (std::int32_t r = 0; r <= last; ++r) {
    core::train::ReplicaConfig& s = settings[static_cast<std::size_t>(r)];
    s.replica = r;
    s.ps = plan;
    s.servers = addrs;
    s.call_timeout = c.call_timeout;
    TrainerSettings t;
    t.replicas = plan->replicas.size();
    t.data = data;
    t.batch = c.batch;
    t.steps = c.steps;
    t.compute = c.compute + (r == last ? c.straggler : core::Duration::zero());
    t.full_loss = r == 0;
    core::PeerAddr addr = fmt::format("replica/{}/{}", r, plan->replicas[static_cast<std::size_t>(r)]);
    // A replica reaches its node's proxy without crossing the network.
    if (auto via = s.pull_via.begin(); via != s.pull_via.end()) {
      if (auto st = world.network().set_link(addr, via->second, LinkModel{c.local_latency, {}, 0.0}); !st) {
        return st.error();
      }
    }
    auto host = ReplicaHost::create(s, std::move(t));
    if (!host) return host.error();
    run.replicas.push_back(host->get());
    if (auto added = world.add_node(addr, std::move(*host)); !added) return added.error();
    if (auto st = world.start_node(addr, TimePoint{}); !st) return st.error();
    run.replica_addrs.push_back(std::move(addr));
  }
  return ok_status();
}

/// Kills `victim` now; after `detection` every live peer sees its connection to it break
/// (the World's failure detector).
void kill(Run& run, const core::PeerAddr& victim, core::Duration detection) {
  run.world.set_peer_down_detection(detection);
  (void)run.world.kill_node(victim, run.world.now());
}

void collect(const Run& run, const PsScenarioConfig& c, const cps::TrainingPlan& plan, PsScenarioReport& report) {
  const std::size_t n = run.replicas.size();
  std::vector<const std::vector<PsReplicaStep>*> steps;
  for (const auto* host : run.replicas) steps.push_back(&host->steps());
  report.steps = step_reports(steps, c.steps);
  for (std::size_t r = 0; r < n; ++r) {
    const auto* host = run.replicas[r];
    PsReplicaOutcome o;
    o.replica = host->id();
    o.device = plan.replicas[r];
    o.finished = host->finished();
    o.killed = run.world.killed(run.replica_addrs[r]);
    if (host->error()) o.error = host->error()->what();
    o.steps = static_cast<std::int64_t>(host->steps().size());
    o.final_version = host->final_version();
    o.final_parameters = host->parameters();
    o.end = host->end_time();
    report.replicas.push_back(std::move(o));
  }
  for (const auto* server : run.servers) report.ps_pulls += server->role().stats().pulls;
  for (std::size_t i = 0; i < run.proxies.size(); ++i) {
    PsProxyReport p = run.proxy_reports[i];
    p.pulls = run.proxies[i]->role().pulls();
    p.reads = run.proxies[i]->role().reads();
    report.proxies.push_back(std::move(p));
  }
}

}  // namespace

Result<PsScenarioReport> run_ps_scenario(const PsScenarioConfig& c) {
  if (auto st = validate(c); !st) return st.error();
  const auto item = cps::logistic_graph_item(c.features);
  if (auto st = core::strategy::validate(c.strategy, item); !st) {
    return make_error(errc::invalid_argument, "strategy: {} (the model is logistic regression: {} [{}] and {} [1])",
                      st.error().message, cps::k_logreg_weights, c.features, cps::k_logreg_bias);
  }
  // All-reduce strategies have no PS: every replica keeps its own copy (ar_scenario.hpp);
  // mixed ones have both (mixed_scenario.hpp).
  if (core::collective::uses_allreduce(c.strategy)) {
    return uses_ps(c.strategy) ? run_mixed_scenario(c) : run_ar_scenario(c);
  }
  auto plan = cps::plan_training(c.strategy, item, c.optimizer, c.aggregation);
  if (!plan) return plan.error();
  auto shared_plan = std::make_shared<const cps::TrainingPlan>(std::move(*plan));
  if (shared_plan->replicas.empty()) {
    return make_error(errc::invalid_argument, "strategy: expected at least one replica, got none");
  }

  auto run = std::make_unique<Run>(c.seed);
  auto rule = dht_link_rule(c.seed, c.min_latency, c.max_latency, 0.0);
  if (!rule) return rule.error();
  run->world.network().set_rule(std::move(rule.value()));
  if (auto st = add_hosts(*run, c, shared_plan); !st) return st.error();

  PsScenarioReport report;
  report.seed = c.seed;
  report.servers = shared_plan->servers;
  report.shards = shared_plan->shards.size();
  report.mode = mode_of(*shared_plan);
  drive_replicas(
      run->world, run->replicas, run->replica_addrs, run->server_addrs.front(),
      [&](const core::PeerAddr& victim) { kill(*run, victim, c.failure_detection); },
      [](const ReplicaHost& r) { return r.id(); }, c, report);
  collect(*run, c, *shared_plan, report);
  record_world(run->world, report);
  return report;
}

std::vector<PsStepReport> step_reports(const std::vector<const std::vector<PsReplicaStep>*>& replicas,
                                       std::int64_t steps) {
  std::vector<PsStepReport> out;
  const std::size_t n = replicas.size();
  for (std::int64_t s = 0; s < steps; ++s) {
    PsStepReport step;
    step.step = s;
    step.versions.assign(n, -1);
    std::size_t reached = 0;
    for (std::size_t r = 0; r < n; ++r) {
      const auto& steps = *replicas[r];
      if (static_cast<std::int64_t>(steps.size()) <= s) continue;
      const auto& rec = steps[static_cast<std::size_t>(s)];
      ++reached;
      step.versions[r] = rec.version;
      step.batch_loss += rec.batch_loss;
      step.max_time = std::max(step.max_time, rec.time);
      if (r == 0) {
        step.loss = rec.full_loss;
        step.chief_time = rec.time;
      }
    }
    if (reached == 0) break;
    step.batch_loss /= static_cast<double>(reached);
    out.push_back(std::move(step));
  }
  return out;
}

void record_world(const World& world, PsScenarioReport& report) {
  report.trace_hash = world.trace_hash();
  report.virtual_time = world.now();
  report.world = world.stats();
  report.anomalies = world.anomalies().size();
}

std::string format_report(const PsScenarioReport& report) {
  auto ms = [](core::Duration d) { return core::to_seconds(d) * 1e3; };
  std::string out = fmt::format("{} replicas, {} PS devices, {} shards, {}\n", report.replicas.size(),
                                report.servers.size(), report.shards, report.mode);
  for (const auto& s : report.steps) {
    std::string versions;
    for (auto v : s.versions) versions += v < 0 ? " -" : fmt::format(" {}", v);
    const std::string loss = s.loss < 0 ? std::string("-") : fmt::format("{:.6f}", s.loss);
    out += fmt::format("step {:>4}: loss {} batch_loss {:.6f} versions{} step_ms {:.3f} (max {:.3f})\n", s.step, loss,
                       s.batch_loss, versions, ms(s.chief_time), ms(s.max_time));
  }
  for (const auto& r : report.replicas) {
    const char* state = r.finished ? "finished" : r.killed ? "killed" : r.error.empty() ? "running" : "failed";
    out += fmt::format("replica {} ({}): {} after {} steps", r.replica, r.device, state, r.steps);
    if (r.finished || !r.error.empty()) out += fmt::format(" at {:.3f} ms", ms(r.end));
    if (r.finished) out += fmt::format(", final version {}", r.final_version);
    if (!r.error.empty()) out += ": " + r.error;
    out += "\n";
  }
  if (!report.replicas.empty() && report.replicas.front().finished) {
    for (const auto& [name, values] : report.replicas.front().final_parameters) {
      out += "final " + name;
      for (float v : values) out += fmt::format(" {:.9g}", v);
      out += "\n";
    }
  }
  out += fmt::format("pulls:        {} answered by the PS devices", report.ps_pulls);
  for (const auto& p : report.proxies) {
    out += fmt::format("; proxy of {} ({} replicas, {} shards): {} pulls for {} reads", p.node, p.replicas, p.shards,
                       p.pulls, p.reads);
  }
  out += "\n";
  if (!report.killed.empty()) out += "killed:       " + report.killed + "\n";
  if (report.hung) out += "HUNG: replicas still running at the end of the run\n";
  out +=
      fmt::format("virtual time: {:.3f} ms, {} events, {} calls, {} timeouts, anomalies {}\n", ms(report.virtual_time),
                  report.world.events, report.world.calls, report.world.timeouts, report.anomalies);
  out += fmt::format("seed={} trace_hash=0x{:016x}\n", report.seed, report.trace_hash);
  return out;
}

Result<std::map<std::string, core::PeerAddr>> add_ps_servers(World& world, const cps::TrainingPlan& plan,
                                                           std::size_t features, std::vector<core::PeerAddr>& addrs,
                                                           std::vector<PsServerHost*>& hosts) {
  auto initial = cps::initial_pieces(plan, cps::logistic_initial(features));
  if (!initial) return initial.error();
  std::map<std::string, core::PeerAddr> by_device;
  for (const auto& device : plan.servers) {
    std::map<std::string, cps::Shard> shards;
    for (auto id : plan.shards_on(device)) {
      auto shard = cps::Shard::create(plan.shards[id].config, (*initial)[id]);
      if (!shard) return shard.error();
      shards.emplace(plan.shards[id].config.variable, std::move(*shard));
    }
    core::PeerAddr addr = "ps/" + device;
    auto host = std::make_unique<PsServerHost>(cps::ShardServer(device, std::move(shards)));
    hosts.push_back(host.get());
    if (auto added = world.add_node(addr, std::move(host)); !added) return added.error();
    if (auto st = world.start_node(addr, core::TimePoint{}); !st) return st.error();
    by_device[device] = addr;
    addrs.push_back(std::move(addr));
  }
  return by_device;
}

}  // namespace apiary::sim::scenarios
