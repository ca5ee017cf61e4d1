// Slurm's host lists and task counts, and the resource spec of an allocation.
#include "core/strategy/slurm.hpp"

#include <map>

#include <catch2/catch.hpp>

#include "core/strategy/resource_spec.hpp"

namespace cs = apiary::core::strategy;
using apiary::errc;

namespace {

std::function<const char*(const char*)> env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE("Slurm host lists expand as scontrol show hostnames does", "[strategy][slurm]") {
  using V = std::vector<std::string>;
  CHECK(*cs::expand_hostlist("node1") == V{"node1"});
  CHECK(*cs::expand_hostlist("node[1-3]") == V{"node1", "node2", "node3"});
  CHECK(*cs::expand_hostlist("n[08-10,12],login") == V{"n08", "n09", "n10", "n12", "login"});
  CHECK(*cs::expand_hostlist("rack[1-2]-gpu[0-1]") == V{"rack1-gpu0", "rack1-gpu1", "rack2-gpu0", "rack2-gpu1"});
  CHECK(*cs::expand_hostlist("a,b[001-002]") == V{"a", "b001", "b002"});
  for (const char* bad : {"node[1-", "node[]", "node[3-1]", "node[a-b]", "node]1[", ",", "n[1-2]]"}) {
    INFO(bad);
    auto r = cs::expand_hostlist(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::invalid_argument);
  }
  auto huge = cs::expand_hostlist("n[0-99999]");
  REQUIRE_FALSE(huge.ok());
  CHECK_THAT(huge.error().message, Catch::Contains("more than 65536 hosts"));
  // Ranges that are each short of the limit count together, before any is written out.
  std::string many = "n[";
  for (int i = 0; i < 40; ++i) many += "0-60000,";
  many += "1]";
  auto parts = cs::expand_hostlist(many);
  REQUIRE_FALSE(parts.ok());
  CHECK_THAT(parts.error().message, Catch::Contains("more than 65536 hosts"));
  // Host names are DNS names: 255 characters at most, literal parts and numbers together.
  CHECK(cs::expand_hostlist(std::string(250, 'a') + "[10000-10001]").ok());
  for (const std::string& long_name :
       {std::string(256, 'a'), std::string(250, 'a') + "[100000-100001]", std::string(200, 'a') + "[1-9]" +
                                                                               std::string(60, 'b') + "[1-2]"}) {
    auto r = cs::expand_hostlist(long_name);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().message, Catch::Contains("a host name longer than 255 characters"));
    CHECK(r.error().message.size() < 200);  // the item is cut short in the message
  }
}

TEST_CASE("SLURM_TASKS_PER_NODE counts expand per node", "[strategy][slurm]") {
  CHECK(*cs::expand_tasks_per_node("2(x3),1") == std::vector<std::int64_t>{2, 2, 2, 1});
  CHECK(*cs::expand_tasks_per_node("4") == std::vector<std::int64_t>{4});
  for (const char* bad : {"", "0", "2(x0)", "2(x3", "x", "2,,1"}) {
    INFO(bad);
    CHECK_FALSE(cs::expand_tasks_per_node(bad).ok());
  }
}

TEST_CASE("an allocation's resource spec has one replica per task, or per GPU", "[strategy][slurm]") {
  auto yaml = cs::slurm_resource_spec(env_of({{"SLURM_JOB_NODELIST", "node[01-02]"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}}));
  REQUIRE(yaml.ok());
  auto spec = cs::parse_resource_spec(*yaml, "slurm");
  REQUIRE(spec.ok());
  CHECK(spec->chief() == "node01");
  CHECK(spec->replicas() == std::vector<std::string>{"node01:CPU:0", "node01:CPU:1", "node02:CPU:0", "node02:CPU:1"});
  auto gpus = cs::slurm_resource_spec(env_of({{"SLURM_NODELIST", "g[1-2]"}}), 4);
  REQUIRE(gpus.ok());
  auto gspec = cs::parse_resource_spec(*gpus, "slurm");
  REQUIRE(gspec.ok());
  CHECK(gspec->replicas().size() == 8);
  CHECK(gspec->replicas().front() == "g1:GPU:0");
  auto one = cs::slurm_resource_spec(env_of({{"SLURM_JOB_NODELIST", "solo"}}));
  REQUIRE(one.ok());
  REQUIRE(cs::parse_resource_spec(*one, "slurm").ok());
  auto none = cs::slurm_resource_spec(env_of({}));
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.error().message, Catch::Contains("run inside a Slurm allocation"));
  auto mismatch = cs::slurm_resource_spec(env_of({{"SLURM_JOB_NODELIST", "n[1-3]"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}}));
  REQUIRE_FALSE(mismatch.ok());
  CHECK_THAT(mismatch.error().message, Catch::Contains("counts 2 nodes, the node list 'n[1-3]' 3"));
}
