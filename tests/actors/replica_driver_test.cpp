// ReplicaDriver against a PS actor, each on its own gateway in one process: pull_into
// receives a variable's values straight into the caller's vector (a Landing) once the
// vector has its size, over UCX (tcp and shm lanes) and the in-process transport.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include "actors/ps/replica_driver.hpp"
#include "actors/ps/shard_actor.hpp"
#include "core/ps/partition.hpp"

using namespace apiary;
using namespace std::chrono_literals;
namespace cps = core::ps;

namespace {

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

actors::GatewayConfig gateway_config(const std::string& backend) {
  actors::GatewayConfig gc;
  if (backend == "local") gc.backend = actors::Backend::local;
  gc.transport.mode = backend == "ucx-shm" ? transport::Mode::shm : transport::Mode::tcp;
  return gc;
}

}  // namespace

TEST_CASE("pull_into receives each whole variable straight into the caller's vector once it has its size",
          "[actor][ps]") {
  const std::string backend = GENERATE(as<std::string>{}, "ucx-tcp", "ucx-shm", "local");
  INFO("backend " << backend);
  const std::map<std::string, std::size_t> sizes{{"b", 3}, {"w", std::size_t{1} << 20}};
  const auto plan = plan_of(sizes);
  caf::actor_system_config cfg;
  cfg.set("work-stealing.moderate-poll-attempts", 0);
  caf::actor_system sys{cfg};
  auto ps_gw = actors::Gateway::start(sys, gateway_config(backend));
  auto replica_gw = actors::Gateway::start(sys, gateway_config(backend));
  REQUIRE(ps_gw.ok());
  REQUIRE(replica_gw.ok());
  std::map<std::string, cps::Shard> shards;
  for (const auto& s : plan.shards) {
    auto shard = cps::Shard::create(s.config, std::vector<float>(s.config.layout.size(), 0.5F));
    REQUIRE(shard.ok());
    shards.emplace(s.config.variable, std::move(*shard));
  }
  auto ps = actors::spawn_ps_actor(sys, *ps_gw, cps::ShardServer(plan.servers.front(), std::move(shards)));
  {
    actors::ReplicaDriverConfig dc{0, plan, {{plan.servers.front(), (*ps_gw)->address()}}, 30000ms, {}};
    auto driver = actors::ReplicaDriver::create(sys, *replica_gw, std::move(dc));
    REQUIRE(driver.ok());
    auto& d = **driver;
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
      std::map<std::string, cps::Gradient> grads;
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
    CHECK(d.leave().ok());
  }
  actors::stop_ps_actor(**ps_gw, ps);
  (*replica_gw)->stop();
  (*ps_gw)->stop();
}
