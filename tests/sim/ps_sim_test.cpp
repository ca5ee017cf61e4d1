// The parameter-server job on the simulated network (sim/scenarios/ps_scenario.hpp):
// BSP equals single-process SGD on the concatenated batch, SSP keeps its bound behind a
// straggler, a killed PS or replica ends every other replica with an error naming it
// (never a hang), a seed replays its trace hash, and local_replication makes the
// replicas of a node pull each proxied variable once per step.
#include <algorithm>
#include <cmath>
#include <catch2/catch.hpp>

#include <functional>
#include <optional>
#include <utility>
#include <chrono>

#include "core/ps/logistic_regression.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/resource_spec.hpp"
#include "sim/scenarios/ps_scenario.hpp"
#include "tests/sim/ps_job_config.hpp"

using namespace apiary;
using namespace apiary::testing::sim_ps;
using namespace std::chrono_literals;

namespace {

/// Two nodes with two CPU devices each: two replicas per node.
constexpr const char* k_two_nodes =
    "nodes:\n  - address: 10.0.0.1\n    cpus: [0, 1]\n    chief: true\n"
    "  - address: 10.0.0.2\n    cpus: [0, 1]\n    ssh_config: c\nssh:\n  c: {username: u}\n";

}  // namespace

TEST_CASE("simulated BSP equals single-process SGD on the concatenated batch", "[sim][ps]") {
  auto kind = GENERATE(cs::BuilderKind::ps_load_balancing, cs::BuilderKind::partitioned_ps);
  auto c = make_config(kind);
  c.min_latency = 1ms;
  c.max_latency = 20ms;
  const auto report = run_checked(c);
  INFO(sim::scenarios::format_report(report));
  REQUIRE(report.servers.size() >= 2);
  CHECK(report.mode == "BSP");
  REQUIRE(report.steps.size() == static_cast<std::size_t>(c.steps));
  check_bsp(report);  // every replica reads exactly the steps before
  for (const auto& s : report.steps) CHECK(s.max_time >= c.compute);
  // The loss goes down.
  CHECK(report.steps.back().loss < report.steps.front().loss);
  const auto expected = reference_sgd(c);
  check_close(report, expected, 1e-5);
  for (const auto& r : report.replicas) {
    CHECK(r.final_version == c.steps);
    for (const auto& [name, values] : expected) {
      CHECK(r.final_parameters.at(name) == report.replicas.front().final_parameters.at(name));
    }
  }
}

TEST_CASE("simulated SSP keeps every replica within its staleness bound behind a straggler", "[sim][ps]") {
  cs::BuilderOptions options;
  options.staleness = 2;
  auto c = make_config(cs::BuilderKind::ps_load_balancing, options);
  c.straggler = 150ms;
  const auto report = run_checked(c);
  INFO(sim::scenarios::format_report(report));
  CHECK(report.mode == "SSP staleness 2");
  std::int64_t most_ahead = 0;
  for (const auto& s : report.steps) {
    for (std::size_t r = 0; r < s.versions.size(); ++r) {
      const auto v = s.versions[r];
      CHECK(v >= 0);
      CHECK(s.step - v <= 2);
      CHECK(v <= s.step);
      if (r + 1 != s.versions.size()) most_ahead = std::max(most_ahead, s.step - v);
    }
  }
  // The fast replicas did run ahead of the straggler (else the test proves nothing).
  CHECK(most_ahead >= 1);
  for (const auto& r : report.replicas) CHECK(r.finished);
}

TEST_CASE("simulated async training runs every replica to the end", "[sim][ps]") {
  cs::BuilderOptions options;
  options.sync = false;
  auto c = make_config(cs::BuilderKind::ps_load_balancing, options);
  c.straggler = 50ms;
  const auto report = run_checked(c);
  CHECK(report.mode == "async");
  for (const auto& r : report.replicas) CHECK(r.finished);
  CHECK(report.steps.back().loss < report.steps.front().loss);
}

TEST_CASE("a simulated PS killed mid-training ends every replica with an error naming it", "[sim][ps]") {
  const auto c = make_config(cs::BuilderKind::ps_load_balancing);
  const auto report = run_killing(c, Kill::ps, 3);
  INFO(sim::scenarios::format_report(report));
  CHECK_FALSE(report.killed.empty());
  bool named_dead = false;
  for (const auto& r : report.replicas) {
    CHECK_FALSE(r.finished);
    REQUIRE_FALSE(r.error.empty());
    CHECK(r.steps < 10);
    // Broken connections and lost sessions end the run long before any call deadline.
    CHECK(r.end < c.call_timeout);
    if (r.error.find("on PS " + report.servers.front()) != std::string::npos &&
        r.error.find("peer_down") != std::string::npos) {
      named_dead = true;
    }
  }
  CHECK(named_dead);
}

TEST_CASE("a simulated replica killed mid-training ends the others with an error naming it", "[sim][ps]") {
  const auto c = make_config(cs::BuilderKind::ps_load_balancing);
  const auto report = run_killing(c, Kill::replica, 3);
  INFO(sim::scenarios::format_report(report));
  CHECK(report.replicas.back().killed);
  for (const auto* o : others_failed(report, {"unavailable", "replica 3 at ", "went down"})) {
    CHECK(o->end < c.call_timeout);
  }
}

TEST_CASE("with drop_lost_after, simulated BSP goes on without a killed replica", "[sim][ps]") {
  auto c = make_config(cs::BuilderKind::ps_load_balancing);
  c.steps = 20;
  c.kill_replica_at = 3;
  c.drop_lost_after = std::chrono::milliseconds(200);
  const auto report = run_checked(c);
  INFO(sim::scenarios::format_report(report));
  CHECK(report.replicas.back().killed);
  CHECK_FALSE(report.hung);
  for (std::size_t r = 0; r + 1 < report.replicas.size(); ++r) {
    const auto& o = report.replicas[r];
    INFO("replica " << r << ": " << o.error);
    CHECK(o.finished);
    CHECK(o.steps == c.steps);
    CHECK(o.final_version == c.steps);  // every step applied once, with or without the lost one
    CHECK(o.final_parameters == report.replicas.front().final_parameters);
  }
}

TEST_CASE("a simulated BSP replica killed and started again rejoins where the job stands", "[sim][ps]") {
  for (auto kind : {cs::BuilderKind::ps_load_balancing, cs::BuilderKind::partitioned_ps}) {
    auto c = make_config(kind);
    c.steps = 30;
    c.kill_replica_at = 3;
    c.drop_lost_after = std::chrono::milliseconds(100);
    c.restart_replica_after = std::chrono::milliseconds(150);
    const auto report = check_replays(c);
    INFO(sim::scenarios::format_report(report));
    CHECK_FALSE(report.hung);
    CHECK_THAT(report.killed, Catch::Contains("replica 3 at step 3"));
    for (const auto& o : report.replicas) {
      INFO("replica " << o.replica << ": " << o.error);
      CHECK(o.finished);
      CHECK(o.final_version == c.steps);  // every step applied once
      CHECK(o.final_parameters == report.replicas.front().final_parameters);
    }
    // The new process of replica 3 ran the job's last steps only, from where it rejoined.
    const auto& back = report.replicas.back();
    CHECK(back.steps > 0);
    CHECK(back.steps < c.steps - 3);
    CHECK(back.first_step == c.steps - back.steps);
    CHECK_THAT(sim::scenarios::format_report(report),
               Catch::Contains(fmt::format("(from step {}: it rejoined there)", back.first_step)));
    // Each step the replicas reached was computed on every step before it (BSP).
    for (const auto& step : report.steps) {
      for (auto v : step.versions) CHECK((v == -1 || v == step.step));
    }
    // From the step it rejoined at, every step has all four replicas again.
    const auto rejoined = static_cast<std::size_t>(c.steps - back.steps);
    for (std::size_t s = rejoined; s < report.steps.size(); ++s) CHECK(report.steps[s].versions.back() == static_cast<std::int64_t>(s));
  }
}

TEST_CASE("a simulated SSP replica killed and started again rejoins within the staleness bound", "[sim][ps]") {
  cs::BuilderOptions options;
  options.staleness = 2;
  auto c = make_config(cs::BuilderKind::ps_load_balancing, options);
  c.steps = 30;
  c.straggler = 20ms;
  c.kill_replica_at = 5;
  c.drop_lost_after = std::chrono::milliseconds(100);
  c.restart_replica_after = std::chrono::milliseconds(150);
  const auto report = check_replays(c);
  INFO(sim::scenarios::format_report(report));
  CHECK_FALSE(report.hung);
  for (const auto& o : report.replicas) {
    INFO("replica " << o.replica << ": " << o.error);
    CHECK(o.finished);
    CHECK(o.final_version >= c.steps - 2);  // SSP: a last pull may be up to 2 updates behind
  }
  CHECK(report.replicas.back().steps < c.steps - 5);
  for (const auto& step : report.steps) {
    for (auto v : step.versions) CHECK((v == -1 || (v <= step.step && v >= step.step - 2)));
  }
}

TEST_CASE("a simulated PS killed and started again from the chief's checkpoint ends with an unbroken run's bits",
          "[sim][ps]") {
  // BSP (PSLoadBalancing, PartitionedPS): the first PS device killed at step 7,
  // checkpoints every 3 steps (the latest before the kill: step 6), started again 300 ms
  // later; the replicas replay their pushes of steps 6.. to it and the job goes on.
  for (const auto kind : {cs::BuilderKind::ps_load_balancing, cs::BuilderKind::partitioned_ps}) {
    auto c = make_config(kind);
    c.steps = 20;
    c.optimizer.kind = core::ps::OptimizerKind::adam;
    c.optimizer.learning_rate = 0.05F;
    c.save_every = 3;
    auto unbroken_config = c;
    c.kill_ps_at = 7;
    c.restart_ps_after = 300ms;
    c.ps_restart_wait = 10s;
    const auto report = check_replays(c);
    const auto unbroken = run_checked(unbroken_config);
    INFO(sim::scenarios::format_report(report));
    CHECK_FALSE(report.hung);
    CHECK_THAT(report.killed, Catch::Contains("PS " + report.servers.front() + " at step 7"));
    CHECK_THAT(report.resumed, Catch::Contains("from the checkpoint of step 6"));
    for (const auto& o : report.replicas) {
      INFO("replica " << o.replica << ": " << o.error);
      CHECK(o.finished);
      CHECK(o.steps == c.steps);
      CHECK(o.final_version == c.steps);  // every step applied once
      CHECK(o.final_parameters == unbroken.replicas.front().final_parameters);
    }
    for (const auto& step : report.steps) {
      for (auto v : step.versions) CHECK(v == step.step);
    }
    CHECK(report.virtual_time > unbroken.virtual_time + 200ms);  // they waited for it
  }
  // SSP: a checkpoint is a snapshot of shards at different steps; the PS refuses to
  // resume from it, saying why, and the replicas fail once their wait is over.
  cs::BuilderOptions ssp;
  ssp.staleness = 2;
  auto c = make_config(cs::BuilderKind::ps_load_balancing, ssp);
  c.save_every = 3;
  c.kill_ps_at = 7;
  c.restart_ps_after = 300ms;
  c.ps_restart_wait = 1s;
  const auto refused = run_checked(c);
  INFO(sim::scenarios::format_report(refused));
  CHECK_THAT(refused.resumed, Catch::Contains("could not start again: PS localhost:CPU:0 cannot continue the job at "
                                              "step 6: shard logreg/"));
  CHECK_THAT(refused.resumed, Catch::Contains("is SSP (a checkpoint under SSP is a snapshot"));
  for (const auto& o : refused.replicas) {
    CHECK_FALSE(o.finished);
    CHECK_THAT(o.error, Catch::Contains("was not back within 1000 ms"));
  }
}

TEST_CASE("a simulated PS started again after a replica was dropped goes on without that replica too",
          "[sim][ps]") {
  // Replica 3 dies at step 3 and is dropped; the first PS device dies at step 10 and comes
  // back from the checkpoint of step 9, which knows nothing of the drop. The replica does
  // not come back to it either: it is dropped again after the same wait, and the job ends
  // as the run with the replica's loss alone does.
  for (const auto kind : {cs::BuilderKind::ps_load_balancing, cs::BuilderKind::partitioned_ps}) {
    auto c = make_config(kind);
    c.steps = 20;
    c.save_every = 3;
    c.kill_replica_at = 3;
    c.drop_lost_after = 100ms;
    auto replica_lost = c;
    c.kill_ps_at = 10;
    c.restart_ps_after = 300ms;
    c.ps_restart_wait = 10s;
    const auto report = check_replays(c);
    const auto expected = run_checked(replica_lost);
    INFO(sim::scenarios::format_report(report));
    CHECK_FALSE(report.hung);
    CHECK_THAT(report.resumed, Catch::Contains("from the checkpoint of step 9"));
    CHECK(report.replicas.back().killed);
    for (std::size_t r = 0; r + 1 < report.replicas.size(); ++r) {
      const auto& o = report.replicas[r];
      INFO("replica " << r << ": " << o.error);
      CHECK(o.finished);
      CHECK(o.steps == c.steps);
      CHECK(o.final_version == c.steps);
      CHECK(o.final_parameters == expected.replicas[r].final_parameters);
    }
  }
}

TEST_CASE("a simulated PS killed before the first checkpoint resumes from the job's start, and one not back in time "
          "fails the replicas saying so", "[sim][ps]") {
  // No checkpoint yet: the PS comes back at the job's start, and the replicas kept every
  // step since (the last 2 x 4 + 2).
  auto c = make_config(cs::BuilderKind::ps_load_balancing);
  c.steps = 30;
  c.save_every = 4;
  c.kill_ps_at = 3;  // before the first checkpoint (step 4)
  c.restart_ps_after = 200ms;
  c.ps_restart_wait = 5s;
  const auto ok = run_checked(c);  // steps 0..3 are all kept: it resumes from the start
  INFO(sim::scenarios::format_report(ok));
  CHECK_THAT(ok.resumed, Catch::Contains("from the checkpoint of step 0"));
  for (const auto& o : ok.replicas) CHECK(o.finished);
  c.ps_restart_wait = 100ms;
  const auto late = run_checked(c);  // back after the replicas gave up
  INFO(sim::scenarios::format_report(late));
  for (const auto& o : late.replicas) {
    CHECK_FALSE(o.finished);
    CHECK_THAT(o.error, Catch::Contains("was not back within 100 ms"));
  }
}

TEST_CASE("the PS scenario replays its trace hash from its seed", "[sim][ps]") {
  cs::BuilderOptions options;
  options.staleness = 1;
  auto c = make_config(cs::BuilderKind::partitioned_ps, options);
  c.straggler = 30ms;
  (void)check_replays(c);
}

TEST_CASE("the PS scenario refuses bad configs", "[sim][ps]") {
  auto c = make_config(cs::BuilderKind::ps_load_balancing);
  c.min_latency = 5ms;
  c.max_latency = 1ms;
  auto r = sim::scenarios::run_ps_scenario(c);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == errc::invalid_argument);
  CHECK(r.error().message.find("latencies") != std::string::npos);
  // An all-reduce strategy runs (tests/sim/ar_sim_test.cpp), but it has no PS to kill.
  auto ar = make_config(cs::BuilderKind::all_reduce);
  ar.kill_ps_at = 0;
  r = sim::scenarios::run_ps_scenario(ar);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == errc::invalid_argument);
}

TEST_CASE("local_replication: a node's replicas pull each variable once per step through its proxy", "[sim][ps]") {
  auto spec = GENERATE(k_spec, k_two_nodes);
  const std::uint64_t nodes = spec == k_spec ? 1 : 2;
  cs::BuilderOptions options;
  options.local_proxy_variable = true;
  auto c = make_config(cs::BuilderKind::ps_load_balancing, options, spec);
  const auto report = run_checked(c);
  INFO(sim::scenarios::format_report(report));
  // One proxy per node; each pulls every shard once per step, plus the final pull.
  const auto pulls_per_node = static_cast<std::int64_t>(report.shards) * (c.steps + 1);
  REQUIRE(report.proxies.size() == nodes);
  for (const auto& p : report.proxies) {
    CHECK(p.replicas == k_replicas / nodes);
    CHECK(p.pulls == pulls_per_node);
    CHECK(p.reads == static_cast<std::int64_t>(p.replicas) * pulls_per_node);
  }
  CHECK(report.ps_pulls == nodes * static_cast<std::uint64_t>(pulls_per_node));
  // The same training as without proxies: BSP still equals single-process SGD.
  check_bsp(report);
  check_close(report, reference_sgd(c), 1e-5);
  // Without the proxies every replica pulls every shard itself.
  c.proxies = false;
  const auto direct = run_checked(c);
  CHECK(direct.proxies.empty());
  CHECK(direct.ps_pulls == k_replicas * static_cast<std::uint64_t>(pulls_per_node));
}

TEST_CASE("local_replication under SSP with a straggler keeps the bound and never stalls", "[sim][ps]") {
  cs::BuilderOptions options;
  options.local_proxy_variable = true;
  options.staleness = 2;
  auto c = make_config(cs::BuilderKind::partitioned_ps, options, k_two_nodes);
  c.straggler = 120ms;
  const auto report = run_checked(c);
  INFO(sim::scenarios::format_report(report));
  REQUIRE(report.proxies.size() == 2);
  for (const auto& r : report.replicas) CHECK(r.finished);
  for (const auto& s : report.steps) {
    for (auto v : s.versions) {
      CHECK(s.step - v <= 2);
      CHECK(v <= s.step);
    }
  }
  // Fewer PS pulls than replicas x shards x steps: the proxies served some reads.
  CHECK(report.ps_pulls < k_replicas * report.shards * static_cast<std::uint64_t>(c.steps + 1));
}

TEST_CASE("local_replication: a killed PS fails the readers waiting at a proxy too", "[sim][ps]") {
  cs::BuilderOptions options;
  options.local_proxy_variable = true;
  const auto c = make_config(cs::BuilderKind::ps_load_balancing, options);
  const auto report = run_killing(c, Kill::ps, 4);
  INFO(sim::scenarios::format_report(report));
  for (const auto& r : report.replicas) {
    CHECK_FALSE(r.finished);
    CHECK_FALSE(r.error.empty());
    CHECK(r.end < c.call_timeout);
  }
}

namespace {

/// A machine's costs, round numbers: 2 cores, 50 us links, 5 us and 0.25 ns per byte a
/// message at each end, 1 ns per gradient and loss value.
sim::CostProfile round_profile(std::size_t cores) {
  sim::CostProfile p;
  p.machine = "test";
  p.cores = cores;
  p.latency_us = 50;
  p.message_us = 5;
  p.byte_ns = 0.25;
  p.memcpy_gbps = 10;
  p.sum_ns = 0.1;
  p.sgd_ns = 0.4;
  p.adam_ns = 2.5;
  p.gradient_ns = 1.0;
  p.loss_ns = 1.0;
  p.allreduce_ns = 2.0;
  p.allreduce_fp16_ns = 8.0;
  p.allreduce_fp16_ef_ns = 9.0;
  p.secure_byte_ns = 0.5;
  p.allreduce_sparse_ns = 3.0;
  return p;
}

/// A job of `kind` over 16,384 features (64 samples, batches of 4; w's gradient sparse
/// with `sparse_w`, all-reduced or on a PS; the data at `density`) on round_profile(2) as
/// `tweak` changes it, run twice (the same trace) and finished by every replica.
sim::scenarios::PsScenarioReport profiled_run(cs::BuilderKind kind, const cs::BuilderOptions& options,
                                              const std::function<void(sim::CostProfile&)>& tweak,
                                              bool sparse_w = false, double density = 1.0) {
  auto item = core::ps::logistic_graph_item(16384);
  if (sparse_w) {
    item.variables[0].sparse = true;
    item.grad_target_pairs = {{"g/w/indices:0;g/w/values:0;g/w/shape:0", core::ps::k_logreg_weights},
                              {"gradients/logreg/b_grad:0", core::ps::k_logreg_bias}};
  }
  auto c = make_config(item, kind, options);
  c.features = 16384;
  c.samples = 64;
  c.batch = 4;
  c.density = density;
  if (sparse_w) c.sparse_variables = {core::ps::k_logreg_weights};
  auto p = round_profile(2);
  tweak(p);
  c.profile = p;
  auto report = check_replays(c);
  for (const auto& o : report.replicas) CHECK(o.finished);
  return report;
}

}  // namespace

TEST_CASE("a cost profile is written and read back, and a bad one is refused naming the field", "[sim][ps]") {
  const auto p = round_profile(2);
  auto back = sim::parse_cost_profile(sim::to_json(p), "p.json");
  REQUIRE(back.ok());
  CHECK(back->machine == "test");
  CHECK(back->cores == 2);
  CHECK(back->byte_ns == 0.25);
  CHECK(back->gradient_ns == 1.0);
  CHECK(back->allreduce_fp16_ns == 8.0);
  CHECK(back->secure_byte_ns == 0.5);
  CHECK(back->allreduce_sparse_ns == 3.0);
  CHECK(back->idle_message_us == 0.0);
  // Each field set to its own value in turn is read back.
  const std::pair<double sim::CostProfile::*, double> fields[] = {
      {&sim::CostProfile::idle_message_us, 40},         {&sim::CostProfile::idle_cpu_us_per_s, 12000},
      {&sim::CostProfile::partition_ns, 1.5},            {&sim::CostProfile::sparse_gradient_ns, 7.5},
      {&sim::CostProfile::sparse_gradient_call_ns, 0.25}, {&sim::CostProfile::sparse_loss_ns, 1.5},
      {&sim::CostProfile::allreduce_sparse_base_ns, 0.5}, {&sim::CostProfile::allreduce_sparse_row_ns, 4.0},
      {&sim::CostProfile::ps_sparse_base_ns, 0.75},       {&sim::CostProfile::ps_sparse_row_ns, 2.0},
  };
  for (const auto& [field, value] : fields) {
    auto changed = p;
    changed.*field = value;
    auto changed_back = sim::parse_cost_profile(sim::to_json(changed), "p.json");
    REQUIRE(changed_back.ok());
    CHECK((*changed_back).*field == value);
  }
  // Encrypted connections: each byte costs plaintext's and the encryption's.
  const auto encrypted = p.encrypted();
  CHECK(encrypted.byte_ns == 0.75);
  CHECK(encrypted.message(1000) - p.message(1000) == core::Duration(500));
  auto missing = sim::parse_cost_profile("{\"cores\": 2}", "p.json");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message, Catch::Contains("latency_us"));
  auto negative = sim::parse_cost_profile(
      "{\"cores\": 2, \"latency_us\": 1, \"message_us\": -1, \"byte_ns\": 1, \"memcpy_gbps\": 1, \"sum_ns\": 1, "
      "\"sgd_ns\": 1, \"adam_ns\": 1, \"gradient_ns\": 1}",
      "p.json");
  REQUIRE_FALSE(negative.ok());
  CHECK_THAT(negative.error().message, Catch::Contains("message_us: expected a number >= 0, got -1"));
  CHECK_FALSE(sim::parse_cost_profile("{\"cores\": 0}", "p.json").ok());
  CHECK_FALSE(sim::parse_cost_profile("not json", "p.json").ok());
}

TEST_CASE("with a cost profile a simulated step takes what its bytes and work cost, the cores shared", "[sim][ps]") {
  // One loopback host: its 4 replicas and PS devices share the profile's cores.
  auto step_ms = [](std::size_t features, std::size_t cores, bool encrypted = false) {
    auto c = make_config(core::ps::logistic_graph_item(features), cs::BuilderKind::ps_load_balancing);
    c.features = features;
    c.samples = 64;
    c.batch = 4;
    c.profile = encrypted ? round_profile(cores).encrypted() : round_profile(cores);
    const auto report = check_replays(c);
    for (const auto& o : report.replicas) CHECK(o.finished);
    CHECK(report.steps.back().chief_time > core::Duration::zero());
    return core::to_seconds(report.steps.back().chief_time) * 1e3;
  };
  const double small = step_ms(4096, 2), large = step_ms(65536, 2), one_core = step_ms(65536, 1);
  // Encrypted connections (the profile's secure_byte_ns on every byte): slower again.
  CHECK(step_ms(65536, 2, true) > large);
  // 16x the values: the bytes and the gradients cost more; one core for all: more again
  // (the chief's own work, most of the step, does not shrink with more cores).
  CHECK(large > 4 * small);
  CHECK(one_core > 1.1 * large);
  // The chief's step at least holds its own work: 4 x 65536 gradient values and the loss
  // over 64 x 65536, 1 ns each.
  CHECK(large > (4 + 64) * 65536 * 1e-6);
}

TEST_CASE("with a cost profile the report gives each node's processor time, adding up to the machines'", "[sim][ps]") {
  auto c = make_config(core::ps::logistic_graph_item(65536), cs::BuilderKind::ps_load_balancing);
  c.features = 65536;
  c.samples = 64;
  c.batch = 4;
  c.profile = round_profile(2);
  const auto report = check_replays(c);
  REQUIRE(report.cpu > core::Duration::zero());
  core::Duration sum{};
  std::size_t replicas = 0, servers = 0;
  for (const auto& [node, busy] : report.cpu_by_node) {
    CHECK(busy > core::Duration::zero());
    sum += busy;
    replicas += node.rfind("replica ", 0) == 0 ? 1 : 0;
    servers += node.rfind("PS ", 0) == 0 ? 1 : 0;
  }
  CHECK(sum == report.cpu);  // one machine: every node's time is its
  CHECK(replicas == report.replicas.size());
  CHECK(servers == report.servers.size());
  // The chief computes the loss over the data set besides its gradient: the most.
  CHECK(report.cpu_by_node.at(servers).second > report.cpu_by_node.at(servers + 1).second);
  CHECK_THAT(sim::scenarios::format_report(report), Catch::Contains("processor time: "));
  // Without a profile nothing is charged.
  c.profile.reset();
  const auto free = check_replays(c);
  CHECK(free.cpu == core::Duration::zero());
  CHECK(free.cpu_by_node.empty());
}

TEST_CASE("with a cost profile an all-reduced step charges each replica its compressor's work per value",
          "[sim][ps]") {
  const std::size_t features = 65536;
  auto step_ms = [&](std::optional<cs::ArCompressor> compressor, double fp16_ns) {
    cs::BuilderOptions options;
    options.compressor = compressor;
    auto c = make_config(core::ps::logistic_graph_item(features), cs::BuilderKind::all_reduce, options);
    c.features = features;
    c.samples = 16;
    c.batch = 4;
    c.profile = round_profile(2);
    c.profile->allreduce_fp16_ns = fp16_ns;
    const auto report = run_checked(c);
    return core::to_seconds(report.steps.back().chief_time) * 1e3;
  };
  const auto fp16 = pb::autodist::AllReduceSynchronizer::HorovodCompressor;
  const double none = step_ms(std::nullopt, 2.0), cheap = step_ms(fp16, 2.0), dear = step_ms(fp16, 8.0);
  // float16 at the price of float32: half the bytes, a shorter step.
  CHECK(cheap < none);
  // 6 ns more per value: at least the chief's own 6 x 65536 ns more a step.
  CHECK(dear > cheap + 6.0 * 65536 * 1e-6);
}

TEST_CASE("a sparse all-reduced variable's work is charged to the replicas at the profile's allreduce_sparse_ns",
          "[sim][ps]") {
  auto run = [](double sparse_ns) {
    return profiled_run(
        cs::BuilderKind::all_reduce, {}, [sparse_ns](sim::CostProfile& p) { p.allreduce_sparse_ns = sparse_ns; }, true);
  };
  const auto free = run(0.0), charged = run(50.0);
  // 16,384 values at 50 ns: 0.82 ms a step more for each of the 4 replicas.
  CHECK(charged.steps.back().chief_time > free.steps.back().chief_time);
  CHECK(charged.replicas.front().final_parameters == free.replicas.front().final_parameters);
}

TEST_CASE("on sparse data the gradient and the loss are charged per value other than zero, a sparse variable's "
          "rows per row value gathered or sent", "[sim][ps]") {
  // 16,384 features at density 0.01: 164 values a sample; 4 replicas, batches of 4.
  const double k = 164, d = 16384, batch = 4, replicas = 4, samples = 64;
  const double touched_one = 1.0 - std::pow(1.0 - k / d, batch);
  const auto run = [](cs::BuilderKind kind, const std::function<void(sim::CostProfile&)>& tweak) {
    return profiled_run(kind, {}, tweak, true, 0.01);
  };
  const auto none = [](sim::CostProfile&) {};
  const auto base = run(cs::BuilderKind::all_reduce, none);
  const double steps = static_cast<double>(base.steps.size());
  REQUIRE(base.replicas.size() == 4);
  // The dense figures do not apply.
  CHECK(run(cs::BuilderKind::all_reduce, [](sim::CostProfile& p) { p.gradient_ns = 50; p.loss_ns = 50; }).cpu ==
        base.cpu);
  // Each replica's gradient: 4 x 164 values at 50 ns a step, and w cleared at 1 ns a value.
  const auto gradient = run(cs::BuilderKind::all_reduce, [](sim::CostProfile& p) {
    p.sparse_gradient_ns = 50;
    p.sparse_gradient_call_ns = 1;
  });
  const double gradient_s = steps * replicas * (batch * k * 50e-9 + d * 1e-9);
  CHECK(core::to_seconds(gradient.cpu - base.cpu) >= 0.99 * gradient_s);
  CHECK(core::to_seconds(gradient.cpu - base.cpu) <= 1.01 * gradient_s + 1e-6);
  // The chief's loss: 64 x 164 values at 50 ns a step.
  const auto loss = run(cs::BuilderKind::all_reduce, [](sim::CostProfile& p) { p.sparse_loss_ns = 50; });
  CHECK(core::to_seconds(loss.cpu - base.cpu) >= 0.99 * steps * samples * k * 50e-9);
  CHECK(core::to_seconds(loss.cpu - base.cpu) <= 1.01 * steps * samples * k * 50e-9 + 1e-6);
  // All-reduced: every replica gathers the 4 replicas' touched rows, 100 ns a value (the
  // distinct columns of a batch, which the trainer counts, vary about their expectation).
  const auto gathered = run(cs::BuilderKind::all_reduce, [](sim::CostProfile& p) { p.allreduce_sparse_row_ns = 100; });
  const double gathered_s = steps * replicas * d * touched_one * replicas * 100e-9;
  CHECK(core::to_seconds(gathered.cpu - base.cpu) >= 0.9 * gathered_s);
  CHECK(core::to_seconds(gathered.cpu - base.cpu) <= 1.1 * gathered_s);
  // On a PS (Parallax puts a sparse variable there, b all-reduced): a replica sends its
  // touched rows, 100 ns a value; the shard sums and updates only the step's touched rows.
  const auto ps = run(cs::BuilderKind::parallax, none);
  const auto sent = run(cs::BuilderKind::parallax, [](sim::CostProfile& p) { p.ps_sparse_row_ns = 100; });
  const double sent_s = static_cast<double>(ps.steps.size()) * replicas * d * touched_one * 100e-9;
  CHECK(core::to_seconds(sent.cpu - ps.cpu) >= 0.9 * sent_s);
  CHECK(core::to_seconds(sent.cpu - ps.cpu) <= 1.1 * sent_s);
  const auto updated = run(cs::BuilderKind::parallax, [](sim::CostProfile& p) { p.sgd_ns = 100; });
  const auto dense_updated =
      profiled_run(cs::BuilderKind::parallax, {}, [](sim::CostProfile& p) { p.sgd_ns = 100; }, true);
  const auto dense_ps = profiled_run(cs::BuilderKind::parallax, {}, none, true);
  CHECK(updated.cpu - ps.cpu < (dense_updated.cpu - dense_ps.cpu) / 5);
  // What is charged changes the time, not the training.
  CHECK(gathered.replicas.front().final_parameters == base.replicas.front().final_parameters);
}

TEST_CASE("a partitioned all-reduced variable is charged its cut and reassembly at partition_ns, unless it travels "
          "whole", "[sim][ps]") {
  auto run = [](std::int64_t chunk_size, double partition_ns) {
    cs::BuilderOptions options;
    options.chunk_size = chunk_size;
    return profiled_run(cs::BuilderKind::partitioned_ar, options,
                        [partition_ns](sim::CostProfile& p) { p.partition_ns = partition_ns; });
  };
  // One fusion group (w's pieces one after the other): w travels whole, nothing charged.
  const auto fused = run(128, 0), fused_charged = run(128, 50);
  CHECK(fused_charged.cpu == fused.cpu);
  // A group per piece: w's 16,384 values at 50 ns, for each replica and step.
  const auto apart = run(1, 0), apart_charged = run(1, 50);
  const double steps = static_cast<double>(apart.steps.size()), replicas = static_cast<double>(apart.replicas.size());
  CHECK(core::to_seconds(apart_charged.cpu - apart.cpu) >= steps * replicas * 16384 * 50e-9 * 0.99);
  CHECK(apart_charged.replicas.front().final_parameters == apart.replicas.front().final_parameters);
  CHECK(fused.replicas.front().final_parameters == apart.replicas.front().final_parameters);
}

TEST_CASE("a profile's idle costs: each process's load a second, and the wake-ups of a message that finds its node "
          "idle, charged as processor time beside the work", "[sim][ps]") {
  auto run = [](double idle_message_us, double idle_cpu_us_per_s) {
    return profiled_run(cs::BuilderKind::partitioned_ps, {}, [=](sim::CostProfile& p) {
      p.idle_message_us = idle_message_us;
      p.idle_cpu_us_per_s = idle_cpu_us_per_s;
    });
  };
  const auto free = run(0, 0), woken = run(50, 0), loaded = run(0, 20000);
  // Each replica's pull and push answers come to it idle, waiting for them: at least 2
  // x 50 us each a step more.
  const double steps = static_cast<double>(free.steps.size()), nodes = static_cast<double>(
                                                                     free.replicas.size() + free.servers.size());
  CHECK(core::to_seconds(woken.cpu - free.cpu) >= steps * static_cast<double>(free.replicas.size()) * 2 * 50e-6);
  // 2% of a core for each process, over the run (charged every 10 ms: the last part of
  // one may not be).
  CHECK(core::to_seconds(loaded.cpu - free.cpu) >= 0.02 * nodes * (core::to_seconds(free.virtual_time) - 0.01));
  for (const auto* r : {&woken, &loaded}) {
    CHECK(r->replicas.front().final_parameters == free.replicas.front().final_parameters);
    CHECK(r->steps.back().chief_time >= free.steps.back().chief_time);  // the cores shared with them
  }
}
