// local_replication: one proxy per node in front of a BSP shard (reference §3.3, §8 item 10).
#include "core/ps/proxy.hpp"

#include <catch2/catch.hpp>

#include "core/ps/shard.hpp"

using namespace apiary::core::ps;

TEST_CASE("proxies pull once per node per step and equal the PS at every step start", "[ps][proxy]") {
  // Replicas 0, 1 on node 0 and 2, 3 on node 1; one dense variable "v" of 3 values.
  ShardConfig sc;
  sc.variable = "v";
  sc.layout.shape = {3};
  sc.optimizer.learning_rate = 0.1F;
  sc.replica_hosts = {0, 0, 1, 1};
  auto shard = Shard::create(sc, {1.0F, 2.0F, 3.0F});
  REQUIRE(shard.ok());
  std::vector<ProxyCache> proxies(2);
  const auto node = [](std::int32_t r) { return static_cast<std::size_t>(r / 2); };
  std::vector<std::vector<float>> seen(4);
  std::vector<std::int64_t> version(4, -1);

  auto serve = [&](std::int32_t r, std::int64_t step, const std::vector<float>& values, std::int64_t v) {
    // The copy a replica reads equals the PS variable of this step's version.
    CHECK(values == shard->values());
    CHECK(v == step);
    seen[static_cast<std::size_t>(r)] = values;
    version[static_cast<std::size_t>(r)] = v;
  };
  auto refresh = [&](std::size_t n, const PullReply& reply) {
    auto out = proxies[n].on_refresh("v", reply.step, reply.version, reply.values);
    REQUIRE(out.ok());
    CHECK(out->pull_step == -1);
    for (const auto& rel : out->released) serve(rel.replica, rel.step, rel.values, rel.version);
  };

  for (std::int64_t step = 0; step < 4; ++step) {
    const std::int64_t pulls_before = proxies[0].pulls() + proxies[1].pulls();
    for (std::int32_t r = 0; r < 4; ++r) {
      auto got = proxies[node(r)].read(r, "v", step);
      if (got.outcome == ProxyOutcome::hit) serve(r, step, got.values, got.version);
      if (got.outcome != ProxyOutcome::pull) continue;
      auto out = shard->pull(r, step);
      REQUIRE(out.ok());
      REQUIRE(out->pulls.size() == 1);
      refresh(node(r), out->pulls[0]);
    }
    CHECK(proxies[0].pulls() + proxies[1].pulls() == pulls_before + 2);  // one per node
    for (std::int32_t r = 0; r < 4; ++r) {
      CHECK(version[static_cast<std::size_t>(r)] == step);
      auto out = shard->push(Push{r, step, std::vector<float>{0.5F * static_cast<float>(r), 1.0F, -1.0F}});
      REQUIRE(out.ok());
    }
    CHECK(shard->version() == step + 1);
  }
  CHECK(shard->values()[0] == Approx(1.0 - 4 * 0.1 * 0.75));
}

TEST_CASE("a reader of a later step waits and triggers the next pull", "[ps][proxy]") {
  ProxyCache proxy;
  CHECK(proxy.read(0, "v", 0).outcome == ProxyOutcome::pull);
  CHECK(proxy.read(1, "v", 0).outcome == ProxyOutcome::wait);
  CHECK(proxy.read(0, "v", 1).outcome == ProxyOutcome::wait);
  auto first = proxy.on_refresh("v", 0, 0, {1.0F});
  REQUIRE(first.ok());
  CHECK(first->released.size() == 2);
  CHECK(first->pull_step == 1);
  CHECK(proxy.read(1, "v", 0).outcome == ProxyOutcome::hit);
  auto second = proxy.on_refresh("v", 1, 1, {2.0F});
  REQUIRE(second.ok());
  REQUIRE(second->released.size() == 1);
  CHECK(second->released[0].values == std::vector<float>{2.0F});
  CHECK(proxy.pulls() == 2);
  auto stray = proxy.on_refresh("v", 5, 5, {3.0F});
  REQUIRE_FALSE(stray.ok());
  CHECK(stray.error().code == apiary::errc::protocol);
  CHECK_FALSE(proxy.on_refresh("w", 0, 0, {}).ok());
}
