// api/job_files.hpp: strategy files written and read back, checkpoint files written
// whole and checked against the model when read, and the --save path and period.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "api/job_files.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/resource_spec.hpp"

namespace cps = apiary::core::ps;
namespace cs = apiary::core::strategy;
using apiary::errc;

namespace {

constexpr const char* k_spec = "nodes:\n  - address: localhost\n    cpus: [0, 1]\n";

/// A fresh directory, removed with what it holds.
struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/apiary_job_files_XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    path = pattern;
  }
  ~TempDir() { (void)std::system(("rm -rf " + path).c_str()); }
};

std::vector<cps::VariablePlan> variables(std::int64_t features) {
  return {{cps::k_logreg_weights, {features}, "", false, {}}, {cps::k_logreg_bias, {1}, "", false, {}}};
}

}  // namespace

TEST_CASE("a strategy written by save_strategy reads back the same, naming its file, in both formats", "[api]") {
  TempDir dir;
  auto spec = cs::parse_resource_spec(k_spec, "spec");
  REQUIRE(spec.ok());
  auto built = cs::build_strategy(cs::BuilderKind::ps_load_balancing, {}, cps::logistic_graph_item(4), *spec,
                                  "20260101T000000M000000");
  REQUIRE(built.ok());
  for (bool text : {false, true}) {
    const std::string path = dir.path + (text ? "/strategy.txt" : "/strategy");
    auto strategy = *built;
    REQUIRE(apiary::save_strategy(strategy, path, text).ok());
    CHECK(strategy.path() == path);
    auto read = apiary::load_strategy(path, text);
    REQUIRE(read.ok());
    CHECK(read->SerializeAsString() == strategy.SerializeAsString());
  }
  std::ofstream(dir.path + "/spec.yml") << k_spec;
  CHECK(apiary::load_resource_spec(dir.path + "/spec.yml").ok());
  auto strategy = *built;
  auto unwritable = apiary::save_strategy(strategy, dir.path + "/missing/strategy", false);
  REQUIRE_FALSE(unwritable.ok());
  CHECK(unwritable.error().code == errc::io);
  auto missing = apiary::load_strategy(dir.path + "/none", false);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == errc::not_found);
}

TEST_CASE("a checkpoint is written whole and read back only for the model it fits", "[api]") {
  TempDir dir;
  const std::string path = dir.path + "/ckpt";
  const std::map<std::string, std::vector<float>> params = {{cps::k_logreg_weights, {1, 2, 3, 4}},
                                                            {cps::k_logreg_bias, {5}}};
  std::map<std::string, cps::Optimizer::State> states = {{cps::k_logreg_weights, {3, {}, {}}},
                                                         {cps::k_logreg_bias, {3, {}, {}}}};
  REQUIRE(apiary::save_checkpoint(path, 7, variables(4), params, cps::OptimizerKind::sgd, states).ok());
  CHECK(access((path + ".partial").c_str(), F_OK) != 0);
  auto read = apiary::read_checkpoint(path, variables(4));
  REQUIRE(read.ok());
  CHECK((*read)->step == 7);
  CHECK((*read)->values == params);
  CHECK(apiary::restores_optimizer(**read, cps::OptimizerKind::sgd));
  CHECK_FALSE(apiary::restores_optimizer(**read, cps::OptimizerKind::adam));
  auto other_model = apiary::read_checkpoint(path, variables(8));
  REQUIRE_FALSE(other_model.ok());
  CHECK(other_model.error().message.find(path) != std::string::npos);
  auto missing = apiary::read_checkpoint(dir.path + "/none", variables(4));
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == errc::not_found);
  auto unwritable = apiary::save_checkpoint(dir.path + "/missing/ckpt", 7, variables(4), params,
                                            cps::OptimizerKind::sgd, states);
  REQUIRE_FALSE(unwritable.ok());
  CHECK(unwritable.error().code == errc::io);
}

TEST_CASE("the --save path takes the step, and a periodic checkpoint falls on multiples of the period", "[api]") {
  CHECK(apiary::checkpoint_path("ckpt-{step}", 12) == "ckpt-12");
  CHECK(apiary::checkpoint_path("{step}/a-{step}", 3) == "3/a-3");
  CHECK(apiary::checkpoint_path("ckpt", 12) == "ckpt");
  CHECK(apiary::periodic_checkpoint(4, 4, 8));
  CHECK_FALSE(apiary::periodic_checkpoint(4, 0, 8));  // not at a job's first step
  CHECK_FALSE(apiary::periodic_checkpoint(4, 3, 7));
  CHECK_FALSE(apiary::periodic_checkpoint(0, 4, 8));
}

TEST_CASE("the latest checkpoint that --save names, for --resume: the largest step, whole files only", "[api]") {
  TempDir dir;
  const std::string pattern = dir.path + "/ckpt-{step}.bin";
  CHECK(apiary::latest_checkpoint(pattern)->has_value() == false);  // none yet
  for (const char* name : {"ckpt-4.bin", "ckpt-12.bin", "ckpt-8.bin", "ckpt-40.bin.tmp", "ckpt-x.bin", "ckpt-07.bin",
                           "other-50.bin"}) {
    std::ofstream(dir.path + "/" + name) << "x";
  }
  auto latest = apiary::latest_checkpoint(pattern);
  REQUIRE(latest.ok());
  REQUIRE(latest->has_value());
  CHECK(**latest == dir.path + "/ckpt-12.bin");
  // Without {step}: the file itself, when it is there.
  CHECK(apiary::latest_checkpoint(dir.path + "/ckpt-4.bin")->value() == dir.path + "/ckpt-4.bin");
  CHECK_FALSE(apiary::latest_checkpoint(dir.path + "/absent")->has_value());
  CHECK_FALSE(apiary::latest_checkpoint(dir.path + "/no-folder/ckpt-{step}")->has_value());
  auto in_folder = apiary::latest_checkpoint(dir.path + "/{step}/ckpt");
  REQUIRE_FALSE(in_folder.ok());
  CHECK(in_folder.error().code == errc::invalid_argument);
}
