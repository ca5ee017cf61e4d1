// All-reduce strategies on the simulated network (sim/scenarios/ps_scenario.hpp, reached
// through run_ps_scenario): with NoneCompressor, AllReduce, PartitionedAR and
// RandomAxisPartitionAR equal single-process SGD on the concatenated batch; fp16 on the
// wire keeps every replica bit-identical; sparse variables gathered as rows equal SGD
// too; fp16 with error feedback lands next to it; a killed replica ends the others with an error
// naming it (never a hang); a seed replays its trace hash.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>

#include "core/ps/logistic_regression.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/resource_spec.hpp"
#include "sim/scenarios/ps_scenario.hpp"
#include "tests/sim/ps_job_config.hpp"

using namespace apiary;
using namespace apiary::testing::sim_ps;
using namespace std::chrono_literals;

namespace {

PsScenarioReport run(const PsScenarioConfig& c) {
  auto report = run_checked(c);
  CHECK(report.servers.empty());
  return report;
}

/// Every replica holds the same model, bit for bit: each took the same encoded averages.
void check_identical(const PsScenarioReport& report) {
  for (const auto& r : report.replicas) {
    REQUIRE(r.finished);
    for (const auto& [name, values] : report.replicas.front().final_parameters) {
      const auto& got = r.final_parameters.at(name);
      REQUIRE(got.size() == values.size());
      for (std::size_t i = 0; i < values.size(); ++i) {
        INFO(name << "[" << i << "] of replica " << r.replica << " vs replica 0");
        CHECK(std::memcmp(&got[i], &values[i], sizeof(float)) == 0);
      }
    }
  }
}

}  // namespace

TEST_CASE("simulated AllReduce (RING, NoneCompressor) equals single-process SGD on the concatenated batch",
          "[sim][allreduce]") {
  // chunk_size 1: w and b in two groups (two collectives per step); 128: one fused collective.
  const std::int64_t chunk = GENERATE(1, 128);
  auto c = make_config(cs::BuilderKind::all_reduce, testing::ar_options(chunk, Sync::RING));
  c.min_latency = 1ms;
  c.max_latency = 20ms;
  const auto report = run(c);
  INFO(sim::scenarios::format_report(report));
  CHECK(report.mode.find(fmt::format("all-reduce, {} collectives per step", testing::collectives_per_step(chunk))) == 0);
  CHECK(report.mode.find("NoneCompressor") != std::string::npos);
  REQUIRE(report.steps.size() == static_cast<std::size_t>(c.steps));
  check_bsp(report);
  for (const auto& s : report.steps) CHECK(s.max_time >= c.compute);
  CHECK(report.steps.back().loss < report.steps.front().loss);
  check_close(report, reference_sgd(c), 1e-5);
  check_identical(report);
}

TEST_CASE("simulated HorovodCompressor (fp16 on the wire) keeps every replica bit-identical", "[sim][allreduce]") {
  const std::int64_t chunk = GENERATE(1, 128);
  auto c = make_config(cs::BuilderKind::all_reduce, testing::ar_options(chunk, std::nullopt, Sync::HorovodCompressor));
  c.steps = 20;
  c.straggler = 15ms;
  const auto report = run(c);
  INFO(sim::scenarios::format_report(report));
  CHECK(report.mode.find("HorovodCompressor]") != std::string::npos);
  check_close(report, reference_sgd(c), 2e-2);
  check_identical(report);
}

TEST_CASE("simulated sparse variables are all-gathered as rows and averaged: equal to single-process SGD",
          "[sim][allreduce]") {
  // w sparse (gathered), b dense (a mean); or both sparse (one gather, no mean).
  const bool both = GENERATE(false, true);
  cs::BuilderOptions o;
  o.all_reduce_spec = Sync::RING;
  auto c = make_config(cs::BuilderKind::all_reduce, o);
  c.sparse_variables = {cps::k_logreg_weights};
  if (both) c.sparse_variables.push_back(cps::k_logreg_bias);
  c.straggler = 20ms;
  const auto report = run(c);
  INFO(sim::scenarios::format_report(report));
  CHECK(report.mode.find(fmt::format("all-reduce, {} collectives per step", both ? 1 : 2)) == 0);
  CHECK(report.mode.find("gather [logreg/w:0 sparse]") != std::string::npos);
  check_close(report, reference_sgd(c), 1e-5);
  check_identical(report);
  auto bad = c;
  bad.sparse_variables = {"nope:0"};
  auto refused = sim::scenarios::run_ps_scenario(bad);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("nope:0") != std::string::npos);
}

TEST_CASE("simulated PartitionedAR and RandomAxisPartitionAR equal single-process SGD", "[sim][allreduce]") {
  const auto kind = GENERATE(cs::BuilderKind::partitioned_ar, cs::BuilderKind::random_axis_partition_ar);
  auto c = make_config(kind);
  c.straggler = 40ms;  // the fast replicas open their streams early; they are held, not lost
  const auto report = run(c);
  INFO(sim::scenarios::format_report(report));
  if (kind == cs::BuilderKind::partitioned_ar) CHECK(report.mode.find("part_") != std::string::npos);
  check_close(report, reference_sgd(c), 1e-5);
}

TEST_CASE("simulated HorovodCompressorEF (fp16 on the wire) trains next to uncompressed SGD", "[sim][allreduce]") {
  cs::BuilderOptions o;
  o.compressor = Sync::HorovodCompressorEF;
  auto c = make_config(cs::BuilderKind::all_reduce, o);
  c.steps = 30;
  const auto report = run(c);
  INFO(sim::scenarios::format_report(report));
  CHECK(report.mode.find("HorovodCompressorEF") != std::string::npos);
  check_close(report, reference_sgd(c), 2e-2);
}

TEST_CASE("a simulated all-reduce replica killed mid-training ends the others with an error naming it",
          "[sim][allreduce]") {
  cs::BuilderOptions o;
  o.all_reduce_spec = Sync::RING;
  auto c = make_config(cs::BuilderKind::all_reduce, o);
  c.steps = 1000;
  c.kill_replica_at = 3;
  const auto report = run(c);
  INFO(sim::scenarios::format_report(report));
  CHECK(report.killed.find("replica 3 at step 3") == 0);
  CHECK(report.replicas.back().killed);
  for (const auto* o : others_failed(report, {"peer_down", "rank 3 (/ip4/10.0.0.3/tcp/7000)"})) {
    CHECK(o->steps <= 5);
    // The broken connection ends the run long before any all-reduce deadline.
    CHECK(o->end < c.call_timeout / 4);
  }
}

TEST_CASE("without failure detection, the all-reduce timeouts still end a killed replica's job", "[sim][allreduce]") {
  auto c = make_config(cs::BuilderKind::all_reduce);
  c.steps = 1000;
  c.kill_replica_at = 2;
  c.failure_detection = std::chrono::hours(2);  // never within the run
  c.call_timeout = 4s;
  const auto report = run(c);
  INFO(sim::scenarios::format_report(report));
  (void)others_failed(report, {"peer_down", "rank 3 (/ip4/10.0.0.3/tcp/7000)"});
}

TEST_CASE("the all-reduce scenario replays its trace hash from its seed", "[sim][allreduce]") {
  auto c = make_config(cs::BuilderKind::partitioned_ar);
  c.straggler = 30ms;
  CHECK(check_replays(c).servers.empty());
}

TEST_CASE("the all-reduce scenario refuses a PS kill: there is no PS", "[sim][allreduce]") {
  auto c = make_config(cs::BuilderKind::all_reduce);
  c.kill_ps_at = 1;
  auto r = sim::scenarios::run_ps_scenario(c);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == errc::invalid_argument);
  CHECK(r.error().message.find("kill_ps_at") != std::string::npos);
}
