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
using namespace std::chrono_literals;
namespace cs = core::strategy;
namespace cps = core::ps;

namespace {

using namespace testing::ps_job;

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

/// The job's PS processes, listening; `peers` is what the replicas pass as --peers.
struct Servers {
  std::vector<std::unique_ptr<testing::Process>> procs;
  std::vector<std::string> devices;
  std::string peers;

  ~Servers() {
    for (auto& p : procs) p->kill(SIGTERM);
  }
};

void start_servers(const Job& job, const std::string& extra, Servers& s) {
  for (const auto& device : job.plan.servers) {
    auto p = spawn_ps("--role ps --stop-on-stdin-eof --device " + device + " " + common_args(job) + extra);
    std::string seen;
    auto line = read_until(*p, " listening ", 30s, seen);
    INFO("ps " << device << " printed:\n" << seen);
    REQUIRE(line);
    const std::string rest = line->substr(line->find(" listening ") + 11);
    s.peers += " " + device + "=" + rest.substr(0, rest.find(' '));
    s.devices.push_back(device);
    s.procs.push_back(std::move(p));
  }
}

/// Four replica processes, each told the PS addresses and every replica's address.
std::vector<std::unique_ptr<testing::Process>> start_replicas(const Job& job, const Servers& s,
                                                              const std::string& extra) {
  std::string replicas;
  for (int r = 0; r < k_replicas; ++r) {
    replicas += fmt::format(" replica:localhost:CPU:{}=127.0.0.1:{}", r, testing::free_loopback_port());
  }
  std::vector<std::unique_ptr<testing::Process>> out;
  for (int r = 0; r < k_replicas; ++r) {
    const std::string role = r == 0 ? "--role chief" : "--role worker --replica " + std::to_string(r);
    out.push_back(spawn_ps(role + " --stop-on-stdin-eof " + common_args(job) + " --peers" + s.peers + replicas + " " +
                           extra));
  }
  return out;
}

void check_close(const Run& run, const std::map<std::string, std::vector<float>>& expected, int replica = -1) {
  for (const auto& [name, values] : expected) {
    const auto got = final_values(run, name, replica);
    REQUIRE(got.size() == values.size());
    for (std::size_t i = 0; i < values.size(); ++i) CHECK(got[i] == Approx(values[i]).margin(1e-5));
  }
}

/// The versions of every "step S replica R version V" line equal S (BSP).
void check_bsp(const Run& run) {
  std::int64_t steps = 0;
  for (const auto& line : run.lines) {
    std::istringstream in(line);
    std::string w1, w2, w3;
    std::int64_t step = 0, replica = 0, version = 0;
    if (in >> w1 >> step >> w2 >> replica >> w3 >> version && w1 == "step" && w3 == "version") {
      CHECK(version == step);
      ++steps;
    }
  }
  CHECK(steps > 0);
}

}  // namespace

TEST_CASE("Parallax over a PS process and 4 replica processes equals single-process SGD", "[mixed][integration]") {
  const Job job = make_parallax_job("parallax");
  REQUIRE(job.plan.servers.size() == 1);
  REQUIRE(job.plan.variables.size() == 1);
  CHECK(job.plan.variables[0].sparse);
  Servers servers;
  start_servers(job, k_sparse, servers);
  const std::int64_t steps = 10;
  auto procs = start_replicas(job, servers, "--steps " + std::to_string(steps) + k_sparse);
  std::vector<Run> runs;
  for (auto& p : procs) runs.push_back(finish(*p));
  const auto expected = reference_sgd(steps);
  for (int r = 0; r < k_replicas; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    CHECK(runs[r].text.find(fmt::format("mixed plan: PS [{} (sparse) on {}]; all-reduce [{}]", cps::k_logreg_weights,
                                        servers.devices[0], cps::k_logreg_bias)) != std::string::npos);
    // One collective per step: b alone (w travels through the PS).
    CHECK(runs[r].text.find(fmt::format("collectives {}", steps)) != std::string::npos);
    check_bsp(runs[r]);
    check_close(runs[r], expected);
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
  for (int r = 0; r < k_replicas; ++r) check_close(run, expected, r);
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
  for (int r = 0; r < k_replicas; ++r) check_close(last, expected, r);
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
  for (int r = 0; r < k_replicas; ++r) check_close(run, expected, r);
}

TEST_CASE("a killed PS process ends every replica of a mixed job with an error naming it", "[mixed][integration]") {
  const Job job = make_parallax_job("killps");
  Servers servers;
  start_servers(job, k_sparse, servers);
  auto procs = start_replicas(job, servers, "--steps 100000 --step-delay-ms 5 --timeout-ms 20000" + k_sparse);
  std::string chief_text;
  REQUIRE(read_until(*procs[0], "step 3 ", 60s, chief_text));
  servers.procs[0]->kill(SIGKILL);
  REQUIRE(servers.procs[0]->wait(10s) == 128 + SIGKILL);
  bool named_dead = false;
  for (int r = 0; r < k_replicas; ++r) {
    const auto run = finish(*procs[r]);
    INFO("replica " << r << " printed:\n" << run.text);
    REQUIRE(run.rc == 1);
    CHECK(run.text.find("apiary ps: ") != std::string::npos);
    // Replicas waiting on the PS name it; one waiting in the collective may instead
    // name the replica that left it first.
    if (run.text.find("on PS " + servers.devices[0]) != std::string::npos) named_dead = true;
  }
  CHECK(named_dead);
}

TEST_CASE("a killed replica ends the other replicas of a mixed job with an error naming it",
          "[mixed][integration]") {
  const Job job = make_parallax_job("killreplica");
  Servers servers;
  start_servers(job, k_sparse, servers);
  auto procs = start_replicas(job, servers, "--steps 100000 --step-delay-ms 5 --timeout-ms 20000" + k_sparse);
  std::string seen;
  REQUIRE(read_until(*procs[k_replicas - 1], "step 3 ", 60s, seen));
  procs[k_replicas - 1]->kill(SIGKILL);
  REQUIRE(procs[k_replicas - 1]->wait(10s) == 128 + SIGKILL);
  for (int r = 0; r < k_replicas - 1; ++r) {
    const auto run = finish(*procs[r]);
    INFO("replica " << r << " printed:\n" << run.text);
    REQUIRE(run.rc == 1);
    // The PS ends the step for the lost session ("replica 3 at ... went down"), or the
    // collective reports its member gone ("rank 3").
    CHECK((run.text.find("replica 3 at ") != std::string::npos || run.text.find("rank 3") != std::string::npos));
  }
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
