#include "sim/scenarios/dht_scenario.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/dht/msgpack_value.hpp"
#include "sim/faults.hpp"
#include "sim/scenarios/dht_swarm.hpp"

namespace apiary::sim::scenarios {

namespace {

using core::dht::OpId;

enum class OpKind { store, get };

/// One workload operation and, once finished, its result.
struct OpRecord {
  OpKind kind = OpKind::store;
  std::size_t key = 0;     ///< index of the key it stores or gets
  std::size_t issuer = 0;  ///< swarm index of the node that runs it
  bool done = false;
  core::dht::OpResult result;
};

/// The state of one run. Lives on run_dht_scenario's stack: hosts' sinks point at it.
struct Run {
  explicit Run(const DhtScenarioConfig& c) : config(c), world(c.seed) {}

  const DhtScenarioConfig& config;
  World world;
  std::optional<DhtSwarm> swarm;
  std::vector<core::dht::NodeId> key_ids;
  std::vector<std::string> values;
  std::map<OpId, OpRecord> ops;
  std::vector<std::size_t> survivors;  ///< initial nodes the fault injector has not picked
  std::size_t bootstraps = 0;
  DhtScenarioReport report;

  void phase(DhtPhase p) const {
    if (config.on_phase) config.on_phase(p);
  }

  void on_done(core::dht::OpResult result) {
    if (result.op == k_bootstrap_op) {
      bootstraps += 1;
      if (!result.status.ok()) report.bootstrap_failed += 1;
      return;
    }
    auto it = ops.find(result.op);
    if (it == ops.end() || it->second.done) return;  // the node's own background work
    it->second.done = true;
    it->second.result = std::move(result);
  }

  /// Starts operation `op` of `kind` on key `key` at a random running node, now.
  void issue(OpId op, OpKind kind, std::size_t key) {
    auto pick = swarm->random_running(world);
    if (!pick) return;  // nobody left to ask; the op is never counted as issued
    DhtHost& host = swarm->host(*pick);
    ops[op] = OpRecord{kind, key, *pick, false, {}};
    const core::TimePoint now = world.now();
    core::dht::NodeOp run;
    if (kind == OpKind::store) {
      core::dht::StoreItem item{key_ids[key], core::dht::k_subkey_regular, values[key],
                                host.role().node().dht_time(now) + config.ttl};
      run = [item = std::move(item)](core::dht::Node& n, core::TimePoint at, core::dht::OpId id) {
        return n.store(at, id, {item});
      };
    } else {
      run = [k = key_ids[key]](core::dht::Node& n, core::TimePoint at, core::dht::OpId id) { return n.get(at, id, {k}); };
    }
    run_dht_op(world, swarm->addr(*pick), host, op, std::move(run), swarm->sink());
  }

  /// Crashes `count` random initial nodes at times uniform in [from, until]; with
  /// replace_killed, a fresh node joins at each crash.
  void inject_kills(std::size_t count, core::TimePoint from, core::TimePoint until) {
    std::vector<core::PeerAddr> candidates;
    for (std::size_t i : survivors) candidates.push_back(swarm->addr(i));
    auto kills = kill_random(world, std::move(candidates), std::min(count, survivors.size()), from, until);
    if (!kills) return;
    for (const auto& kill : *kills) {
      survivors.erase(std::find_if(survivors.begin(), survivors.end(),
                                   [&](std::size_t i) { return swarm->addr(i) == kill.addr; }));
      report.killed += 1;
      if (config.replace_killed) {
        world.schedule(kill.at, [this](World& w) {
          if (swarm->add_joiner(w, w.now()).ok()) report.joined += 1;
        });
      }
    }
  }

  /// Issues `count` operations of `kind`, one every op_interval from now, then runs until
  /// each has finished or lost its issuer (or phase_timeout after the last is issued).
  void run_phase(OpKind kind, std::size_t count, OpId first_op, std::size_t kills) {
    const core::TimePoint start = world.now();
    const core::TimePoint last_issue =
        start + config.op_interval * static_cast<core::Duration::rep>(count - 1);
    inject_kills(kills, start, last_issue);
    for (std::size_t i = 0; i < count; ++i) {
      const core::TimePoint at = start + config.op_interval * static_cast<core::Duration::rep>(i);
      world.schedule(at, [this, kind, i, first_op](World&) {
        issue(first_op + i, kind, i % key_ids.size());
      });
    }
    const core::TimePoint deadline = last_issue + config.phase_timeout;
    while (world.now() < deadline) {
      world.run_until(std::min(world.now() + std::chrono::milliseconds(100), deadline));
      if (world.now() >= last_issue && settled(kind)) break;
    }
  }

  /// True when every op of `kind` has finished or its issuer has crashed.
  [[nodiscard]] bool settled(OpKind kind) const {
    for (const auto& [id, op] : ops) {
      if (op.kind == kind && !op.done && !world.killed(swarm->addr(op.issuer))) return false;
    }
    return true;
  }

  /// Per key, the swarm indices of the nodes whose main storage holds it now.
  [[nodiscard]] std::vector<std::vector<std::size_t>> holders() const {
    std::map<core::dht::NodeId, std::size_t> key_index;
    for (std::size_t k = 0; k < key_ids.size(); ++k) key_index.emplace(key_ids[k], k);
    std::vector<std::vector<std::size_t>> out(key_ids.size());
    for (std::size_t i = 0; i < swarm->size(); ++i) {
      core::dht::Node& node = swarm->host(i).role().node();
      for (const auto& item : node.protocol().storage().items(node.dht_time(world.now()))) {
        auto it = key_index.find(item.first);
        if (it != key_index.end()) out[it->second].push_back(i);
      }
    }
    return out;
  }

  void summarize(const std::vector<std::vector<std::size_t>>& held);
};

/// The sample at fraction `q` of sorted `v` (nearest rank).
std::size_t percentile(const std::vector<std::size_t>& v, double q) {
  if (v.empty()) return 0;
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<std::size_t>(rank, 1)) - 1];
}

double ratio(double num, double den, double if_empty) { return den > 0 ? num / den : if_empty; }

}  // namespace

void Run::summarize(const std::vector<std::vector<std::size_t>>& held) {
  report.seed = config.seed;
  report.trace_hash = world.trace_hash();
  report.nodes = config.nodes;
  report.virtual_time = world.now();
  report.world = world.stats();
  report.anomalies = world.anomalies().size();
  std::size_t replicas = 0;
  std::size_t store_requests = 0;
  std::size_t get_requests = 0;
  std::vector<std::size_t> hops;
  for (const auto& [id, op] : ops) {
    const bool aborted = !op.done && world.killed(swarm->addr(op.issuer));
    if (op.kind == OpKind::store) {
      report.stores += 1;
      report.stores_aborted += aborted ? 1 : 0;
      if (!op.done) continue;
      report.stores_done += 1;
      const bool ok = !op.result.stored.empty() && op.result.stored[0];
      report.stores_ok += ok ? 1 : 0;
      replicas += op.result.replicas.empty() ? 0 : op.result.replicas[0];
      store_requests += op.result.requests;
      continue;
    }
    report.gets += 1;
    report.gets_aborted += aborted ? 1 : 0;
    if (!op.done) continue;
    report.gets_done += 1;
    get_requests += op.result.requests;
    // The right value: the bytes stored under the key (no validator markers here).
    const auto& found = op.result.found.empty() ? std::nullopt : op.result.found[0];
    const auto* bytes = found ? std::get_if<std::string>(&found->value) : nullptr;
    const bool ok = bytes != nullptr && *bytes == values[op.key];
    report.gets_ok += ok ? 1 : 0;
    // A key counts as alive when a node that accepted it still runs at the end.
    const auto& h = held[op.key];
    const bool alive = std::any_of(h.begin(), h.end(),
                                   [&](std::size_t i) { return world.running(swarm->addr(i)); });
    report.gets_alive += alive ? 1 : 0;
    report.gets_alive_ok += alive && ok ? 1 : 0;
    if (ok && op.result.hops == 0) report.gets_local += 1;
    if (ok && op.result.hops > 0) hops.push_back(op.result.hops);
  }
  for (const auto& h : held) {
    // A key no node held after the stores was never stored (its store's issuer crashed
    // before any replica took it): no replica of it was lost.
    if (h.empty()) {
      report.keys_never_held += 1;
      continue;
    }
    const bool alive = std::any_of(h.begin(), h.end(),
                                   [&](std::size_t i) { return world.running(swarm->addr(i)); });
    report.keys_without_replica += alive ? 0 : 1;
  }
  std::sort(hops.begin(), hops.end());
  report.hops.samples = hops.size();
  std::size_t hop_sum = 0;
  for (std::size_t h : hops) hop_sum += h;
  report.hops.mean = ratio(static_cast<double>(hop_sum), static_cast<double>(hops.size()), 0.0);
  report.hops.p50 = percentile(hops, 0.50);
  report.hops.p99 = percentile(hops, 0.99);
  report.hops.max = hops.empty() ? 0 : hops.back();
  report.replicas_per_store =
      ratio(static_cast<double>(replicas), static_cast<double>(report.stores_done), 0.0);
  report.requests_per_store =
      ratio(static_cast<double>(store_requests), static_cast<double>(report.stores_done), 0.0);
  report.requests_per_get =
      ratio(static_cast<double>(get_requests), static_cast<double>(report.gets_done), 0.0);
}

Status validate(const DhtScenarioConfig& c) {
  auto bad = [](const char* field, const std::string& got, const char* want) {
    return make_error(errc::invalid_argument, "expected DhtScenarioConfig::{} {}, got {}; fix it",
                      field, want, got);
  };
  if (c.nodes == 0) return bad("nodes", "0", ">= 1");
  if (!(c.churn >= 0.0 && c.churn < 1.0)) return bad("churn", fmt::format("{}", c.churn), "in [0, 1)");
  if (c.min_latency < core::Duration::zero() || c.max_latency < c.min_latency) {
    return bad("min_latency/max_latency",
               fmt::format("{}-{} ns", c.min_latency.count(), c.max_latency.count()),
               "with 0 <= min <= max");
  }
  if (!(c.loss >= 0.0 && c.loss <= 1.0)) return bad("loss", fmt::format("{}", c.loss), "in [0, 1]");
  if (c.keys == 0) return bad("keys", "0", ">= 1");
  if (c.gets == 0) return bad("gets", "0", ">= 1");
  if (c.op_interval < core::Duration::zero()) {
    return bad("op_interval", fmt::format("{} ns", c.op_interval.count()), ">= 0");
  }
  if (c.start_interval < core::Duration::zero()) {
    return bad("start_interval", fmt::format("{} ns", c.start_interval.count()), ">= 0");
  }
  if (c.bootstrap_peers == 0) return bad("bootstrap_peers", "0", ">= 1");
  if (c.phase_timeout <= core::Duration::zero()) {
    return bad("phase_timeout", fmt::format("{} ns", c.phase_timeout.count()), "> 0");
  }
  if (!(c.ttl > 0.0)) return bad("ttl", fmt::format("{}", c.ttl), "> 0 seconds");
  return core::dht::validate(c.node);
}

Result<DhtScenarioReport> run_dht_scenario(const DhtScenarioConfig& config) {
  if (auto st = validate(config); !st) return st.error();
  Run run(config);
  auto rule = dht_link_rule(config.seed, config.min_latency, config.max_latency, config.loss);
  if (!rule) return rule.error();
  run.world.network().set_rule(std::move(rule.value()));

  // Bootstrap: node i joins at i * start_interval from a few earlier nodes.
  run.phase(DhtPhase::bootstrap);
  DhtSwarmOptions options;
  options.nodes = config.nodes;
  options.node = config.node;
  options.dht_epoch = config.dht_epoch;
  options.bootstrap_peers = config.bootstrap_peers;
  options.start_interval = config.start_interval;
  auto swarm = DhtSwarm::create(run.world, options,
                                [&run](const core::PeerAddr&, core::dht::OpResult r) {
                                  run.on_done(std::move(r));
                                });
  if (!swarm) return swarm.error();
  run.swarm.emplace(std::move(swarm.value()));
  for (std::size_t i = 0; i < config.nodes; ++i) run.survivors.push_back(i);
  const core::TimePoint last_start =
      config.start_interval * static_cast<core::Duration::rep>(config.nodes - 1);
  while (run.world.now() < last_start + config.phase_timeout &&
         (run.world.now() < last_start || run.bootstraps < config.nodes)) {
    run.world.run_until(run.world.now() + std::chrono::milliseconds(100));
  }

  // The workload's keys and values.
  for (std::size_t k = 0; k < config.keys; ++k) {
    run.key_ids.push_back(core::dht::NodeId::of_str_key(fmt::format("sim-key-{}", k)));
    run.values.push_back(core::dht::pack_str(fmt::format("value-{}-{}", config.seed, k)));
  }
  // Crashes: half (rounded up) while storing, the rest while getting.
  const auto kills = std::min<std::size_t>(
      config.nodes - 1, static_cast<std::size_t>(std::floor(config.churn * config.nodes + 1e-9)));

  run.phase(DhtPhase::stores);
  const core::TimePoint store_start = run.world.now();
  const std::uint64_t calls_before_stores = run.world.stats().calls;
  run.run_phase(OpKind::store, config.keys, 2, (kills + 1) / 2);
  run.report.store_phase = run.world.now() - store_start;
  run.report.calls_per_store = ratio(
      static_cast<double>(run.world.stats().calls - calls_before_stores), config.keys, 0.0);
  const auto held = run.holders();

  run.phase(DhtPhase::gets);
  const core::TimePoint get_start = run.world.now();
  const std::uint64_t calls_before_gets = run.world.stats().calls;
  run.run_phase(OpKind::get, config.gets, 2 + config.keys, kills / 2);
  run.report.get_phase = run.world.now() - get_start;
  run.report.calls_per_get = ratio(
      static_cast<double>(run.world.stats().calls - calls_before_gets), config.gets, 0.0);

  run.summarize(held);
  run.phase(DhtPhase::done);
  return run.report;
}

}  // namespace apiary::sim::scenarios
