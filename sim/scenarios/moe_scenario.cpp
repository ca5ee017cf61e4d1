#include "sim/scenarios/moe_scenario.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "core/rng.hpp"
#include "sim/faults.hpp"
#include "sim/scenarios/dht_swarm.hpp"
#include "sim/scenarios/swarm_size.hpp"

namespace apiary::sim::scenarios {

namespace cm = core::moe;
using core::TimePoint;

namespace {
/// Rows of one server batch, at most: far above what the clients of a run send at once.
constexpr std::size_t k_max_batch_rows = 1 << 16;
}  // namespace

Status validate(const MoeScenarioConfig& c) {
  auto bad = [](const char* field, const std::string& got, const std::string& want) {
    return make_error(errc::invalid_argument, "expected {} {}, got {}; fix the scenario config", field, want, got);
  };
  auto ns = [](core::Duration d) { return fmt::format("{} ns", d.count()); };
  if (c.servers < 1 || c.servers > k_max_swarm_nodes) return bad("servers", std::to_string(c.servers), ">= 1");
  if (c.experts_per_server < 1) return bad("experts_per_server", "0", ">= 1");
  if (c.clients < 1 || c.clients > k_max_swarm_nodes) return bad("clients", std::to_string(c.clients), ">= 1");
  if (c.hidden_dim < 1) return bad("hidden_dim", "0", ">= 1");
  if (c.rows < 1 || c.rows > k_max_batch_rows) {
    return bad("rows", std::to_string(c.rows), fmt::format("in [1, {}] (a server batch's rows)", k_max_batch_rows));
  }
  if (c.steps < 0) return bad("steps", std::to_string(c.steps), ">= 0");
  const std::size_t grid = c.servers * c.experts_per_server;
  if (c.k < 1 || c.k > grid) return bad("k", std::to_string(c.k), fmt::format("in [1, {}] (servers * experts)", grid));
  if (c.k_min < 1 || c.k_min > c.k) return bad("k_min", std::to_string(c.k_min), fmt::format("in [1, k = {}]", c.k));
  if (c.min_batch_size < 1 || c.min_batch_size > k_max_batch_rows) {
    return bad("min_batch_size", std::to_string(c.min_batch_size), fmt::format("in [1, {}]", k_max_batch_rows));
  }
  if (c.min_batch_size > 1 && !c.batch_timeout) {
    return bad("batch_timeout", "none", "a time with min_batch_size > 1 (a lone task would wait for ever)");
  }
  if (c.batch_timeout && *c.batch_timeout < core::Duration::zero()) {
    return bad("batch_timeout", ns(*c.batch_timeout), ">= 0");
  }
  if (c.timeout_after_k_min < core::Duration::zero()) {
    return bad("timeout_after_k_min", ns(c.timeout_after_k_min), ">= 0");
  }
  if (c.call_timeout <= core::Duration::zero()) return bad("call_timeout", ns(c.call_timeout), "> 0");
  if (c.min_latency < core::Duration::zero() || c.max_latency < c.min_latency) {
    return bad("latencies", ns(c.min_latency) + "-" + ns(c.max_latency), "0 <= min <= max");
  }
  if (!(c.loss >= 0.0 && c.loss <= 1.0)) return bad("loss", fmt::format("{}", c.loss), "in [0, 1]");
  if (c.kill_server >= static_cast<std::int64_t>(c.servers)) {
    return bad("kill_server", std::to_string(c.kill_server), fmt::format("< servers = {} (or -1: none)", c.servers));
  }
  if (c.kill_server >= 0 && !c.kill_at && c.kill_at_step < 0) {
    return bad("kill_at (--kill-at-ms) or kill_at_step (--kill-at-step)", "neither",
               "one of them with kill_server (--kill-server)");
  }
  if (c.kill_at && *c.kill_at < core::Duration::zero()) return bad("kill_at", ns(*c.kill_at), ">= 0");
  if (c.restart_after && (c.kill_server < 0 || !c.kill_at || *c.restart_after < core::Duration::zero())) {
    return bad("restart_after (--restart-after-ms)", ns(*c.restart_after),
               ">= 0 with kill_server and kill_at (--kill-server, --kill-at-ms)");
  }
  if (c.failure_detection < core::Duration::zero()) return bad("failure_detection", ns(c.failure_detection), ">= 0");
  if (c.max_time <= core::Duration::zero()) return bad("max_time", ns(c.max_time), "> 0");
  return ok_status();
}

std::string moe_expert_uid(std::size_t s, std::size_t e) { return fmt::format("ffn.{}.{}", s, e); }

cm::FfnConfig moe_expert_config(const MoeScenarioConfig& c, std::size_t s, std::size_t e) {
  cm::FfnConfig f;
  f.hidden_dim = c.hidden_dim;
  f.learning_rate = c.learning_rate;
  std::uint64_t state = c.seed ^ (0x9e3779b97f4a7c15ULL * (s * c.experts_per_server + e + 1));
  f.seed = core::splitmix64_next(state);
  return f;
}

std::uint64_t moe_client_seed(const MoeScenarioConfig& c, std::size_t client) {
  std::uint64_t state = c.seed ^ (0xc2b2ae3d27d4eb4fULL * (client + 1));
  return core::splitmix64_next(state);
}

namespace {

/// The run in one World.
struct Run {
  explicit Run(std::uint64_t seed) : world(seed) {}
  World world;
  std::vector<core::PeerAddr> server_addrs;
  std::vector<core::PeerAddr> client_addrs;
  std::vector<MoeClientHost*> clients;
};

/// Server `s` with its E experts fresh from their seeds; every pool batches as the config
/// says (by default it runs a task as soon as it comes). Appends the experts to `grid`
/// when given.
Result<std::unique_ptr<MoeServerHost>> make_server(const MoeScenarioConfig& c, std::size_t s,
                                                   const core::PeerAddr& addr, std::vector<cm::GridExpert>* grid) {
  cm::PoolConfig pool;
  pool.max_batch_size = k_max_batch_rows;
  pool.min_batch_size = c.min_batch_size;
  pool.timeout = c.batch_timeout;
  auto host = std::make_unique<MoeServerHost>();
  for (std::size_t e = 0; e < c.experts_per_server; ++e) {
    const std::string uid = moe_expert_uid(s, e);
    auto added = host->role().add_expert(uid, std::make_unique<cm::FfnExpert>(moe_expert_config(c, s, e)), pool);
    if (!added) return added.error();
    if (grid != nullptr) grid->push_back(cm::GridExpert{uid, addr});
  }
  return host;
}

/// S servers, started at time 0.
Status add_servers(Run& run, const MoeScenarioConfig& c, std::vector<cm::GridExpert>& grid) {
  for (std::size_t s = 0; s < c.servers; ++s) {
    core::PeerAddr addr = swarm_address(s, k_moe_server_port);
    auto host = make_server(c, s, addr, &grid);
    if (!host) return host.error();
    if (auto added = run.world.add_node(addr, std::move(*host)); !added) return added.error();
    if (auto st = run.world.start_node(addr, TimePoint{}); !st) return st.error();
    run.server_addrs.push_back(std::move(addr));
  }
  return ok_status();
}

/// C clients over the whole grid, started at time 0.
Status add_clients(Run& run, const MoeScenarioConfig& c, const std::vector<cm::GridExpert>& grid) {
  for (std::size_t i = 0; i < c.clients; ++i) {
    cm::MoeClientConfig config;
    config.grid = grid;
    config.k = c.k;
    config.k_min = c.k_min;
    config.timeout_after_k_min = c.timeout_after_k_min;
    config.forward_timeout = c.call_timeout;
    config.backward_timeout = c.call_timeout;
    config.hidden_dim = c.hidden_dim;
    config.rows = c.rows;
    config.steps = c.steps;
    config.seed = moe_client_seed(c, i);
    if (auto st = cm::validate(config); !st) return st.error();
    core::PeerAddr addr = swarm_address(i, k_moe_client_port);
    auto host = std::make_unique<MoeClientHost>(std::move(config));
    run.clients.push_back(host.get());
    if (auto added = run.world.add_node(addr, std::move(host)); !added) return added.error();
    if (auto st = run.world.start_node(addr, TimePoint{}); !st) return st.error();
    run.client_addrs.push_back(std::move(addr));
  }
  return ok_status();
}

/// The kill on cue: server kill_server when client 0 begins step kill_at_step.
std::vector<CuedKill> cued_kills(const Run& run, const MoeScenarioConfig& c) {
  if (c.kill_server < 0 || c.kill_at_step < 0) return {};
  const MoeClientHost* first = run.clients.front();
  const World* world = &run.world;
  const auto server = static_cast<std::size_t>(c.kill_server);
  const std::int64_t step = c.kill_at_step;
  return {CuedKill{run.server_addrs[server],
                   [first, step] { return static_cast<std::int64_t>(first->role().steps().size()) >= step; },
                   [world, server, step] {
                     return fmt::format("server {} when client 0 began step {} ({:.3f} ms)", server, step,
                                        core::to_seconds(world->now()) * 1e3);
                   }}};
}

void collect(const Run& run, MoeScenarioReport& report) {
  for (std::size_t i = 0; i < run.clients.size(); ++i) {
    MoeClientReport r;
    r.client = i;
    r.steps = run.clients[i]->role().steps();
    for (const auto& s : r.steps) {
      (s.ok ? r.completed : r.failed) += 1;
      report.asked += s.asked.size();
      report.answered += s.answered;
    }
    report.completed += r.completed;
    report.failed += r.failed;
    report.clients.push_back(std::move(r));
  }
  for (const auto& addr : run.server_addrs) {
    // The host of the server's last life (a restart replaces it).
    report.server_batches += static_cast<const MoeServerHost*>(run.world.host(addr))->role().stats().batches;
  }
  report.trace_hash = run.world.trace_hash();
  report.virtual_time = run.world.now();
  report.world = run.world.stats();
  report.anomalies = run.world.anomalies().size();
}

}  // namespace

Result<MoeScenarioReport> run_moe_scenario(const MoeScenarioConfig& c) {
  if (auto st = validate(c); !st) return st.error();
  auto run = std::make_unique<Run>(c.seed);
  auto rule = dht_link_rule(c.seed, c.min_latency, c.max_latency, c.loss);
  if (!rule) return rule.error();
  run->world.network().set_rule(std::move(rule.value()));
  // The clients hear of a crash after failure_detection, whatever killed the server.
  run->world.set_peer_down_detection(c.failure_detection);
  std::vector<cm::GridExpert> grid;
  if (auto st = add_servers(*run, c, grid); !st) return st.error();
  if (auto st = add_clients(*run, c, grid); !st) return st.error();

  MoeScenarioReport report;
  report.seed = c.seed;
  if (c.kill_server >= 0 && c.kill_at) {
    const auto server = static_cast<std::size_t>(c.kill_server);
    if (auto st = kill_at(run->world, run->server_addrs[server], TimePoint{} + *c.kill_at); !st) return st.error();
    report.killed = fmt::format("server {} at {:.3f} ms", server, core::to_seconds(*c.kill_at) * 1e3);
    if (c.restart_after) {
      const core::PeerAddr& addr = run->server_addrs[server];
      auto fresh = make_server(c, server, addr, nullptr);
      if (!fresh) return fresh.error();
      const TimePoint back = TimePoint{} + *c.kill_at + *c.restart_after;
      if (auto st = restart_at(run->world, addr, back, std::move(*fresh)); !st) return st.error();
      report.killed += fmt::format(", back at {:.3f} ms", core::to_seconds(back) * 1e3);
    }
  }
  // The workload runs until every client has recorded its steps.
  const Run& r = *run;
  auto all_done = [&r] {
    for (const auto* client : r.clients) {
      if (!client->role().done()) return false;
    }
    return true;
  };
  auto ran = run_with_cued_kills(run->world, cued_kills(*run, c), all_done, TimePoint{} + c.max_time,
                                 c.failure_detection);
  report.hung = !ran.done;
  for (const auto& what : ran.killed) report.killed += (report.killed.empty() ? "" : ", ") + what;
  collect(*run, report);
  return report;
}

std::string format_report(const MoeScenarioReport& report) {
  auto ms = [](core::Duration d) { return core::to_seconds(d) * 1e3; };
  std::string out;
  for (const auto& client : report.clients) {
    for (const auto& s : client.steps) {
      std::string mask;
      for (bool m : s.mask) mask += m ? '1' : '0';
      out += fmt::format("client {} step {:>4}: {} answered {}/{} mask {} backward {} checksum 0x{:016x} "
                         "step_ms {:.3f}\n",
                         client.client, s.step, s.ok ? "ok    " : "FAILED", s.answered, s.asked.size(), mask,
                         s.backward_answered, s.checksum, ms(s.end - s.start));
    }
  }
  for (const auto& client : report.clients) {
    for (const auto& s : client.steps) {
      if (s.error) out += fmt::format("client {} step {} failed: {}\n", client.client, s.step, s.error->what());
    }
  }
  out += fmt::format("steps:        {} completed, {} failed; {} of {} expert calls answered; {} server batches\n",
                     report.completed, report.failed, report.answered, report.asked, report.server_batches);
  // Virtual step times of the completed steps: what a trainer waits per step.
  core::Duration total{}, slowest{};
  for (const auto& client : report.clients) {
    for (const auto& s : client.steps) {
      if (!s.ok) continue;
      total += s.end - s.start;
      slowest = std::max(slowest, s.end - s.start);
    }
  }
  if (report.completed > 0) {
    out += fmt::format("step time:    mean {:.3f} ms, max {:.3f} ms (completed steps)\n",
                       ms(total) / static_cast<double>(report.completed), ms(slowest));
  }
  if (!report.killed.empty()) out += "killed:       " + report.killed + "\n";
  if (report.hung) out += "HUNG: clients still running at the end of the run\n";
  out += fmt::format("virtual time: {:.3f} ms, {} events, {} calls, {} timeouts, {} lost, anomalies {}\n",
                     ms(report.virtual_time), report.world.events, report.world.calls, report.world.timeouts,
                     report.world.lost, report.anomalies);
  out += fmt::format("seed={} trace_hash=0x{:016x}\n", report.seed, report.trace_hash);
  return out;
}

}  // namespace apiary::sim::scenarios
