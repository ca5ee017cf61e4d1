#include "tests/integration/ps_job.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "core/ps/logistic_regression.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/strategy_io.hpp"

namespace apiary::testing::ps_job {

namespace cs = core::strategy;
namespace cps = core::ps;
using namespace std::chrono_literals;

Job job_directory(const std::string& kind, const std::string& name) {
  Job job;
  job.dir = "/tmp/apiary_" + kind + "_job_" + std::to_string(getpid()) + "_" + name;
  REQUIRE(std::system(("mkdir -p " + job.dir).c_str()) == 0);
  job.cleanup =
      std::shared_ptr<void>(nullptr, [dir = job.dir](void*) { (void)std::system(("rm -rf " + dir).c_str()); });
  return job;
}

Job make_job(cs::BuilderKind kind, cs::BuilderOptions options, const std::string& name, bool with_plan,
             const std::vector<std::string>& sparse) {
  Job job = job_directory("ps", name);
  auto spec = cs::parse_resource_spec(k_spec, "spec");
  REQUIRE(spec.ok());
  auto item = cps::logistic_graph_item(k_features);
  for (const auto& name : sparse) {
    // A sparse gradient comes as indices, values and dense shape (AutoDist's ';'-joined key).
    for (auto& v : item.variables) v.sparse = v.sparse || v.name == name;
    for (auto it = item.grad_target_pairs.begin(); it != item.grad_target_pairs.end(); ++it) {
      if (it->second != name) continue;
      const std::string grad = it->first.substr(0, it->first.rfind(':'));
      item.grad_target_pairs.erase(it);
      item.grad_target_pairs[grad + "/indices:0;" + grad + "/values:0;" + grad + "/shape:0"] = name;
      break;
    }
  }
  auto strategy = cs::build_strategy(kind, options, item, *spec, "20260101T000000M000000");
  REQUIRE(strategy.ok());
  job.strategy = job.dir + "/strategy";
  auto bytes = cs::serialize_strategy(*strategy, job.strategy, cs::StrategyFormat::binary);
  REQUIRE(bytes.ok());
  std::ofstream(job.strategy, std::ios::binary) << *bytes;
  job.spec = job.dir + "/resource_spec.yml";
  std::ofstream(job.spec) << k_spec;
  if (with_plan) {
    cps::OptimizerConfig sgd;
    sgd.learning_rate = k_learning_rate;
    auto plan = cps::plan_training(*strategy, item, sgd);
    REQUIRE(plan.ok());
    job.plan = std::move(*plan);
  }
  return job;
}

std::string common_args(const Job& job) {
  return fmt::format("--strategy {} --resource-spec {} --features {} --samples {} --batch {} --learning-rate {}",
                     job.strategy, job.spec, k_features, k_samples, k_batch, k_learning_rate);
}

std::unique_ptr<Process> spawn_ps(const std::string& args) {
  return std::make_unique<Process>(
      std::vector<std::string>{"/bin/sh", "-c", "exec " + sibling_executable("apiary") + " ps " + args + " 2>&1"});
}

Run finish(Process& p) {
  Run run;
  while (auto line = p.read_line(120s)) {
    run.lines.push_back(*line);
    run.text += *line + "\n";
  }
  run.rc = p.wait(30s);
  return run;
}

std::optional<std::string> read_until(Process& p, const std::string& needle, std::chrono::milliseconds timeout,
                                      std::string& seen) {
  while (auto line = p.read_line(timeout)) {
    seen += *line + "\n";
    if (line->find(needle) != std::string::npos) return line;
  }
  return std::nullopt;
}

std::vector<float> final_values(const Run& run, const std::string& name, int replica) {
  int current = -1;
  for (const auto& line : run.lines) {
    std::istringstream in(line);
    std::string word, var;
    in >> word >> var;
    if (word == "final" && var == "replica") in >> current;
    if (word != "final" || var != name || (replica >= 0 && current != replica)) continue;
    std::vector<float> out;
    float v = 0;
    while (in >> v) out.push_back(v);
    return out;
  }
  return {};
}


std::map<std::string, std::vector<float>> reference_sgd(std::int64_t steps, int replicas) {
  const auto data = cps::make_logistic_data(k_samples, k_features, 1);
  auto params = cps::logistic_initial(k_features);
  for (std::int64_t s = 0; s < steps; ++s) {
    std::map<std::string, std::vector<float>> grads;
    (void)cps::logistic_loss(data, cps::logistic_batch(data, 1, 0, s, static_cast<std::size_t>(replicas) * k_batch), params, &grads);
    for (auto& [name, values] : params) {
      for (std::size_t i = 0; i < values.size(); ++i) values[i] -= k_learning_rate * grads[name][i];
    }
  }
  return params;
}

}  // namespace apiary::testing::ps_job
