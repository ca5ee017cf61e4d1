// apiary::Replica over UCX in one process (each replica on its own runtime): two
// replicas of an all-reduce job keep identical copies equal to SGD on the mean gradient,
// calls out of turn and missing gradients are refused clearly, and a replica that goes
// away ends the other's step with an error naming it. A PS replica's pull_into receives a
// variable's values straight into the caller's vector (a Landing) once the vector has its
// size, over UCX (tcp and shm lanes) and the in-process transport.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <functional>
#include <future>

#include "actors/ps/shard_actor.hpp"
#include "api/replica.hpp"
#include "api/runtime.hpp"
#include "core/collective/ar_plan.hpp"
#include "core/ps/partition.hpp"
#include "messages/identity/multiaddr.hpp"
#include "tests/support/one_variable_plan.hpp"
#include "tests/support/test_system.hpp"

using namespace apiary;
using namespace std::chrono_literals;
namespace cc = apiary::core::collective;
namespace cps = apiary::core::ps;

using testing::one_variable_plan;

namespace {

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
      members.push_back(core::PeerAddr((*rt)->address()));
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

/// One PS device holding "w" (large: a rendezvous over UCX) and "b" (small: eager), one
/// replica, BSP, plain SGD with learning rate 1.
cps::TrainingPlan plan_of(const std::map<std::string, std::size_t>& sizes) {
  cps::TrainingPlan plan;
  plan.replicas = {"localhost:GPU:0"};
  plan.servers = {"localhost:CPU:0"};
  for (const auto& [name, n] : sizes) {
    const std::vector<std::int64_t> shape{static_cast<std::int64_t>(n)};
    auto layouts = cps::shard_layouts(shape, "");
    REQUIRE(layouts.ok());
    cps::PlannedShard s;
    s.variable = name;
    s.config.variable = name;
    s.config.layout = layouts->front();
    s.config.optimizer.kind = cps::OptimizerKind::sgd;
    s.config.optimizer.learning_rate = 1.0F;
    s.config.sync = true;
    s.config.replica_hosts = {0};
    s.device = plan.servers.front();
    plan.variables.push_back({name, shape, "", false, {plan.shards.size()}});
    plan.shards.push_back(std::move(s));
  }
  return plan;
}

/// plan_of() for variables of any shape split by a partitioner (name -> shape, partitioner).
cps::TrainingPlan split_plan_of(const std::map<std::string, std::pair<std::vector<std::int64_t>, std::string>>& vars) {
  cps::TrainingPlan plan;
  plan.replicas = {"localhost:GPU:0"};
  plan.servers = {"localhost:CPU:0"};
  for (const auto& [name, v] : vars) {
    auto layouts = cps::shard_layouts(v.first, v.second);
    REQUIRE(layouts.ok());
    cps::VariablePlan variable{name, v.first, v.second, false, {}};
    for (std::size_t i = 0; i < layouts->size(); ++i) {
      cps::PlannedShard s;
      s.variable = name;
      s.config.variable = layouts->size() == 1 ? name : name + "/part_" + std::to_string(i);
      s.config.layout = (*layouts)[i];
      s.config.optimizer.kind = cps::OptimizerKind::sgd;
      s.config.optimizer.learning_rate = 1.0F;
      s.config.sync = true;
      s.config.replica_hosts = {0};
      s.device = plan.servers.front();
      variable.shards.push_back(plan.shards.size());
      plan.shards.push_back(std::move(s));
    }
    plan.variables.push_back(std::move(variable));
  }
  return plan;
}

actors::GatewayConfig gateway_config(const std::string& backend) {
  actors::GatewayConfig gc;
  if (backend == "local") gc.backend = actors::Backend::local;
  gc.transport.mode = backend == "ucx-shm" ? transport::Mode::shm : transport::Mode::tcp;
  return gc;
}

/// One PS actor serving every shard of `plan` (each shard's values all `first(config)`)
/// on its own gateway, and one PS replica (apiary::Replica) on another, over `backend`.
struct PsRig {
  testing::TestSystem t;
  std::shared_ptr<actors::Gateway> ps_gw;
  std::shared_ptr<actors::Gateway> replica_gw;
  caf::actor ps;
  std::unique_ptr<Replica> driver;

  PsRig(const std::string& backend, const cps::TrainingPlan& plan,
        const std::function<float(const cps::ShardConfig&)>& first) {
    auto pg = actors::Gateway::start(t.sys, gateway_config(backend));
    auto rg = actors::Gateway::start(t.sys, gateway_config(backend));
    REQUIRE(pg.ok());
    REQUIRE(rg.ok());
    ps_gw = *pg;
    replica_gw = *rg;
    std::map<std::string, cps::Shard> shards;
    for (const auto& s : plan.shards) {
      auto shard = cps::Shard::create(s.config, std::vector<float>(s.config.layout.size(), first(s.config)));
      REQUIRE(shard.ok());
      shards.emplace(s.config.variable, std::move(*shard));
    }
    ps = actors::spawn_ps_actor(t.sys, ps_gw, cps::ShardServer(plan.servers.front(), std::move(shards)));
    ReplicaOptions o;
    o.roles.ps = std::make_shared<const cps::TrainingPlan>(plan);
    auto ps_addr = core::PeerAddr::from_host_port(ps_gw->address());
    REQUIRE(ps_addr.ok());
    o.roles.servers = {{plan.servers.front(), *ps_addr}};
    o.roles.call_timeout = 30000ms;
    auto d = Replica::start(t.sys, replica_gw, std::move(o));
    REQUIRE(d.ok());
    driver = std::move(*d);
  }
  ~PsRig() {
    driver.reset();
    actors::stop_ps_actor(*ps_gw, ps);
    replica_gw->stop();
    ps_gw->stop();
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

TEST_CASE("a replica refuses a push out of turn or with a missing gradient, and names a lost member", "[actor][train]") {
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

TEST_CASE("pull_into receives each whole variable straight into the caller's vector once it has its size",
          "[actor][ps]") {
  const std::string backend = GENERATE(as<std::string>{}, "ucx-tcp", "ucx-shm", "local");
  INFO("backend " << backend);
  const std::map<std::string, std::size_t> sizes{{"b", 3}, {"w", std::size_t{1} << 20}};
  const auto plan = plan_of(sizes);
  PsRig rig(backend, plan, [](const cps::ShardConfig&) { return 0.5F; });
  {
    auto& d = *rig.driver;
    // The first pull fills an empty map: nothing to land in.
    std::map<std::string, std::vector<float>> params;
    REQUIRE(d.pull_into(params).ok());
    CHECK(d.pulls_landed() == 0);
    REQUIRE(params.at("w").size() == sizes.at("w"));
    CHECK(params.at("b") == std::vector<float>(3, 0.5F));
    // A vector of another size is not posted; it is resized and filled as before.
    params.at("b").resize(7, 9.0F);
    const float* w_storage = params.at("w").data();
    for (std::int64_t step = 1; step <= 3; ++step) {
      std::map<std::string, std::vector<float>> grads;
      for (const auto& [name, n] : sizes) grads.emplace(name, std::vector<float>(n, 0.25F));
      REQUIRE(d.push_lent(grads, 1.0).ok());
      REQUIRE(d.pull_into(params).ok());
      const float expect = 0.5F - 0.25F * static_cast<float>(step);
      CHECK(params.at("w").data() == w_storage);  // written in place
      CHECK(params.at("w") == std::vector<float>(sizes.at("w"), expect));
      CHECK(params.at("b") == std::vector<float>(3, expect));
    }
    // Step 1: "w" only ("b" had 7 values); steps 2 and 3: both.
    CHECK(d.pulls_landed() == 5);
    CHECK(d.leave(10s).ok());
  }
}

TEST_CASE("pull_into receives each piece of a variable split along axis 0 straight into its range of the caller's "
          "vector", "[actor][ps]") {
  const std::string backend = GENERATE(as<std::string>{}, "ucx-tcp", "local");
  INFO("backend " << backend);
  // w: 4 pieces along axis 0, each a range of its values (256 KiB: a rendezvous over UCX);
  // m: 2 pieces along axis 1, which are not ranges (cut out and put back together).
  const std::vector<std::int64_t> w_shape{std::int64_t{1} << 16, 4};
  const std::vector<std::int64_t> m_shape{4, 6};
  const auto plan = split_plan_of({{"w", {w_shape, "4,1"}}, {"m", {m_shape, "1,2"}}});
  const std::size_t w_size = std::size_t{1} << 18;
  const std::size_t m_size = 24;
  // Each piece starts at its own value, so a piece in the wrong range shows.
  PsRig rig(backend, plan, [](const cps::ShardConfig& c) { return 0.5F + static_cast<float>(c.layout.offset); });
  {
    auto& d = *rig.driver;
    auto expected_w = [&](float minus) {
      std::vector<float> out(w_size);
      for (std::size_t i = 0; i < w_size; ++i) out[i] = 0.5F + static_cast<float>(i / (w_size / 4) * (w_size / 16)) - minus;
      return out;
    };
    std::map<std::string, std::vector<float>> params;
    REQUIRE(d.pull_into(params).ok());  // nothing to land in yet
    CHECK(d.pulls_landed() == 0);
    CHECK(params.at("w") == expected_w(0.0F));
    REQUIRE(params.at("m").size() == m_size);
    const float* w_storage = params.at("w").data();
    for (std::int64_t step = 1; step <= 3; ++step) {
      std::map<std::string, std::vector<float>> grads{{"w", std::vector<float>(w_size, 0.25F)},
                                                      {"m", std::vector<float>(m_size, 0.25F)}};
      REQUIRE(d.push_lent(grads, 1.0).ok());
      REQUIRE(d.pull_into(params).ok());
      const float minus = 0.25F * static_cast<float>(step);
      CHECK(params.at("w").data() == w_storage);  // each piece written in its range
      CHECK(params.at("w") == expected_w(minus));
      for (std::size_t i = 0; i < m_size; ++i) {
        // m [4, 6] in 2 pieces of 3 columns: column c's piece starts at offset 0 or 3.
        CHECK(params.at("m")[i] == 0.5F + static_cast<float>(i % 6 / 3 * 3) - minus);
      }
    }
    // w's four pieces at steps 1 to 3; m's pieces never land (not ranges).
    CHECK(d.pulls_landed() == 12);
    CHECK(d.leave(10s).ok());
  }
}
