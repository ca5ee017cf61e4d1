// Mixed strategies under `apiary ps`: Parallax (the sparse variable on a PS, the dense
// one all-reduced) with one PS process and four replica processes over UCX on loopback,
// and embedded; a hand-written strategy the other way round (the dense weights
// all-reduced, the bias on a PS). Bulk-synchronous, so every run equals single-process
// SGD on the concatenated batch. A killed PS process or replica ends the others with an
// error naming it; a replica without the other replicas' addresses is refused.
#include <catch2/catch.hpp>

#include <csignal>
#include <fstream>
#include <tuple>
#include <sstream>

#include "core/collective/ar_plan.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/ps/plan.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/strategy_io.hpp"
#include "tests/integration/ps_job.hpp"
#include "tests/support/process.hpp"

using namespace apiary;
using namespace apiary::testing::ps_job;
using namespace std::chrono_literals;

namespace {

/// `--sparse logreg/w:0`: every process of a Parallax job with a sparse w takes it.
const std::string k_sparse = std::string(" --sparse ") + cps::k_logreg_weights;

/// The strategy of `job` as written.
pb::autodist::Strategy read_strategy(const Job& job) {
  std::ifstream in(job.strategy, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto strategy = cs::parse_strategy(bytes, cs::StrategyFormat::binary, job.strategy);
  REQUIRE(strategy.ok());
  return *strategy;
}

/// A Parallax job over a model whose w is sparse: w on a PS, b all-reduced; job.plan is
/// the plan of its PS part.
Job make_parallax_job(const std::string& name) {
  Job job = make_job(cs::BuilderKind::parallax, {}, name, false, {cps::k_logreg_weights});
  auto item = cps::logistic_graph_item(k_features);
  item.variables[0].sparse = true;
  REQUIRE(item.variables[0].name == cps::k_logreg_weights);
  cps::OptimizerConfig sgd;
  sgd.learning_rate = k_learning_rate;
  auto plan = cps::plan_training(core::collective::ps_part(read_strategy(job)), item, sgd);
  REQUIRE(plan.ok());
  job.plan = std::move(*plan);
  return job;
}

/// Four replica processes, each told the PS addresses and every replica's address.
std::vector<std::unique_ptr<testing::Process>> start_mixed_replicas(const Job& job, const Servers& s,
                                                                    const std::string& extra) {
  return start_replicas(job, s.peers + loopback_peers("replica:localhost:CPU"), extra);
}

/// The versions of every "step S replica R version V" line equal S (BSP).
void check_bsp(const Run& run) {
  const auto sv = step_versions(run);
  for (const auto& [step, version] : sv) CHECK(version == step);
  CHECK(!sv.empty());
}

}  // namespace

TEST_CASE("Parallax over a PS process and 4 replica processes equals single-process SGD", "[mixed][integration]") {
  const Job job = make_parallax_job("parallax");
  REQUIRE(job.plan.servers.size() == 1);
  REQUIRE(job.plan.variables.size() == 1);
  CHECK(job.plan.variables[0].sparse);
  Servers servers;
  start_servers(job, servers, k_sparse);
  const std::int64_t steps = 10;
  const auto runs = finish_all(start_mixed_replicas(job, servers, "--steps " + std::to_string(steps) + k_sparse));
  const auto expected = reference_sgd(steps);
  for (int r = 0; r < k_replicas; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    CHECK(runs[r].text.find(fmt::format("mixed plan: PS [{} (sparse) on {}]; all-reduce [{}]", cps::k_logreg_weights,
                                        servers.devices[0], cps::k_logreg_bias)) != std::string::npos);
    // One collective per step: b alone (w travels through the PS).
    CHECK(runs[r].text.find(fmt::format("collectives {}", steps)) != std::string::npos);
    check_bsp(runs[r]);
    check_close(runs[r], expected, 1e-5);
    for (const auto& [name, values] : expected) CHECK(final_values(runs[r], name) == final_values(runs[0], name));
    CHECK(runs[r].text.find("apiary ps:") == std::string::npos);
  }
}

TEST_CASE("an embedded Parallax job equals single-process SGD", "[mixed][integration]") {
  const Job job = make_parallax_job("parallax_embedded");
  const std::int64_t steps = 8;
  auto p = spawn_ps("--embedded " + common_args(job) + " --steps " + std::to_string(steps) + k_sparse);
  const auto run = finish(*p);
  INFO(run.text);
  REQUIRE(run.rc == 0);
  CHECK(run.text.find("mixed plan: PS [logreg/w:0 (sparse)") != std::string::npos);
  check_bsp(run);
  const auto expected = reference_sgd(steps);
  for (int r = 0; r < k_replicas; ++r) check_close(run, expected, 1e-5, r);
}

TEST_CASE("a checkpoint carries training from an all-reduce job to a mixed one to a PS one, equal to SGD",
          "[mixed][integration]") {
  // Four steps each: AllReduce, saved; Parallax (w sparse on a PS, b all-reduced) from it,
  // saved; PSLoadBalancing from that. Twelve steps of SGD in all, on steps 0-11's data.
  const std::int64_t steps = 4;
  const Job ar = make_job(cs::BuilderKind::all_reduce, {}, "ckpt_ar", false);
  const Job mixed = make_parallax_job("ckpt_mixed");
  const Job ps = make_job(cs::BuilderKind::ps_load_balancing, {}, "ckpt_ps", true);
  const std::string after_ar = ar.dir + "/ar.ckpt", after_mixed = mixed.dir + "/mixed.ckpt";
  const std::string n = " --steps " + std::to_string(steps);
  const std::vector<std::tuple<const Job*, std::string, std::string>> legs = {
      {&ar, n + " --save " + after_ar, "checkpoint " + after_ar + " step 4"},
      {&mixed, n + k_sparse + " --restore " + after_ar + " --save " + after_mixed,
       "checkpoint " + after_mixed + " step 8"},
      {&ps, n + " --restore " + after_mixed, ""},
  };
  Run last;
  for (const auto& [job, args, saved] : legs) {
    auto p = spawn_ps("--embedded " + common_args(*job) + args);
    last = finish(*p);
    INFO(last.text);
    REQUIRE(last.rc == 0);
    if (!saved.empty()) CHECK(last.text.find(saved) != std::string::npos);
  }
  INFO(last.text);
  const auto expected = reference_sgd(3 * steps);
  for (int r = 0; r < k_replicas; ++r) check_close(last, expected, 1e-5, r);
}

TEST_CASE("a hand-written mixed strategy (w all-reduced, b on a PS) runs embedded, equal to SGD",
          "[mixed][integration]") {
  Job job = make_job(cs::BuilderKind::all_reduce, {}, "handmixed", false);
  auto strategy = read_strategy(job);
  bool moved = false;
  for (auto& node : *strategy.mutable_node_config()) {
    if (node.var_name() != cps::k_logreg_bias) continue;
    node.clear_allreducesynchronizer();
    node.mutable_pssynchronizer()->set_reduction_destination("localhost:CPU:1");
    node.mutable_pssynchronizer()->set_sync(true);
    moved = true;
  }
  REQUIRE(moved);
  auto bytes = cs::serialize_strategy(strategy, job.strategy, cs::StrategyFormat::binary);
  REQUIRE(bytes.ok());
  std::ofstream(job.strategy, std::ios::binary | std::ios::trunc) << *bytes;
  const std::int64_t steps = 8;
  auto p = spawn_ps("--embedded " + common_args(job) + " --steps " + std::to_string(steps));
  const auto run = finish(*p);
  INFO(run.text);
  REQUIRE(run.rc == 0);
  CHECK(run.text.find("mixed plan: PS [logreg/b:0 on localhost:CPU:1]; all-reduce [logreg/w:0]") !=
        std::string::npos);
  CHECK(run.text.find("ps localhost:CPU:1 embedded") != std::string::npos);
  const auto expected = reference_sgd(steps);
  for (int r = 0; r < k_replicas; ++r) check_close(run, expected, 1e-5, r);
}

TEST_CASE("a killed PS process ends every replica of a mixed job with an error naming it", "[mixed][integration]") {
  const Job job = make_parallax_job("killps");
  Servers servers;
  start_servers(job, servers, k_sparse);
  auto procs = start_mixed_replicas(job, servers, "--steps 100000 --step-delay-ms 5 --timeout-ms 20000" + k_sparse);
  std::string chief_text;
  REQUIRE(read_until(*procs[0], "step 3 ", 60s, chief_text));
  const auto runs = kill_then_finish(*servers.procs[0], procs, k_replicas);
  const bool named_dead = each_failed(runs, [&](const Run& run) {
    CHECK(run.text.find("apiary ps: ") != std::string::npos);
    // Replicas waiting on the PS name it; one waiting in the collective may instead
    // name the replica that left it first.
    return run.text.find("on PS " + servers.devices[0]) != std::string::npos;
  });
  CHECK(named_dead);
}

TEST_CASE("a killed replica ends the other replicas of a mixed job with an error naming it",
          "[mixed][integration]") {
  const Job job = make_parallax_job("killreplica");
  Servers servers;
  start_servers(job, servers, k_sparse);
  auto procs = start_mixed_replicas(job, servers, "--steps 100000 --step-delay-ms 5 --timeout-ms 20000" + k_sparse);
  std::string seen;
  REQUIRE(read_until(*procs[k_replicas - 1], "step 3 ", 60s, seen));
  const auto runs = kill_then_finish(*procs[k_replicas - 1], procs, k_replicas - 1);
  each_failed(runs, [](const Run& run) {
    // The PS ends the step for the lost session ("replica 3 at ... went down"), or the
    // collective reports its member gone ("rank 3").
    CHECK((run.text.find("replica 3 at ") != std::string::npos || run.text.find("rank 3") != std::string::npos));
    return true;
  });
}

TEST_CASE("a mixed job's replica needs every replica's replica: address", "[mixed][integration]") {
  const Job job = make_parallax_job("usage");
  auto p = spawn_ps("--role chief " + common_args(job) + k_sparse +
                    " --peers localhost:CPU:0=127.0.0.1:7000 replica:localhost:CPU:0=127.0.0.1:7001");
  const auto run = finish(*p);
  INFO(run.text);
  CHECK(run.rc == 2);
  CHECK(run.text.find("replica:DEVICE=HOST:PORT") != std::string::npos);
  CHECK(run.text.find("localhost:CPU:1") != std::string::npos);
}
