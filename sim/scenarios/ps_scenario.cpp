#include "sim/scenarios/ps_scenario.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <set>
#include <utility>

#include "core/collective/ar_plan.hpp"
#include "core/collective/synchronizer.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/ps/values_text.hpp"
#include "core/ps/plan.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/validate.hpp"
#include "sim/faults.hpp"
#include "sim/scenarios/dht_swarm.hpp"
#include "sim/scenarios/ps_host.hpp"
#include "sim/scenarios/ps_proxy_host.hpp"
#include "sim/scenarios/swarm_size.hpp"

namespace apiary::sim::scenarios {

namespace cc = core::collective;
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
  if (auto fits = cps::check_logistic_data_size(c.samples, c.features, c.density); !fits) return fits;
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
  if (c.restart_ps_after >= core::Duration::zero() && c.kill_ps_at < 0) {
    return bad("kill_ps_at", std::to_string(c.kill_ps_at), ">= 0 with restart_ps_after (the PS to start again)");
  }
  if (c.restart_ps_after >= core::Duration::zero() && c.ps_restart_wait <= core::Duration::zero()) {
    return bad("ps_restart_wait", ns(c.ps_restart_wait), "> 0 with restart_ps_after (the replicas wait for the PS)");
  }
  if (c.save_every < 0) return bad("save_every", std::to_string(c.save_every), ">= 0");
  if (c.restart_replica_after >= core::Duration::zero() && c.kill_replica_at < 0) {
    return bad("kill_replica_at", std::to_string(c.kill_replica_at), ">= 0 with restart_replica_after (the replica to start again)");
  }
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
  std::vector<core::train::ReplicaConfig> replica_configs;  ///< to start one again
  std::vector<TrainerSettings> trainer_settings;
  std::vector<core::PeerAddr> proxy_addrs;
  std::vector<PsProxyHost*> proxies;
  std::vector<std::size_t> proxy_hosts;  ///< the replica whose process each proxy lives in (its node's first)
  std::vector<PsProxyReport> proxy_reports;
  std::shared_ptr<const cps::TrainingPlan> plan;  ///< the PS variables' (null: none)
  std::shared_ptr<SimCheckpoint> checkpoint = std::make_shared<SimCheckpoint>();  ///< the chief's latest
  std::string resumed;  ///< PsScenarioReport::resumed
  std::set<std::string> machines;  ///< with a profile: the hosts' machines
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
    core::PeerAddr addr = swarm_address(run.proxy_addrs.size(), k_proxy_port);
    auto host = std::make_unique<PsProxyHost>(
        cps::ProxyServer(node, shards, static_cast<std::int32_t>(local.front()), c.call_timeout));
    run.proxies.push_back(host.get());
    if (auto added = run.world.add_node(addr, std::move(host)); !added) return added.error();
    if (auto st = run.world.start_node(addr, TimePoint{}); !st) return st.error();
    for (auto r : local) {
      for (auto id : ids) replicas[r].pull_via[id] = addr;
    }
    run.proxy_hosts.push_back(local.front());
    run.proxy_reports.push_back(PsProxyReport{node, local.size(), ids.size(), 0, 0});
    run.proxy_addrs.push_back(std::move(addr));
  }
  return ok_status();
}

/// "BSP", "SSP staleness k" or "async" (of the first shard).
std::string mode_of(const cps::TrainingPlan& plan) {
  if (plan.shards.empty()) return "none";
  const auto& c = plan.shards.front().config;
  if (!c.sync) return "async";
  return c.staleness == 0 ? "BSP" : fmt::format("SSP staleness {}", c.staleness);
}

/// "all-reduce, 2 collectives per step: group 0 ring [w NoneCompressor], ..." (`codecs`:
/// with each tensor's transport and compressor).
std::string mode_of(const cc::ArPlan& plan, bool codecs) {
  std::string groups;
  for (const auto& g : plan.groups) {
    groups += fmt::format("{}group {}{} [", groups.empty() ? "" : ", ", g.group,
                          codecs ? " " + std::string(cc::to_string(g.transport)) : std::string{});
    for (std::size_t k = 0; k < g.tensors.size(); ++k) {
      const auto& t = plan.tensors[g.tensors[k]];
      groups += fmt::format("{}{}{}", k == 0 ? "" : ", ", t.name,
                            codecs ? " " + std::string(cc::to_string(t.compressor)) : std::string{});
    }
    groups += "]";
  }
  for (const auto& sp : plan.sparse) groups += fmt::format("{}gather [{} sparse]", groups.empty() ? "" : ", ", sp.name);
  const std::size_t collectives = plan.groups.size() + (plan.sparse.empty() ? 0 : 1);
  return fmt::format("all-reduce, {} collectives per step: {}", collectives, groups);
}

/// "mixed: PS [w (sparse)] BSP; all-reduce, 1 collectives per step: group 0 [b]".
std::string mode_of(const cps::TrainingPlan& ps, const cc::ArPlan& ar) {
  std::string on_ps;
  for (const auto& v : ps.variables) {
    on_ps += fmt::format("{}{}{}", on_ps.empty() ? "" : ", ", v.name, v.sparse ? " (sparse)" : "");
  }
  return fmt::format("mixed: PS [{}] {}; {}", on_ps, mode_of(ps), mode_of(ar, false));
}

/// The job's plans: the PS variables' (null for an all-reduce strategy), the all-reduced
/// ones' (null for a PS strategy), or both (a mixed strategy).
struct Plans {
  std::shared_ptr<const cps::TrainingPlan> ps;
  std::shared_ptr<const cc::ArPlan> ar;
  std::vector<std::string> replicas;  ///< replica devices, rank order
};

Result<Plans> plans_of(const PsScenarioConfig& c) {
  auto item = cps::logistic_graph_item(c.features);
  if (auto st = core::strategy::validate(c.strategy, item); !st) {
    return make_error(errc::invalid_argument, "strategy: {} (the model is logistic regression: {} [{}] and {} [1])",
                      st.error().message, cps::k_logreg_weights, c.features, cps::k_logreg_bias);
  }
  Plans out;
  const bool all_reduce = cc::uses_allreduce(c.strategy);
  const bool ps = !all_reduce || uses_ps(c.strategy);
  if (all_reduce) {
    if (!ps && c.kill_ps_at >= 0) {
      return make_error(errc::invalid_argument,
                        "kill_ps_at (--kill-ps-at): expected -1 for an all-reduce strategy (it has no PS devices), "
                        "got {}; kill a replica instead",
                        c.kill_ps_at);
    }
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
    options.allow_ps = ps;
    // The simulator models the network, not GPUs: a NCCL spec runs as its ring (the plan
    // notes it), as on a cluster without GPUs.
    auto ar = cc::plan_allreduce(c.strategy, item, options);
    if (!ar) return ar.error();
    out.replicas = ar->replicas;
    out.ar = std::make_shared<const cc::ArPlan>(std::move(*ar));
  }
  if (ps) {
    auto plan = cps::plan_training(all_reduce ? cc::ps_part(c.strategy) : c.strategy, item, c.optimizer,
                                   c.aggregation);
    if (!plan) return plan.error();
    out.replicas = plan->replicas;
    out.ps = std::make_shared<const cps::TrainingPlan>(std::move(*plan));
  }
  if (out.replicas.empty()) return make_error(errc::invalid_argument, "strategy: expected at least one replica, got none");
  return out;
}

/// The PS devices (if any), their node proxies (a PS strategy's shards with
/// local_replication) and one ReplicaHost per replica, all started at time 0.
Status add_hosts(Run& run, const PsScenarioConfig& c, const Plans& plans) {
  World& world = run.world;
  std::map<std::string, core::PeerAddr> servers;
  if (plans.ps) {
    run.plan = plans.ps;
    auto added = add_ps_servers(world, *plans.ps, c.features, run.server_addrs, run.servers, c.drop_lost_after);
    if (!added) return added.error();
    servers = std::move(*added);
  }
  const std::size_t n = plans.replicas.size();
  for (std::size_t r = 0; r < n; ++r) run.replica_addrs.push_back(swarm_address(r, k_replica_port));
  auto data = std::make_shared<const cps::LogisticData>(
      cps::make_logistic_data(c.samples, c.features, c.data_seed, c.density));
  std::vector<core::train::ReplicaConfig> configs(n);
  if (plans.ps && !plans.ar) {
    if (auto st = add_proxies(run, c, *plans.ps, servers, configs); !st) return st.error();
  }
  for (std::size_t r = 0; r < n; ++r) {
    core::train::ReplicaConfig& s = configs[r];
    s.replica = static_cast<std::int32_t>(r);
    s.ps = plans.ps;
    s.ar = plans.ar;
    s.servers = servers;
    if (plans.ar) s.members = run.replica_addrs;
    s.job = plans.ps ? "apiary.sim.mixed" : "apiary.sim.allreduce";
    s.initial = cps::logistic_initial(c.features);
    s.optimizer = c.optimizer;
    s.call_timeout = c.call_timeout;
    // A collective waits for the others' parts a quarter of call_timeout, each call half of it.
    s.exchange_timeout = c.call_timeout / 4;
    s.label = !plans.ar ? "replica" : plans.ps ? "mixed replica" : "all-reduce replica";
    // RING groups stream on the runner, as replica processes run them (api/replica.cpp).
    s.stream_ring = true;
    if (plans.ps && c.restart_ps_after >= core::Duration::zero()) {
      // As `apiary ps --ps-restart-wait-ms` keeps them: the steps since the checkpoint.
      std::int64_t staleness = 0;
      for (const auto& shard : plans.ps->shards) staleness = std::max(staleness, shard.config.staleness);
      s.ps_restart_wait = c.ps_restart_wait;
      s.replay_steps = c.save_every > 0 ? 2 * c.save_every + staleness + 2 : c.steps;
    }
    TrainerSettings t;
    t.replicas = n;
    t.data = data;
    t.batch = c.batch;
    t.steps = c.steps;
    // With a profile the gradient's work is charged as processor time instead.
    t.compute = (c.profile ? core::Duration::zero() : c.compute) + (r + 1 == n ? c.straggler : core::Duration::zero());
    t.full_loss = r == 0;
    t.count_touched = c.profile && ((plans.ar && !plans.ar->sparse.empty()) ||
                                    (plans.ps && std::any_of(plans.ps->shards.begin(), plans.ps->shards.end(),
                                                             [](const auto& s) { return s.config.sparse; })));
    if (r == 0) {
      t.save_every = c.save_every;
      t.checkpoint = run.checkpoint;
    }
    const core::PeerAddr& addr = run.replica_addrs[r];
    // A replica reaches its node's proxy without crossing the network; with a profile, as
    // `apiary ps` runs a process per replica, only the replica whose process hosts it.
    const bool hosts_proxy =
        std::find(run.proxy_hosts.begin(), run.proxy_hosts.end(), r) != run.proxy_hosts.end();
    if (auto via = s.pull_via.begin(); via != s.pull_via.end() && (!c.profile || hosts_proxy)) {
      if (auto st = world.network().set_link(addr, via->second, LinkModel{c.local_latency, {}, 0.0}); !st) {
        return st.error();
      }
    }
    run.replica_configs.push_back(s);
    run.trainer_settings.push_back(t);
    auto host = ReplicaHost::create(s, std::move(t));
    if (!host) return host.error();
    run.replicas.push_back(host->get());
    if (auto added = world.add_node(addr, std::move(*host)); !added) return added.error();
    if (auto st = world.start_node(addr, TimePoint{}); !st) return st.error();
  }
  // A node's proxy runs on its first replica's gateway, in that process.
  for (std::size_t i = 0; i < run.proxy_addrs.size(); ++i) {
    if (auto st = world.share_process(run.proxy_addrs[i], run.replica_addrs[run.proxy_hosts[i]]); !st) return st;
  }
  return ok_status();
}

/// The host name of device `device` ("localhost:CPU:0" -> "localhost"): its machine.
std::string machine_of(const std::string& device) {
  auto name = core::strategy::parse_device_name(device);
  return name ? name->host : device;
}

/// With a profile: every host on its device's machine, charged what its events cost.
Status place_on_machines(Run& run, const PsScenarioConfig& c, const Plans& plans) {
  const CostProfile& p = *c.profile;
  World& world = run.world;
  std::set<std::string>& machines = run.machines;
  auto machine = [&](const std::string& device) -> Result<std::string> {
    const std::string m = machine_of(device);
    if (machines.insert(m).second) {
      if (auto st = world.add_machine(m, p.cores, CoreSharing::time_slices); !st) return st.error();
    }
    return m;
  };
  // Messages: each one received and sent costs its processor time at this end, and one
  // that comes to a node with nothing to do the waking of its threads (aside: the
  // message waits for none of it beyond the link's latency, which has it); what stays in
  // its process (a proxy and its host replica) costs no transport.
  auto messages = [p, &world](const Event& in, const core::Effects& out) {
    const Sent sent = sent_by(out, static_cast<std::size_t>(p.large_message_bytes),
                              [&world, &in](const core::Effect& e) { return world.stays_in_process(in, e); });
    const bool received = !in.local && (in.kind == EventKind::request || in.kind == EventKind::response ||
                                        in.kind == EventKind::call_message || in.kind == EventKind::reply_message);
    CpuCharge charge(received ? p.message(in.payload.ok() ? in.payload->size() : 0) : core::Duration::zero());
    charge.before += p.sending(sent);
    if (received && in.woke) charge.aside = CostProfile::work(1.0, p.idle_message_us * 1e3);
    return charge;
  };
  // The share of w's rows one replica's batch touches, and that of all the replicas'
  // batches of a step together (each sample's columns drawn uniformly; dense data: all).
  const double nonzeros = c.density < 1.0 ? static_cast<double>(cps::logistic_nonzeros(c.features, c.density))
                                          : static_cast<double>(c.features);
  const auto touched = [&c, nonzeros](std::size_t samples) {
    return 1.0 - std::pow(1.0 - nonzeros / static_cast<double>(c.features), static_cast<double>(samples));
  };
  const double touched_one = touched(c.batch), touched_all = touched(c.batch * plans.replicas.size());
  // Each PS and replica process (a proxy lives in its replica's) spends its idle load.
  const core::Duration idle_load = CostProfile::work(1.0, p.idle_cpu_us_per_s * 1e3);
  auto place = [&world, idle_load](const core::PeerAddr& addr, const std::string& m, CpuCost cost) -> Status {
    if (auto st = world.place(addr, m, std::move(cost)); !st) return st;
    return world.set_idle_load(addr, idle_load);
  };
  if (plans.ps) {
    for (std::size_t i = 0; i < plans.ps->servers.size(); ++i) {
      auto m = machine(plans.ps->servers[i]);
      if (!m) return m.error();
      // The step's work: each update applied since the last event, over its shard.
      auto seen = std::make_shared<std::map<std::string, std::int64_t>>();
      auto cost = [messages, p, &run, i, seen, touched_one, touched_all](const Event& in, const core::Effects& out) {
        CpuCharge cost = messages(in, out);
        const auto& server = run.servers[i]->role();
        for (auto id : run.plan->shards_on(run.plan->servers[i])) {
          const auto& config = run.plan->shards[id].config;
          const cps::Shard* shard = server.shard(config.variable);
          if (shard == nullptr) continue;
          auto& last = (*seen)[config.variable];
          if (shard->version() < last) last = shard->version();  // a PS started again
          const auto updates = static_cast<double>(shard->version() - last);
          last = shard->version();
          if (updates <= 0) continue;
          // A sparse shard sums and updates the rows the step's pushes touched.
          const double values = static_cast<double>(config.layout.size());
          const double update = config.optimizer.kind == cps::OptimizerKind::adam ? p.adam_ns : p.sgd_ns;
          const double pushes = static_cast<double>(config.replica_hosts.size());
          cost.before += config.sparse ? CostProfile::work(updates * values * touched_all, update) +
                                             CostProfile::work(updates * values * touched_one * pushes, p.sum_ns)
                                       : CostProfile::work(updates * values, update + p.sum_ns * pushes);
        }
        return cost;
      };
      if (auto st = place(run.server_addrs[i], *m, cost); !st) return st;
    }
  }
  const std::size_t features = c.features;
  // A replica's own work each step on its all-reduced tensors, by their compressors, and
  // on its dense PS variables; on its sparse one (w), a part per value and one per value
  // its step's gradient touched (sparse data: of every replica's batch, all-reduced),
  // which the simulated trainer counts (a fitted sample's error is exactly 0, and a
  // gradient of such samples touches nothing).
  core::Duration own_work = core::Duration::zero();
  double sparse_per_value = 0.0, per_touched = 0.0;
  if (plans.ar) {
    for (const auto& t : plans.ar->tensors) {
      const double ns = t.compressor == cc::CompressorKind::horovod      ? p.allreduce_fp16_ns
                        : t.compressor == cc::CompressorKind::horovod_ef ? p.allreduce_fp16_ef_ns
                                                                         : p.allreduce_ns;
      own_work += CostProfile::work(static_cast<double>(t.size), ns);
    }
    for (const auto& sp : plans.ar->sparse) {  // the rows it touched, of every replica's batch gathered
      const double values = static_cast<double>(sp.rows) * static_cast<double>(sp.row_width);
      sparse_per_value += c.density < 1.0 ? values * p.allreduce_sparse_base_ns : 0.0;
      per_touched += c.density < 1.0 ? static_cast<double>(plans.replicas.size()) * p.allreduce_sparse_row_ns
                                     : p.allreduce_sparse_ns;
    }
    // A partitioned variable that does not travel whole: cut and put back together.
    auto sync = cc::Synchronizer::create(*plans.ar);
    if (!sync) return sync.error();
    for (const auto& t : plans.ar->tensors) {
      if (plans.ar->variables[t.variable].shards.size() > 1 && !sync->whole(t.variable)) {
        own_work += CostProfile::work(static_cast<double>(t.size), p.partition_ns);
      }
    }
  }
  if (plans.ps) {  // the PS shards' wire work (a sparse one's: its batch's rows), charged to the replica
    for (const auto& shard : plans.ps->shards) {
      const double values = static_cast<double>(shard.config.layout.size());
      if (!shard.config.sparse) {
        own_work += CostProfile::work(values, p.ps_ns);
      } else {  // a shard's share of w's touched rows
        const double share = values / static_cast<double>(features);
        sparse_per_value += c.density < 1.0 ? values * p.ps_sparse_base_ns : 0.0;
        per_touched += share * (c.density < 1.0 ? p.ps_sparse_row_ns : p.ps_sparse_ns);
      }
    }
  }
  // On sparse data the gradient and the loss read the values other than zero.
  const bool sparse = c.density < 1.0;
  const core::Duration gradient = sparse ? p.sparse_gradient(c.batch * static_cast<std::size_t>(nonzeros), features)
                                         : p.gradient(c.batch, features);
  const core::Duration loss =
      CostProfile::work(static_cast<double>(c.samples) * nonzeros, sparse ? p.sparse_loss_ns : p.loss_ns);
  const core::Duration fixed = own_work + CostProfile::work(1.0, sparse_per_value);
  for (std::size_t r = 0; r < run.replicas.size(); ++r) {
    auto m = machine(plans.replicas[r]);
    if (!m) return m.error();
    // A step computed in this event: its gradient, its all-reduce work (and the chief's
    // loss over the data). What the event sends leaves first: the step begins once the
    // last one's exchange is answered (the answers this replica owes the others among
    // them), and its work holds only what the replica does next.
    auto steps = std::make_shared<std::size_t>(0);
    auto cost = [messages, &run, r, steps, gradient, loss, fixed, per_touched](const Event& in,
                                                                               const core::Effects& out) -> CpuCharge {
      core::Duration step = core::Duration::zero();
      const auto& records = run.replicas[r]->steps();
      for (std::size_t s = *steps; s < records.size(); ++s) {
        step += gradient + fixed + CostProfile::work(static_cast<double>(records[s].touched), per_touched);
        if (r == 0) step += loss;
      }
      *steps = records.size();
      CpuCharge charge = messages(in, out);
      charge.after += step;
      return charge;
    };
    if (auto st = place(run.replica_addrs[r], *m, cost); !st) return st;
  }
  for (std::size_t i = 0; i < run.proxy_addrs.size(); ++i) {
    auto m = machine(run.proxy_reports[i].node);
    if (!m) return m.error();
    if (auto st = world.place(run.proxy_addrs[i], *m, messages); !st) return st;
  }
  return ok_status();
}

void collect(const Run& run, const PsScenarioConfig& c, const Plans& plans, PsScenarioReport& report) {
  std::vector<const std::vector<PsReplicaStep>*> steps;
  for (const auto* host : run.replicas) steps.push_back(&host->steps());
  report.steps = step_reports(steps, c.steps);
  for (std::size_t r = 0; r < run.replicas.size(); ++r) {
    const auto* host = run.replicas[r];
    PsReplicaOutcome o;
    o.replica = host->id();
    o.device = plans.replicas[r];
    o.finished = host->finished();
    o.killed = run.world.killed(run.replica_addrs[r]);
    if (host->error()) o.error = host->error()->what();
    o.steps = static_cast<std::int64_t>(host->steps().size());
    if (!host->steps().empty()) o.first_step = host->steps().front().step;
    if (o.finished) {
      o.final_version = host->final_version();
      o.final_parameters = host->parameters();
    }
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

/// The run's faults, on the config's cue: the first PS device (when there is one) once
/// the chief (replica 0) began step kill_ps_at, the last replica once it began step
/// kill_replica_at (a replica "begins step s" once it has the parameters of step s).
std::vector<CuedKill> cued_kills(Run& run, const PsScenarioConfig& c, const PsScenarioReport& report) {
  std::vector<CuedKill> out;
  const World& world = run.world;
  const ReplicaHost* chief = run.replicas.front();
  const ReplicaHost* last = run.replicas.back();
  auto at = [&world](const std::string& what, std::int64_t step) {
    return fmt::format("{} at step {} ({:.3f} ms)", what, step, core::to_seconds(world.now()) * 1e3);
  };
  if (!run.server_addrs.empty() && c.kill_ps_at >= 0) {
    const std::string device = report.servers.front();
    out.push_back(CuedKill{run.server_addrs.front(),
                           [chief, &c] { return static_cast<std::int64_t>(chief->steps().size()) > c.kill_ps_at; },
                           [at, device, &c] { return at("PS " + device, c.kill_ps_at); }});
    if (c.restart_ps_after >= core::Duration::zero()) {
      // A fresh process of the PS device from the chief's latest checkpoint (the job's
      // start without one), as `apiary ps --resume` starts.
      out.back().then = [&run, &c, device](TimePoint killed) {
        const SimCheckpoint& k = *run.checkpoint;
        const bool any = k.step >= 0;
        auto fresh = ps_server(*run.plan, device, any ? k.values : cps::logistic_initial(c.features),
                               any ? k.states : std::map<std::string, cps::Optimizer::State>{}, c.drop_lost_after,
                               any ? k.step : 0);
        const TimePoint at = killed + c.restart_ps_after;
        if (!fresh) {
          run.resumed = fmt::format("PS {} could not start again: {}", device, fresh.error().message);
          return;
        }
        run.servers.front() = fresh->get();
        run.resumed = fmt::format("PS {} started again at {:.3f} ms from the checkpoint of step {}", device,
                                  core::to_seconds(at) * 1e3, any ? k.step : 0);
        if (auto st = restart_at(run.world, run.server_addrs.front(), at, std::move(*fresh)); !st) {
          run.resumed = fmt::format("PS {} could not start again: {}", device, st.error().message);
        }
      };
    }
  }
  if (c.kill_replica_at >= 0) {
    out.push_back(CuedKill{run.replica_addrs.back(),
                           [last, &c] {
                             return static_cast<std::int64_t>(last->steps().size()) > c.kill_replica_at &&
                                    !last->finished() && !last->error();
                           },
                           [at, last, &c] { return at(fmt::format("replica {}", last->id()), c.kill_replica_at); }});
    if (c.restart_replica_after >= core::Duration::zero()) {
      // A fresh process of the same replica, started again: the report follows it.
      out.back().then = [&run, &c](TimePoint killed) {
        auto fresh = ReplicaHost::create(run.replica_configs.back(), run.trainer_settings.back());
        if (!fresh) return;  // the same config made the first one
        run.replicas.back() = fresh->get();
        (void)restart_at(run.world, run.replica_addrs.back(), killed + c.restart_replica_after, std::move(*fresh));
      };
    }
  }
  return out;
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

Result<PsScenarioReport> run_ps_scenario(const PsScenarioConfig& c) {
  if (auto st = validate(c); !st) return st.error();
  auto plans = plans_of(c);
  if (!plans) return plans.error();
  auto run = std::make_unique<Run>(c.seed);
  auto rule = dht_link_rule(c.seed, c.min_latency, c.max_latency, 0.0);
  if (!rule) return rule.error();
  run->world.network().set_rule(std::move(rule.value()));
  run->world.time_hosts(c.time_hosts);
  if (c.profile) {
    const core::Duration latency = CostProfile::work(1.0, c.profile->latency_us * 1e3);
    run->world.network().set_rule([latency](const core::PeerAddr&, const core::PeerAddr&) {
      return LinkModel{latency, core::Duration::zero(), 0.0, 0.0};
    });
  }
  if (auto st = add_hosts(*run, c, *plans); !st) return st.error();
  if (c.profile) {
    if (auto st = place_on_machines(*run, c, *plans); !st) return st.error();
  }

  PsScenarioReport report;
  report.seed = c.seed;
  if (plans->ps) {
    report.servers = plans->ps->servers;
    report.shards = plans->ps->shards.size();
  }
  report.mode = !plans->ar ? mode_of(*plans->ps) : plans->ps ? mode_of(*plans->ps, *plans->ar) : mode_of(*plans->ar, true);
  // The workload runs until every replica finished, failed or was killed.
  const Run& r = *run;
  // A killed replica that starts again is done once its new process is.
  const bool restarts = c.kill_replica_at >= 0 && c.restart_replica_after >= core::Duration::zero();
  auto all_done = [&r, restarts] {
    for (std::size_t i = 0; i < r.replicas.size(); ++i) {
      const bool gone = r.world.killed(r.replica_addrs[i]) && !(restarts && i + 1 == r.replicas.size());
      if (!r.replicas[i]->finished() && !r.replicas[i]->error() && !gone) return false;
    }
    return true;
  };
  auto ran = run_with_cued_kills(run->world, cued_kills(*run, c, report), all_done, TimePoint{} + c.max_time,
                                 c.failure_detection);
  report.hung = !ran.done;
  for (const auto& what : ran.killed) report.killed += (report.killed.empty() ? "" : ", ") + what;
  report.resumed = run->resumed;
  collect(*run, c, *plans, report);
  record_world(run->world, report);
  for (const auto& m : run->machines) report.cpu += run->world.busy_time(m);
  if (!run->machines.empty()) {
    for (std::size_t i = 0; i < run->server_addrs.size(); ++i) {
      report.cpu_by_node.emplace_back("PS " + run->plan->servers[i], run->world.node_busy_time(run->server_addrs[i]));
    }
    for (std::size_t r = 0; r < run->replica_addrs.size(); ++r) {
      report.cpu_by_node.emplace_back(fmt::format("replica {}", r), run->world.node_busy_time(run->replica_addrs[r]));
    }
    for (std::size_t i = 0; i < run->proxy_addrs.size() && i < run->proxy_reports.size(); ++i) {
      report.cpu_by_node.emplace_back("proxy " + run->proxy_reports[i].node, run->world.node_busy_time(run->proxy_addrs[i]));
    }
  }
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
      // A replica's records are its steps in order, from the first it ran (a replica
      // that rejoined a running job starts where the job stood).
      const auto& steps = *replicas[r];
      if (steps.empty() || s < steps.front().step) continue;
      const auto at = static_cast<std::size_t>(s - steps.front().step);
      if (at >= steps.size()) continue;
      const auto& rec = steps[at];
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
  report.host_wall = world.host_wall();
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
    if (r.first_step > 0) out += fmt::format(" (from step {}: it rejoined there)", r.first_step);
    if (r.finished || !r.error.empty()) out += fmt::format(" at {:.3f} ms", ms(r.end));
    if (r.finished) out += fmt::format(", final version {}", r.final_version);
    if (!r.error.empty()) out += ": " + r.error;
    out += "\n";
  }
  if (!report.replicas.empty() && report.replicas.front().finished) {
    for (const auto& [name, values] : report.replicas.front().final_parameters) {
      out += "final " + name;
      out += cps::values_text(values);
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
  if (!report.resumed.empty()) out += "resumed:      " + report.resumed + "\n";
  if (report.hung) out += "HUNG: replicas still running at the end of the run\n";
  out +=
      fmt::format("virtual time: {:.3f} ms, {} events, {} calls, {} timeouts, anomalies {}\n", ms(report.virtual_time),
                  report.world.events, report.world.calls, report.world.timeouts, report.anomalies);
  if (report.cpu > core::Duration::zero()) {
    out += fmt::format("processor time: {:.3f} ms in all", ms(report.cpu));
    for (const auto& [node, busy] : report.cpu_by_node) out += fmt::format("; {} {:.3f}", node, ms(busy));
    out += "\n";
  }
  out += fmt::format("seed={} trace_hash=0x{:016x}\n", report.seed, report.trace_hash);
  return out;
}

Result<std::unique_ptr<PsServerHost>> ps_server(const cps::TrainingPlan& plan, const std::string& device,
                                                const std::map<std::string, std::vector<float>>& values,
                                                const std::map<std::string, cps::Optimizer::State>& states,
                                                core::Duration drop_lost_after, std::optional<std::int64_t> resume_at) {
  auto shards = cps::device_shards(plan, device, values, states);
  if (!shards) return shards.error();
  cps::ShardServer server(device, std::move(*shards));
  if (drop_lost_after >= core::Duration::zero()) server.set_drop_lost_after(drop_lost_after);
  if (resume_at) {
    if (auto st = server.resume_at(*resume_at); !st) return st.error();
  }
  return std::make_unique<PsServerHost>(std::move(server));
}

Result<std::map<std::string, core::PeerAddr>> add_ps_servers(World& world, const cps::TrainingPlan& plan,
                                                           std::size_t features, std::vector<core::PeerAddr>& addrs,
                                                           std::vector<PsServerHost*>& hosts,
                                                           core::Duration drop_lost_after) {
  const auto initial = cps::logistic_initial(features);
  std::map<std::string, core::PeerAddr> by_device;
  for (const auto& device : plan.servers) {
    core::PeerAddr addr = swarm_address(addrs.size(), k_ps_port);
    auto host = ps_server(plan, device, initial, {}, drop_lost_after);
    if (!host) return host.error();
    hosts.push_back(host->get());
    if (auto added = world.add_node(addr, std::move(*host)); !added) return added.error();
    if (auto st = world.start_node(addr, core::TimePoint{}); !st) return st.error();
    by_device[device] = addr;
    addrs.push_back(std::move(addr));
  }
  return by_device;
}

}  // namespace apiary::sim::scenarios
