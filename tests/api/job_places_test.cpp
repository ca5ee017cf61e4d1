// A job's places from its strategy, a launcher's rank from the environment, and the
// commands `apiary launch` runs for local and remote places.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>

#include <catch2/catch.hpp>

#include "api/job_places.hpp"
#include "api/launcher.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/ps/plan.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/strategy_io.hpp"

namespace apiary {
namespace {

namespace cs = core::strategy;
namespace cps = core::ps;

constexpr const char* k_local = "nodes:\n  - address: localhost\n    cpus: [0, 1, 2, 3]\n";
constexpr const char* k_three =
    "nodes:\n"
    "  - address: 10.9.0.1\n    chief: true\n"
    "  - address: 10.9.0.2\n    ssh_config: a\n"
    "  - address: 10.9.0.3\n    ssh_config: b\n"
    "ssh:\n"
    "  a: {username: trainer, port: 2222, key_file: /keys/id, shared_envs: {DATA: /data}}\n"
    "  b: {python_venv: '. /venv/bin/activate'}\n";

pb::autodist::Strategy build(cs::BuilderKind kind, const char* spec_text, cs::BuilderOptions options = {},
                             bool sparse_w = false) {
  auto spec = cs::parse_resource_spec(spec_text, "spec");
  REQUIRE(spec.ok());
  auto item = cps::logistic_graph_item(16);
  if (sparse_w) {
    // A sparse gradient comes as indices, values and dense shape (AutoDist's ';'-joined key).
    for (auto& v : item.variables) v.sparse = v.name == "logreg/w:0";
    for (auto it = item.grad_target_pairs.begin(); it != item.grad_target_pairs.end(); ++it) {
      if (it->second != "logreg/w:0") continue;
      const std::string grad = it->first.substr(0, it->first.rfind(':'));
      item.grad_target_pairs.erase(it);
      item.grad_target_pairs[grad + "/indices:0;" + grad + "/values:0;" + grad + "/shape:0"] = "logreg/w:0";
      break;
    }
  }
  auto strategy = cs::build_strategy(kind, options, item, *spec, "20260101T000000M000000");
  REQUIRE(strategy.ok());
  return *strategy;
}

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST_CASE("the PS devices of a strategy are its plan's servers, found without the model", "[launch]") {
  cs::BuilderOptions sync;
  for (auto kind : {cs::BuilderKind::ps, cs::BuilderKind::ps_load_balancing, cs::BuilderKind::partitioned_ps,
                    cs::BuilderKind::uneven_partitioned_ps}) {
    const auto strategy = build(kind, k_local);
    auto plan = cps::plan_training(strategy, cps::logistic_graph_item(16), {});
    REQUIRE(plan.ok());
    CHECK(cps::ps_devices(strategy) == plan->servers);
  }
  CHECK(cps::ps_devices(build(cs::BuilderKind::all_reduce, k_local)).empty());
}

TEST_CASE("a job's places: replicas by rank, then one process per PS device on the port range", "[launch]") {
  const auto strategy = build(cs::BuilderKind::ps_load_balancing, k_local);
  auto places = job_places(strategy, true, 20000);
  REQUIRE(places.ok());
  const auto devices = cps::ps_devices(strategy);
  REQUIRE(places->replicas == 4);
  REQUIRE(places->places.size() == 4 + devices.size());
  for (std::size_t i = 0; i < places->places.size(); ++i) {
    const auto& p = places->places[i];
    CHECK(p.rank == static_cast<std::int32_t>(i));
    CHECK(p.host == "127.0.0.1");
    CHECK(p.node == "localhost");
    CHECK(p.port == 20000 + i);
    if (i < 4) {
      CHECK(p.role == (i == 0 ? "chief" : "worker"));
      CHECK(p.replica == static_cast<std::int32_t>(i));
      CHECK(p.device == "localhost:CPU:" + std::to_string(i));
    } else {
      CHECK(p.role == "ps");
      CHECK(p.replica == -1);
      CHECK(p.device == devices[i - 4]);
    }
  }
  // What `apiary ps --peers` gets: every PS device, the node's proxy (its first replica).
  const auto peers = places->peers(std::nullopt);
  for (std::size_t k = 0; k < devices.size(); ++k) {
    CHECK(std::count(peers.begin(), peers.end(), devices[k] + "=127.0.0.1:" + std::to_string(20004 + k)) == 1);
  }
  CHECK(std::count(peers.begin(), peers.end(), "proxy:localhost=127.0.0.1:20000") == 1);
  CHECK(peers.size() == devices.size() + 1);
  // Without PS processes the ranks are the replicas only.
  auto replicas_only = job_places(strategy, false, 20000);
  REQUIRE(replicas_only.ok());
  CHECK(replicas_only->places.size() == 4);
}

TEST_CASE("all-reduce and mixed jobs name every replica in their peers", "[launch]") {
  auto ar = job_places(build(cs::BuilderKind::all_reduce, k_three), true, 15000);
  REQUIRE(ar.ok());
  REQUIRE(ar->places.size() == 3);
  CHECK(ar->places[2].host == "10.9.0.3");
  CHECK(ar->places[2].listen() == "10.9.0.3:15002");
  CHECK(ar->peers("") == std::vector<std::string>{"10.9.0.1:CPU:0=10.9.0.1:15000", "10.9.0.2:CPU:0=10.9.0.2:15001",
                                                  "10.9.0.3:CPU:0=10.9.0.3:15002"});
  auto mixed = job_places(build(cs::BuilderKind::parallax, k_three, {}, true), true, 15000);
  REQUIRE(mixed.ok());
  REQUIRE(mixed->ps_devices.size() == 1);
  const auto peers = mixed->peers("replica:");
  CHECK(std::count(peers.begin(), peers.end(), "replica:10.9.0.2:CPU:0=10.9.0.2:15001") == 1);
  CHECK(std::count(peers.begin(), peers.end(), mixed->ps_devices[0] + "=" + mixed->places[3].listen()) == 1);
}

TEST_CASE("a job's places refuse ports past the range", "[launch]") {
  const auto strategy = build(cs::BuilderKind::ps_load_balancing, k_local);
  auto late = job_places(strategy, true, 65533);
  REQUIRE_FALSE(late.ok());
  CHECK(late.error().code == errc::invalid_argument);
  CHECK_THAT(late.error().message, Catch::Contains("port 65536"));
  CHECK_FALSE(job_places(strategy, true, 0).ok());
}

TEST_CASE("a launcher's rank: torchrun, mpirun, Slurm, PMI, in that order", "[launch]") {
  auto none = launcher_rank(env_of({}));
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());
  auto torch = launcher_rank(env_of({{"RANK", "3"}, {"WORLD_SIZE", "6"}, {"SLURM_PROCID", "1"}}));
  REQUIRE(torch.ok());
  REQUIRE(torch->has_value());
  CHECK((*torch)->rank == 3);
  CHECK((*torch)->world_size == 6);
  CHECK((*torch)->source == "RANK");
  auto mpi = launcher_rank(env_of({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}}));
  REQUIRE(mpi.ok());
  CHECK((*mpi)->rank == 2);
  CHECK((*mpi)->source == "OMPI_COMM_WORLD_RANK");
  auto slurm = launcher_rank(env_of({{"SLURM_PROCID", "0"}}));
  REQUIRE(slurm.ok());
  CHECK((*slurm)->rank == 0);
  CHECK_FALSE((*slurm)->world_size.has_value());
  auto pmi = launcher_rank(env_of({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}));
  REQUIRE(pmi.ok());
  CHECK((*pmi)->source == "PMI_RANK");
  for (const auto& [vars, says] : std::vector<std::pair<std::map<std::string, std::string>, std::string>>{
           {{{"RANK", "x"}}, "RANK: expected a whole number"},
           {{{"RANK", "-1"}}, "RANK: expected a whole number"},
           {{{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK=2 is not below WORLD_SIZE=2"},
           {{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "0"}}, "SLURM_NTASKS: expected a whole number"}}) {
    auto bad = launcher_rank(env_of(vars));
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error().code == errc::invalid_argument);
    CHECK_THAT(bad.error().message, Catch::Contains(says));
  }
}

TEST_CASE("the job's first port: APIARY_PORT, else MASTER_PORT + 1, else 15000", "[launch]") {
  CHECK(*job_port(env_of({})) == 15000);
  CHECK(*job_port(env_of({{"MASTER_PORT", "29500"}})) == 29501);
  CHECK(*job_port(env_of({{"MASTER_PORT", "29500"}, {"APIARY_PORT", "17000"}})) == 17000);
  auto bad = job_port(env_of({{"APIARY_PORT", "70000"}}));
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("APIARY_PORT"));
}

/// A job's strategy and resource spec written to a fresh directory.
struct Files {
  std::string dir = "/tmp/apiary_launch_unit_" + std::to_string(::getpid());
  std::string strategy = dir + "/strategy";
  std::string spec = dir + "/resource_spec.yml";
  Files(pb::autodist::Strategy s, const char* spec_text) {
    REQUIRE(std::system(("mkdir -p " + dir).c_str()) == 0);
    auto bytes = cs::serialize_strategy(s, strategy, cs::StrategyFormat::binary);
    REQUIRE(bytes.ok());
    std::ofstream(strategy, std::ios::binary) << *bytes;
    std::ofstream(spec) << spec_text;
  }
  ~Files() { (void)std::system(("rm -rf " + dir).c_str()); }
};

bool has(const std::vector<std::string>& words, const std::string& w) {
  return std::find(words.begin(), words.end(), w) != words.end();
}

TEST_CASE("launch commands: local children, ssh with the node's entry, another remote shell", "[launch]") {
  Files files(build(cs::BuilderKind::all_reduce, k_three), k_three);
  LaunchOptions o;
  o.strategy = files.strategy;
  o.resource_spec = files.spec;
  o.port = 16000;
  o.directory = "/work dir";
  o.command = {"python3", "train.py", "--lr", "it's"};
  auto ssh = launch_commands(o);
  REQUIRE(ssh.ok());
  REQUIRE(ssh->size() == 3);
  for (const auto& c : *ssh) {
    CHECK_FALSE(c.local);
    CHECK(has(c.environment, "RANK=" + std::to_string(c.place.rank)));
    CHECK(has(c.environment, "WORLD_SIZE=3"));
    CHECK(has(c.environment, "LOCAL_RANK=0"));
    CHECK(has(c.environment, "MASTER_ADDR=10.9.0.1"));
    CHECK(has(c.environment, "MASTER_PORT=15999"));
    CHECK(has(c.environment, "APIARY_PORT=16000"));
    CHECK(c.argv.front() == "ssh");
    const std::string& line = c.argv.back();
    CHECK_THAT(line, Catch::Contains("cd '/work dir' || exit 127"));
    CHECK_THAT(line, Catch::Contains("'python3' 'train.py' '--lr' 'it'\\''s'"));
    CHECK_THAT(line, Catch::Contains("</dev/null"));
  }
  const auto& second = (*ssh)[1].argv;
  CHECK(std::vector<std::string>(second.begin(), second.end() - 1) ==
        std::vector<std::string>{"ssh", "-l", "trainer", "-p", "2222", "-i", "/keys/id", "10.9.0.2"});
  CHECK(has((*ssh)[1].environment, "DATA=/data"));
  CHECK_THAT(second.back(), Catch::Contains("'DATA=/data'"));
  CHECK_THAT((*ssh)[2].argv.back(), Catch::Contains(". /venv/bin/activate || exit 127"));
  CHECK(std::vector<std::string>((*ssh)[0].argv.begin(), (*ssh)[0].argv.end() - 1) ==
        std::vector<std::string>{"ssh", "10.9.0.1"});

  o.remote_shell = "ip netns exec";
  auto netns = launch_commands(o);
  REQUIRE(netns.ok());
  const auto& argv = (*netns)[1].argv;
  REQUIRE(argv.size() == 7);
  CHECK(std::vector<std::string>(argv.begin(), argv.begin() + 6) ==
        std::vector<std::string>{"ip", "netns", "exec", "10.9.0.2", "sh", "-c"});
}

TEST_CASE("launch commands on a loopback node run here with their place in the environment", "[launch]") {
  Files files(build(cs::BuilderKind::ps_load_balancing, k_local), k_local);
  LaunchOptions o;
  o.strategy = files.strategy;
  o.resource_spec = files.spec;
  o.ps_processes = true;
  o.command = {"apiary", "ps"};
  auto local = launch_commands(o);
  REQUIRE(local.ok());
  REQUIRE(local->size() > 4);
  for (const auto& c : *local) {
    CHECK(c.local);
    CHECK(c.argv == o.command);
    CHECK(has(c.environment, "LOCAL_RANK=" + std::to_string(c.place.rank)));
    CHECK(has(c.environment, "APIARY_ROLE=" + c.place.role));
    CHECK(has(c.environment, "APIARY_SERVE=" + c.place.device) == (c.place.role == "ps"));
  }
  o.command.clear();
  auto none = launch_commands(o);
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.error().message, Catch::Contains("expected the trainer's command after --"));
  o.command = {"true"};
  o.resource_spec = files.dir + "/missing.yml";
  CHECK_FALSE(launch_commands(o).ok());
}

TEST_CASE("launch without a strategy starts the resource spec's replicas", "[launch]") {
  Files files(build(cs::BuilderKind::all_reduce, k_three), k_three);
  LaunchOptions o;
  o.resource_spec = files.spec;
  o.command = {"python3", "train.py"};
  auto replicas = launch_commands(o);
  REQUIRE(replicas.ok());
  REQUIRE(replicas->size() == 3);
  CHECK((*replicas)[1].place.device == "10.9.0.2:CPU:0");
  CHECK((*replicas)[1].place.role == "worker");
  o.ps_processes = true;
  auto no_strategy = launch_commands(o);
  REQUIRE_FALSE(no_strategy.ok());
  CHECK_THAT(no_strategy.error().message, Catch::Contains("--ps-processes: expected --strategy too"));
}

TEST_CASE("launch refuses a strategy built for another cluster", "[launch]") {
  Files files(build(cs::BuilderKind::all_reduce, k_three), k_local);
  LaunchOptions o;
  o.strategy = files.strategy;
  o.resource_spec = files.spec;
  o.command = {"true"};
  auto other = launch_commands(o);
  REQUIRE_FALSE(other.ok());
  CHECK_THAT(other.error().message, Catch::Contains("10.9.0.1:CPU:0 (rank 0) is not a device of the resource spec"));
}

}  // namespace
}  // namespace apiary
