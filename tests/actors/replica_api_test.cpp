// apiary::Replica over UCX in one process (each replica on its own runtime): two
// replicas of an all-reduce job keep identical copies equal to SGD on the mean gradient,
// calls out of turn and missing gradients are refused clearly, and a replica that goes
// away ends the other's step with an error naming it.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <future>

#include "api/replica.hpp"
#include "api/runtime.hpp"
#include "core/collective/ar_plan.hpp"

using namespace apiary;
using namespace std::chrono_literals;
namespace cc = apiary::core::collective;

namespace {

/// One dense variable "w" [2] in one fusion group, among `replicas` replicas.
std::shared_ptr<const cc::ArPlan> one_variable_plan(std::size_t replicas) {
  cc::ArPlan plan;
  core::ps::VariablePlan v;
  v.name = "w";
  v.shape = {2};
  v.shards = {0};
  plan.variables.push_back(v);
  for (std::size_t r = 0; r < replicas; ++r) plan.replicas.push_back("localhost:CPU:" + std::to_string(r));
  cc::ArTensor t;
  t.name = "w";
  t.size = 2;
  plan.tensors.push_back(t);
  cc::ArGroup g;
  g.tensors = {0};
  plan.groups.push_back(g);
  return std::make_shared<const cc::ArPlan>(std::move(plan));
}

/// Two replicas, each on its own runtime and gateway.
struct Job {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::vector<std::unique_ptr<Runtime>> runtimes;
  std::vector<std::unique_ptr<Replica>> replicas;

  Job() {
    sys = std::make_unique<caf::actor_system>(cfg);
    std::vector<core::PeerAddr> members;
    for (int r = 0; r < 2; ++r) {
      RuntimeOptions o;
      o.system = sys.get();
      auto rt = Runtime::start(o);
      REQUIRE(rt.ok());
      members.push_back((*rt)->address().to_string());
      runtimes.push_back(std::move(*rt));
    }
    for (int r = 0; r < 2; ++r) {
      ReplicaOptions o;
      o.roles.replica = r;
      o.roles.ar = one_variable_plan(2);
      o.roles.members = members;
      o.roles.job = "test.replica";
      o.roles.optimizer.learning_rate = 0.5F;
      o.roles.initial = {{"w", {1.0F, 1.0F}}};
      o.roles.exchange_timeout = 2s;
      o.patience = 20s;
      auto replica = Replica::start(*runtimes[static_cast<std::size_t>(r)], o);
      REQUIRE(replica.ok());
      replicas.push_back(std::move(*replica));
    }
  }
  ~Job() {
    replicas.clear();
    for (auto& rt : runtimes) rt->stop();
  }
};

}  // namespace

TEST_CASE("two replicas of an all-reduce job train identical copies: SGD on the weighted mean gradient",
          "[actor][train]") {
  Job job;
  auto joined0 = std::async(std::launch::async, [&] { return job.replicas[0]->join(10s); });
  REQUIRE(job.replicas[1]->join(10s).ok());
  REQUIRE(joined0.get().ok());
  for (int step = 0; step < 3; ++step) {
    std::vector<std::future<Status>> pushed;
    for (int r = 0; r < 2; ++r) {
      auto params = job.replicas[static_cast<std::size_t>(r)]->pull();
      REQUIRE(params.ok());
      CHECK(params->step == step);
      // Replica 0: gradient (1, 0) from 1 sample; replica 1: (0, 3) from 3: mean (0.25, 2.25).
      std::map<std::string, std::vector<float>> g{{"w", r == 0 ? std::vector<float>{1, 0} : std::vector<float>{0, 3}}};
      pushed.push_back(std::async(std::launch::async, [&job, r, g] {
        return job.replicas[static_cast<std::size_t>(r)]->push(g, r == 0 ? 1.0 : 3.0);
      }));
    }
    for (auto& p : pushed) REQUIRE(p.get().ok());
  }
  for (auto& replica : job.replicas) {
    auto params = replica->pull();
    REQUIRE(params.ok());
    CHECK(params->params.at("w")[0] == Approx(1.0 - 3 * 0.5 * 0.25));
    CHECK(params->params.at("w")[1] == Approx(1.0 - 3 * 0.5 * 2.25));
    CHECK(replica->collectives() == 3);
    auto states = replica->optimizer_states();
    REQUIRE(states.ok());
    CHECK(states->count("w") == 1);
  }
  auto left0 = std::async(std::launch::async, [&] { return job.replicas[0]->leave(10s); });
  CHECK(job.replicas[1]->leave(10s).ok());
  CHECK(left0.get().ok());
}

TEST_CASE("a replica refuses a push out of turn and a missing gradient; a lost member is named", "[actor][train]") {
  Job job;
  auto early = job.replicas[0]->push({{"w", {1, 1}}}, 1.0);
  REQUIRE_FALSE(early.ok());
  CHECK(early.error().code == errc::protocol);
  REQUIRE(job.replicas[0]->pull().ok());
  auto missing = job.replicas[0]->push({{"v", {1, 1}}}, 1.0);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code == errc::invalid_argument);
  CHECK(missing.error().message.find("gradient of w") != std::string::npos);
  auto short_one = job.replicas[0]->push({{"w", {1}}}, 1.0);
  REQUIRE_FALSE(short_one.ok());
  CHECK(short_one.error().message.find("with 2 values, got 1") != std::string::npos);
  // The other replica goes away: the step cannot complete, and the error names it.
  job.replicas[1].reset();
  job.runtimes[1]->stop();
  auto lost = job.replicas[0]->push({{"w", {1, 1}}}, 1.0);
  REQUIRE_FALSE(lost.ok());
  INFO(lost.error().what());
  CHECK(lost.error().message.find("rank 1") != std::string::npos);
  // Every later call gives the same failure.
  auto later = job.replicas[0]->pull();
  REQUIRE_FALSE(later.ok());
  CHECK(later.error().message == lost.error().message);
}
