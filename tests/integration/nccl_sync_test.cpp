// The AllReduceSynchronizer's NCCL spec under `apiary ps`, on replicas with GPUs: the
// replica processes form an NCCL group (the id served by replica 0 over apiary's RPC)
// and average each fusion group's gradients on their GPUs; the result equals
// single-process SGD on the concatenated batch and every replica holds the same bits.
// The cases that need GPUs skip (printing why) without a usable CUDA device and NCCL;
// the rest run anywhere: RING on GPU replicas needs no GPU, NCCL on GPU replicas
// without a usable GPU fails with an error saying so, and so does an NcclGroup.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <unistd.h>

#include <fmt/format.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/collective/nccl_group.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/strategy_io.hpp"
#include "cuda/device.hpp"
#include "cuda/nccl.hpp"
#include "tests/integration/ps_job.hpp"
#include "tests/support/test_system.hpp"

using namespace apiary;
using namespace apiary::testing::ps_job;
using apiary::testing::Process;

namespace {

/// A strategy of `kind` built for a host with GPUs 0..gpus-1 (one replica each) and
/// its resource spec, in a directory named after `name`.
Job make_gpu_job(cs::BuilderOptions options, int gpus, const std::string& name,
                 cs::BuilderKind kind = cs::BuilderKind::all_reduce) {
  std::string ids;
  for (int g = 0; g < gpus; ++g) ids += fmt::format("{}{}", g == 0 ? "" : ", ", g);
  const std::string spec_text = "nodes:\n  - address: localhost\n    cpus: [0]\n    gpus: [" + ids + "]\n";
  Job job = job_directory("nccl", name);
  auto spec = cs::parse_resource_spec(spec_text, "spec");
  REQUIRE(spec.ok());
  REQUIRE(spec->replicas().size() == static_cast<std::size_t>(gpus));
  (void)write_strategy(job, spec_text, *spec, kind, options, cps::logistic_graph_item(k_features));
  return job;
}

/// One `apiary ps` process per GPU replica, each told every replica's address.
std::vector<std::unique_ptr<Process>> start_gpu_replicas(const Job& job, int replicas, const std::string& extra) {
  return start_replicas(job, loopback_peers("localhost:GPU", replicas), extra, replicas);
}

/// Why `gpus` GPUs cannot run NCCL here (empty when they can).
std::string why_no_gpus(int gpus) {
  if (!cuda::nccl_compiled()) return "this build has no NCCL (configure with -DAPIARY_ENABLE_CUDA=ON)";
  if (cuda::default_backend() != cuda::backend::cuda) return "no usable CUDA device:\n" + cuda::device_info();
  const int have = cuda::probe_cuda().device_count;
  if (have < gpus) return fmt::format("needs {} GPUs (NCCL takes one per rank), this machine has {}", gpus, have);
  return {};
}

/// Whether a case needing `gpus` GPUs must skip here; says why (as a skip) when it must.
bool skip_without_gpus(int gpus) {
  const std::string why = why_no_gpus(gpus);
  if (why.empty()) return false;
  WARN("skipped: " << why);
  return true;
}

/// Every replica ended well with the expected values, and all with the same bits.
void check_runs(const std::vector<Run>& runs, const std::map<std::string, std::vector<float>>& expected,
                double margin, const std::string& transport, std::int64_t collectives) {
  for (std::size_t r = 0; r < runs.size(); ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 0);
    CHECK(runs[r].text.find("collectives per step (" + transport + ")") != std::string::npos);
    CHECK(runs[r].text.find(fmt::format("collectives {}", collectives)) != std::string::npos);
    CHECK(runs[r].text.find("apiary ps:") == std::string::npos);
    for (const auto& [name, values] : expected) {
      const auto got = final_values(runs[r], name);
      const auto first = final_values(runs[0], name);
      REQUIRE(got.size() == values.size());
      REQUIRE(first.size() == values.size());
      for (std::size_t i = 0; i < values.size(); ++i) {
        INFO(name << "[" << i << "]");
        CHECK(got[i] == Approx(values[i]).margin(margin));
        CHECK(std::memcmp(&got[i], &first[i], sizeof(float)) == 0);  // 9 digits tell floats apart
      }
    }
  }
}

}  // namespace

TEST_CASE("NCCL over 2 GPU replica processes equals single-process SGD (gpu, skipped without 2 GPUs)",
          "[nccl][gpu]") {
  if (skip_without_gpus(2)) return;
  // chunk 1: w and b in two NCCL collectives per step; 128: one fused collective.
  const std::int64_t chunk = GENERATE(1, 128);
  const Job job = make_gpu_job(testing::ar_options(chunk, Sync::NCCL), 2, "nccl2_" + std::to_string(chunk));
  const std::int64_t steps = 12;
  const auto runs = finish_all(start_gpu_replicas(job, 2, "--steps " + std::to_string(steps)));
  check_runs(runs, reference_sgd(steps, 2), 1e-5, "NCCL", steps * testing::collectives_per_step(chunk));
}

TEST_CASE("AUTO on one GPU replica runs a one-rank NCCL group: single-process SGD (gpu, skipped without one)",
          "[nccl][gpu]") {
  if (skip_without_gpus(1)) return;
  cs::BuilderOptions o;
  o.all_reduce_spec = Sync::AUTO;
  const Job job = make_gpu_job(o, 1, "nccl1");
  const std::int64_t steps = 10;
  auto procs = start_gpu_replicas(job, 1, "--steps " + std::to_string(steps));
  std::vector<Run> runs{finish(*procs[0])};
  // One rank: (w x) / w with w = 16 is x exactly, so only the optimizer's rounding may differ.
  check_runs(runs, reference_sgd(steps, 1), 1e-6, "NCCL", steps);
}

TEST_CASE("RING on GPU replicas runs the ring without touching a GPU", "[nccl][gpu]") {
  cs::BuilderOptions o;
  o.all_reduce_spec = Sync::RING;
  const Job job = make_gpu_job(o, 2, "ring2");
  const std::int64_t steps = 8;
  const auto runs = finish_all(start_gpu_replicas(job, 2, "--steps " + std::to_string(steps)));
  check_runs(runs, reference_sgd(steps, 2), 1e-5, "RING", steps);
}

TEST_CASE("NCCL on GPU replicas without a usable GPU fails on every replica, saying why", "[nccl][gpu]") {
  if (why_no_gpus(1).empty()) {
    WARN("skipped: this machine can run NCCL on a GPU (the other cases cover it)");
    return;
  }
  cs::BuilderOptions o;
  o.all_reduce_spec = Sync::NCCL;
  const Job job = make_gpu_job(o, 2, "nogpu");
  auto procs = start_gpu_replicas(job, 2, "--steps 4 --timeout-ms 5000");
  for (std::size_t r = 0; r < procs.size(); ++r) {
    const auto run = finish(*procs[r]);
    INFO("replica " << r << " printed:\n" << run.text);
    CHECK(run.rc == 1);
    CHECK(run.text.find("collectives per step (NCCL)") != std::string::npos);
    CHECK(run.text.find("NCCL needs a GPU on every replica") != std::string::npos);
    CHECK(run.text.find(fmt::format("replica {} (localhost:GPU:{})", r, r)) != std::string::npos);
    CHECK(run.text.find("--spec RING") != std::string::npos);
    CHECK(run.text.find("final replica") == std::string::npos);
  }
}

TEST_CASE("NcclGroup refuses a bad config, and a GPU this process cannot use, saying why", "[nccl][gpu]") {
  using namespace std::chrono_literals;
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto gw = testing::start_local_gateway(sys);
  actors::NcclGroupConfig bad;
  bad.group = "g";
  bad.rank = 2;
  bad.ranks = 2;
  auto refused = actors::NcclGroup::create(sys, gw, bad);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == errc::invalid_argument);
  CHECK_THAT(refused.error().message, Catch::Contains("rank 2 of 2"));
  // A device past the last one (or any, without NCCL or a GPU): unsupported, before any RPC.
  actors::NcclGroupConfig missing;
  missing.group = "g";
  missing.device = 1000;
  missing.timeout = 2s;
  auto no_gpu = actors::NcclGroup::create(sys, gw, missing);
  REQUIRE_FALSE(no_gpu.ok());
  CHECK(no_gpu.error().code == errc::unsupported);
  CHECK_THAT(no_gpu.error().message, Catch::Contains("NCCL needs a GPU on every replica"));
  CHECK_THAT(no_gpu.error().message, Catch::Contains("--spec RING"));
  gw->stop();
}

TEST_CASE("NcclGroup of one rank: the weighted mean, float16 rounding per codec (gpu, skipped without one)",
          "[nccl][gpu]") {
  if (skip_without_gpus(1)) return;
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto gw = testing::start_local_gateway(sys);
  actors::NcclGroupConfig one;
  one.group = "one";
  auto group = actors::NcclGroup::create(sys, gw, one);
  INFO((group.ok() ? std::string() : group.error().message));
  REQUIRE(group.ok());
  const std::vector<float> a{1.0F, -2.5F, 3.0e-3F}, b{0.1F, 1000.1F};
  auto mean = (*group)->mean({a, b}, 16.0, {pb::NONE, pb::FLOAT16});
  REQUIRE(mean.ok());
  REQUIRE(mean->size() == 2);
  CHECK((*mean)[0] == a);  // (16 a) / 16 is a, bit for bit
  REQUIRE((*mean)[1].size() == b.size());
  for (std::size_t i = 0; i < b.size(); ++i) CHECK((*mean)[1][i] == Approx(b[i]).epsilon(1e-3));
  CHECK((*mean)[1][1] == 1000.0F);  // float16 spacing at 1000 is 0.5
  // Bad inputs: a clear error, and the group keeps working.
  CHECK((*group)->mean({a}, 0.0).error().code == errc::invalid_argument);
  CHECK((*group)->mean({a}, 1.0, {pb::UNIFORM_8BIT}).error().code == errc::unsupported);
  CHECK((*group)->mean({a}, 1.0).ok());
  CHECK((*group)->ops() == 2);
  group->reset();
  gw->stop();
}
