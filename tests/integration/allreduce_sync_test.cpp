// All-reduce strategies under `apiary ps`: four replica processes (no PS processes)
// average their gradients each step through the collective over UCX on loopback and
// apply SGD locally. With NoneCompressor the result equals single-process SGD on the
// concatenated batch; with HorovodCompressor (fp16 on the wire) the replicas stay
// bit-identical; a sparse variable gathered as rows equals SGD too; with
// HorovodCompressorEF (error feedback) the model still converges to nearly the same
// point; a killed replica ends the others with an error naming it; --embedded runs the
// same job in one process.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <netinet/in.h>
#include <sstream>
#include <sys/socket.h>
#include <unistd.h>

#include "core/ps/logistic_regression.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/strategy_io.hpp"
#include "tests/integration/ps_job.hpp"
#include "tests/support/process.hpp"

using namespace apiary;
using namespace apiary::testing::ps_job;
using namespace std::chrono_literals;

namespace {

/// An all-reduce job (or `kind`) with `options`, in a directory named after `name`.
Job make_ar_job(cs::BuilderOptions options, const std::string& name, cs::BuilderKind kind = cs::BuilderKind::all_reduce) {
  return make_job(kind, options, name, false);
}


/// Four replica processes, each told every replica's address.
std::vector<std::unique_ptr<testing::Process>> start_ar_replicas(const Job& job, const std::string& extra) {
  return start_replicas(job, loopback_peers("localhost:CPU"), extra);
}

/// Four replica processes of `job`, w sparse, `steps` steps with
/// `extra` arguments: each exits 0, gathers w as rows and ends at `expected`. Their runs.
std::vector<Run> sparse_ar_runs(const Job& job, std::int64_t steps, const std::string& extra,
                                const std::map<std::string, std::vector<float>>& expected) {
  const auto runs = finish_all(start_ar_replicas(
      job, fmt::format("--steps {} --sparse {} {}", steps, cps::k_logreg_weights, extra)));
  for (int r = 0; r < k_replicas; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    CHECK(runs[r].text.find("gather [logreg/w:0 sparse]") != std::string::npos);
    check_close(runs[r], expected, 1e-5);
  }
  return runs;
}

/// A RING all-reduce job named `name`.
Job ring_job(const std::string& name) {
  cs::BuilderOptions o;
  o.all_reduce_spec = Sync::RING;
  return make_ar_job(o, name);
}

}  // namespace

TEST_CASE("AllReduce over 4 replica processes equals single-process SGD on the concatenated batch",
          "[allreduce][integration]") {
  // chunk_size 1: w and b in two groups (two collectives per step); 128: one fused collective.
  const std::int64_t chunk = GENERATE(1, 128);
  const Job job = make_ar_job(testing::ar_options(chunk, Sync::RING), "exact" + std::to_string(chunk));
  const std::int64_t steps = 12;
  const auto runs = finish_all(start_ar_replicas(job, "--steps " + std::to_string(steps)));
  const auto expected = reference_sgd(steps);
  const std::int64_t groups = testing::collectives_per_step(chunk);
  for (int r = 0; r < k_replicas; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    CHECK(runs[r].text.find(fmt::format("{} collectives per step", groups)) != std::string::npos);
    CHECK(runs[r].text.find(fmt::format("collectives {}", steps * groups)) != std::string::npos);
    check_close(runs[r], expected, 1e-5);
    // Every replica left cleanly: nobody was still waiting for another's answers.
    CHECK(runs[r].text.find("apiary ps:") == std::string::npos);
  }
}

TEST_CASE("HorovodCompressorEF over 4 replica processes converges next to uncompressed SGD",
          "[allreduce][integration]") {
  cs::BuilderOptions o;
  o.all_reduce_spec = Sync::AUTO;
  o.compressor = Sync::HorovodCompressorEF;
  const Job job = make_ar_job(o, "ef");
  const std::int64_t steps = 30;
  const auto runs = finish_all(start_ar_replicas(job, "--steps " + std::to_string(steps)));
  const auto expected = reference_sgd(steps);
  const auto data = cps::make_logistic_data(k_samples, k_features, 1);
  const double start_loss = cps::logistic_full_loss(data, cps::logistic_initial(k_features));
  const double sgd_loss = cps::logistic_full_loss(data, expected);
  for (int r = 0; r < k_replicas; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    CHECK(runs[r].text.find("HorovodCompressorEF") != std::string::npos);
    // fp16 on the wire moves the parameters by at most a few fp16 roundings.
    check_close(runs[r], expected, 2e-2);
    std::map<std::string, std::vector<float>> params;
    for (const auto& [name, values] : expected) params[name] = final_values(runs[r], name);
    const double loss = cps::logistic_full_loss(data, params);
    CHECK(loss < 0.7 * start_loss);
    CHECK(loss == Approx(sgd_loss).margin(1e-2));
  }
}

TEST_CASE("HorovodCompressor (fp16 on the wire) keeps the 4 replica processes bit-identical",
          "[allreduce][integration]") {
  // Two groups (w and b apart) and one fused group: every replica must end with the same bits.
  const std::int64_t chunk = GENERATE(1, 128);
  const Job job = make_ar_job(testing::ar_options(chunk, Sync::RING, Sync::HorovodCompressor), "fp16_" + std::to_string(chunk));
  const std::int64_t steps = 20;
  const auto runs = finish_all(start_ar_replicas(job, "--steps " + std::to_string(steps)));
  const auto expected = reference_sgd(steps);
  for (int r = 0; r < k_replicas; ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    CHECK(runs[r].text.find("HorovodCompressor") != std::string::npos);
    check_close(runs[r], expected, 2e-2);
    // The printed values (9 significant digits) tell float32 values apart exactly.
    for (const auto& [name, values] : expected) {
      const auto mine = final_values(runs[r], name);
      const auto first = final_values(runs[0], name);
      REQUIRE(mine.size() == first.size());
      for (std::size_t i = 0; i < mine.size(); ++i) {
        INFO(name << "[" << i << "] of replica " << r << " vs replica 0");
        CHECK(std::memcmp(&mine[i], &first[i], sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("a killed replica ends the other replicas' all-reduce with an error naming it", "[allreduce][integration]") {
  cs::BuilderOptions o;
  o.all_reduce_spec = Sync::RING;
  const Job job = make_ar_job(o, "kill");
  auto procs = start_ar_replicas(job, "--steps 100000 --step-delay-ms 5 --timeout-ms 3000");
  // Let the job run a few steps, then kill replica 3.
  int seen = 0;
  while (auto line = procs[k_replicas - 1]->read_line(60s)) {
    if (line->rfind("step ", 0) == 0 && ++seen == 5) break;
  }
  REQUIRE(seen == 5);
  const auto runs = kill_then_finish(*procs[k_replicas - 1], procs, k_replicas - 1);
  each_failed(runs, [](const Run& run) {
    CHECK(run.text.find("peer_down") != std::string::npos);
    CHECK(run.text.find("rank 3") != std::string::npos);
    return true;
  });
}

TEST_CASE("an embedded all-reduce job equals single-process SGD, NCCL runs as RING without GPUs",
          "[allreduce][integration]") {
  const Job job = make_ar_job({}, "embedded");  // the AllReduce builder's defaults: NCCL, chunk 128
  const std::int64_t steps = 10;
  auto p = spawn_ps("--embedded " + common_args(job) + " --steps " + std::to_string(steps));
  const auto run = finish(*p);
  INFO(run.text);
  REQUIRE(run.rc == 0);
  CHECK(run.text.find("note: spec NCCL runs as RING") != std::string::npos);
  const auto expected = reference_sgd(steps);
  for (int r = 0; r < k_replicas; ++r) check_close(run, expected, 1e-5, r);
}

TEST_CASE("partitioned all-reduce strategies reassemble their pieces: an embedded job equals SGD",
          "[allreduce][integration]") {
  const auto kind = GENERATE(cs::BuilderKind::partitioned_ar, cs::BuilderKind::random_axis_partition_ar);
  // chunk_size 1: a group per piece, w cut and put back together each step; 128: w's pieces
  // follow one another in one collective and travel whole.
  const std::int64_t chunk = GENERATE(1, 128);
  cs::BuilderOptions o;
  o.chunk_size = chunk;
  const Job job =
      make_ar_job(o, "parts" + std::to_string(static_cast<int>(kind)) + "_" + std::to_string(chunk), kind);
  const std::int64_t steps = 8;
  auto p = spawn_ps("--embedded " + common_args(job) + " --steps " + std::to_string(steps));
  const auto run = finish(*p);
  INFO(run.text);
  REQUIRE(run.rc == 0);
  CHECK(run.text.find("/part_1:0") != std::string::npos);  // w[16] is split
  CHECK((run.text.find("pieces travel whole") != std::string::npos) == (chunk == 128));
  const auto expected = reference_sgd(steps);
  for (int r = 0; r < k_replicas; ++r) check_close(run, expected, 1e-5, r);
}

TEST_CASE("a sparse variable is all-gathered as rows by 4 replica processes and embedded: equal to SGD",
          "[allreduce][integration]") {
  const Job job = ring_job("sparse");
  const std::int64_t steps = 10;
  const std::string sparse = std::string(" --sparse ") + cps::k_logreg_weights;
  const auto expected = reference_sgd(steps);
  const auto runs = sparse_ar_runs(job, steps, "", expected);
  for (int r = 0; r < k_replicas; ++r) {
    CHECK(runs[r].text.find(fmt::format("collectives {}", steps * 2)) != std::string::npos);
  }
  auto p = spawn_ps("--embedded " + common_args(job) + " --steps " + std::to_string(steps) + sparse + " --sparse " +
                    cps::k_logreg_bias);
  const auto embedded = finish(*p);
  INFO(embedded.text);
  REQUIRE(embedded.rc == 0);
  for (int r = 0; r < k_replicas; ++r) check_close(embedded, expected, 1e-5, r);
  auto bad = spawn_ps("--embedded " + common_args(job) + " --sparse nope:0");
  const auto bad_run = finish(*bad);
  INFO(bad_run.text);
  CHECK(bad_run.rc == 2);
  CHECK(bad_run.text.find("nope:0") != std::string::npos);
}

TEST_CASE("4 replica processes with w sparse train on sparse data (a sample's one value of 16): equal to SGD",
          "[allreduce][integration]") {
  const Job job = ring_job("sparse_data");
  const std::int64_t steps = 10;
  const auto expected = reference_sgd(steps, k_replicas, 0.0625);
  // Dense data's SGD is another model: the data did change.
  const auto dense = reference_sgd(steps);
  CHECK(expected.at(cps::k_logreg_weights) != dense.at(cps::k_logreg_weights));
  (void)sparse_ar_runs(job, steps, "--density 0.0625", expected);
  auto bad = spawn_ps("--embedded " + common_args(job) + " --density 0");
  const auto bad_run = finish(*bad);
  INFO(bad_run.text);
  CHECK(bad_run.rc == 2);
  CHECK(bad_run.text.find("density 0: expected a fraction of the features in (0, 1]") != std::string::npos);
}

TEST_CASE("an all-reduce strategy has no PS role, and replicas need every replica's address",
          "[allreduce][integration]") {
  const Job job = make_ar_job({}, "usage");
  auto ps = spawn_ps("--role ps --device localhost:CPU:0 " + common_args(job));
  auto ps_run = finish(*ps);
  INFO(ps_run.text);
  CHECK(ps_run.rc == 2);
  CHECK(ps_run.text.find("no parameter servers") != std::string::npos);
  auto lone = spawn_ps("--role chief " + common_args(job) + " --peers localhost:CPU:0=127.0.0.1:7000");
  auto lone_run = finish(*lone);
  INFO(lone_run.text);
  CHECK(lone_run.rc == 2);
  CHECK(lone_run.text.find("localhost:CPU:1") != std::string::npos);
}
