#include "tests/integration/ps_job.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "core/ps/logistic_regression.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/strategy_io.hpp"
#include "tests/support/apiary_command.hpp"

namespace apiary::testing::ps_job {

using namespace std::chrono_literals;

Job job_directory(const std::string& kind, const std::string& name) {
  Job job;
  job.dir = "/tmp/apiary_" + kind + "_job_" + std::to_string(getpid()) + "_" + name;
  REQUIRE(std::system(("mkdir -p " + job.dir).c_str()) == 0);
  job.cleanup =
      std::shared_ptr<void>(nullptr, [dir = job.dir](void*) { (void)std::system(("rm -rf " + dir).c_str()); });
  return job;
}

pb::autodist::Strategy write_strategy(Job& job, const std::string& spec_text, const cs::ResourceSpec& spec,
                                      cs::BuilderKind kind, const cs::BuilderOptions& options,
                                      const cs::GraphItem& item) {
  auto strategy = cs::build_strategy(kind, options, item, spec, "20260101T000000M000000");
  REQUIRE(strategy.ok());
  job.strategy = job.dir + "/strategy";
  auto bytes = cs::serialize_strategy(*strategy, job.strategy, cs::StrategyFormat::binary);
  REQUIRE(bytes.ok());
  std::ofstream(job.strategy, std::ios::binary) << *bytes;
  job.spec = job.dir + "/resource_spec.yml";
  std::ofstream(job.spec) << spec_text;
  return *strategy;
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
  const auto strategy = write_strategy(job, k_spec, *spec, kind, options, item);
  if (with_plan) {
    cps::OptimizerConfig sgd;
    sgd.learning_rate = k_learning_rate;
    auto plan = cps::plan_training(strategy, item, sgd);
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
  return spawn_apiary("ps " + args + " 2>&1");
}

std::string replica_role(int r) { return r == 0 ? "--role chief" : "--role worker --replica " + std::to_string(r); }

std::string loopback_peers(const std::string& prefix, int replicas) {
  std::string peers;
  for (int r = 0; r < replicas; ++r) peers += fmt::format(" {}:{}=127.0.0.1:{}", prefix, r, free_loopback_port());
  return peers;
}

std::vector<std::unique_ptr<Process>> start_replicas(const Job& job, const std::string& peers,
                                                     const std::string& extra, int replicas,
                                                     const std::string& last_extra) {
  std::vector<std::unique_ptr<Process>> out;
  for (int r = 0; r < replicas; ++r) {
    const std::string more = r == replicas - 1 ? " " + last_extra : "";
    out.push_back(
        spawn_ps(replica_role(r) + " --stop-on-stdin-eof " + common_args(job) + " --peers" + peers + " " + extra + more));
  }
  return out;
}

Servers::~Servers() {
  for (auto& p : procs) p->kill(SIGTERM);
}

void start_servers(const Job& job, Servers& s, const std::string& extra) {
  for (const auto& device : job.plan.servers) {
    auto p = spawn_ps("--role ps --stop-on-stdin-eof --device " + device + " " + common_args(job) + " " + extra);
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

Run finish(Process& p) {
  Run run;
  while (auto line = p.read_line(120s)) {
    run.lines.push_back(*line);
    run.text += *line + "\n";
  }
  run.rc = p.wait(30s);
  return run;
}

std::vector<Run> finish_all(const std::vector<std::unique_ptr<Process>>& procs) {
  std::vector<Run> runs;
  for (const auto& p : procs) runs.push_back(finish(*p));
  return runs;
}

std::vector<Run> kill_then_finish(Process& victim, const std::vector<std::unique_ptr<Process>>& procs,
                                  std::size_t count) {
  victim.kill(SIGKILL);
  REQUIRE(victim.wait(std::chrono::seconds(10)) == 128 + SIGKILL);
  std::vector<Run> runs;
  for (std::size_t i = 0; i < count; ++i) runs.push_back(finish(*procs[i]));
  return runs;
}

bool each_failed(const std::vector<Run>& runs, const std::function<bool(const Run&)>& check) {
  bool named = false;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    INFO("replica " << r << " printed:\n" << runs[r].text);
    REQUIRE(runs[r].rc == 1);
    if (check(runs[r])) named = true;
  }
  return named;
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

void check_close(const Run& run, const std::map<std::string, std::vector<float>>& expected, double margin,
                 int replica) {
  for (const auto& [name, values] : expected) {
    const auto got = final_values(run, name, replica);
    REQUIRE(got.size() == values.size());
    for (std::size_t i = 0; i < values.size(); ++i) CHECK(got[i] == Approx(values[i]).margin(margin));
  }
}

std::vector<std::pair<std::int64_t, std::int64_t>> step_versions(const Run& run) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& line : run.lines) {
    std::istringstream in(line);
    std::string w1, w2, w3;
    std::int64_t step = 0, replica = 0, version = 0;
    if (in >> w1 >> step >> w2 >> replica >> w3 >> version && w1 == "step" && w3 == "version") {
      out.emplace_back(step, version);
    }
  }
  return out;
}

std::map<std::string, std::vector<float>> reference_sgd(std::int64_t steps, int replicas, double density) {
  const auto data = cps::make_logistic_data(k_samples, k_features, 1, density);
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
