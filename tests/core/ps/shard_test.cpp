#include "core/ps/shard.hpp"

#include <catch2/catch.hpp>
#include <cmath>

using namespace apiary::core::ps;

namespace {
ShardConfig config(std::vector<std::int64_t> shape, std::vector<std::int32_t> hosts, bool sync = true) {
  ShardConfig c;
  c.variable = "v";
  c.layout.shape = std::move(shape);
  c.optimizer.kind = OptimizerKind::sgd;
  c.optimizer.learning_rate = 0.01F;
  c.sync = sync;
  c.replica_hosts = std::move(hosts);
  return c;
}

/// One synchronous step of the bias b (b0 = 0, SGD lr 0.01) with one gradient per replica.
float one_step(std::vector<std::int32_t> hosts, std::vector<float> grads, Aggregation rule) {
  auto c = config({}, hosts);
  c.aggregation = rule;
  auto shard = Shard::create(c, {0.0F});
  REQUIRE(shard.ok());
  for (std::size_t r = 0; r < grads.size(); ++r) {
    REQUIRE(shard->push(Push{static_cast<std::int32_t>(r), 0, std::vector<float>{grads[r]}}).ok());
  }
  REQUIRE(shard->version() == 1);
  return shard->values()[0];
}
}  // namespace

// Reference §8, c0 oracle: host means of b's gradient are -4.17503 (chief) and -4.05530.
TEST_CASE("mean of host means vs GPU-weighted mean (c0 numbers)", "[ps][shard][aggregation]") {
  constexpr double chief = 4.17503, worker = 4.05530;
  // Two GPUs on the chief whose gradients average to -4.17503; one GPU on the worker.
  const std::vector<float> grads{-4.0F, -4.35006F, -4.05530F};
  const std::vector<std::int32_t> unequal{0, 0, 1};
  SECTION("PS (host_mean): the mean of the two host means") {
    CHECK(one_step(unequal, grads, Aggregation::host_mean) == Approx(0.01 * (chief + worker) / 2).epsilon(1e-6));
  }
  SECTION("GPU-weighted: (4.17503 * 2 + 4.05530 * 1) / 3") {
    CHECK(one_step(unequal, grads, Aggregation::sample_weighted) ==
          Approx(0.01 * (chief * 2 + worker * 1) / 3).epsilon(1e-6));
  }
  SECTION("equal GPU counts: both rules give the host mean") {
    const std::vector<float> four{-4.0F, -4.35006F, -4.0F, -4.1106F};
    const std::vector<std::int32_t> equal{0, 0, 1, 1};
    CHECK(one_step(equal, four, Aggregation::host_mean) == Approx(0.01 * (chief + worker) / 2).epsilon(1e-6));
    CHECK(one_step(equal, four, Aggregation::sample_weighted) ==
          Approx(0.01 * (chief + worker) / 2).epsilon(1e-6));
  }
  SECTION("one host: 0.01 * 4.17503 whatever the number of GPUs") {
    CHECK(one_step({0}, {-4.17503F}, Aggregation::host_mean) == Approx(0.01 * chief).epsilon(1e-6));
    CHECK(one_step({0, 0}, {-4.0F, -4.35006F}, Aggregation::host_mean) == Approx(0.01 * chief).epsilon(1e-6));
  }
  SECTION("sample counts weight the mean") {
    auto c = config({}, {0, 1});
    auto shard = Shard::create(c, {0.0F});
    REQUIRE(shard.ok());
    REQUIRE(shard->push(Push{0, 0, std::vector<float>{-1.0F}, 3.0}).ok());
    REQUIRE(shard->push(Push{1, 0, std::vector<float>{-5.0F}, 1.0}).ok());
    CHECK(shard->values()[0] == Approx(0.01 * (3 * 1 + 5) / 4.0));
  }
}

TEST_CASE("sparse pushes are averaged row-wise and touch only their rows", "[ps][shard][sparse]") {
  auto c = config({5, 2}, {0, 1});
  c.sparse = true;
  c.optimizer.kind = OptimizerKind::adam;
  auto shard = Shard::create(c, std::vector<float>(10, 1.0F));
  REQUIRE(shard.ok());
  REQUIRE(shard->push(Push{0, 0, SparseGradient{{1, 3}, {2, 2, 4, 4}}}).ok());
  CHECK(shard->version() == 0);
  REQUIRE(shard->push(Push{1, 0, SparseGradient{{3}, {2, 2}}}).ok());
  CHECK(shard->version() == 1);
  const auto& p = shard->values();
  for (int row : {0, 2, 4}) {
    CHECK(p[2 * row] == 1.0F);
    CHECK(shard->optimizer().slot_m()[2 * row] == 0.0F);
    CHECK(shard->optimizer().slot_v()[2 * row + 1] == 0.0F);
  }
  // Row 1: mean gradient 1 (2 from one replica of two); row 3: mean (4 + 2) / 2 = 3.
  CHECK(shard->optimizer().slot_m()[2] == Approx(0.1F));
  CHECK(shard->optimizer().slot_m()[6] == Approx(0.3F));
  CHECK(p[2] < 1.0F);
  CHECK(p[6] < 1.0F);
}

TEST_CASE("async applies every push at once and never holds", "[ps][shard][async]") {
  // Least squares min |A x - y|^2 with x* = (1, -2, 0.5); four replicas own one row each.
  const std::vector<std::vector<float>> a{{1, 0, 1}, {0, 2, 1}, {1, 1, 0}, {2, 0, 1}};
  const std::vector<float> x_star{1.0F, -2.0F, 0.5F};
  auto c = config({3}, {0, 1, 2, 3}, false);
  c.optimizer.learning_rate = 0.05F;
  auto shard = Shard::create(c, {0.0F, 0.0F, 0.0F});
  REQUIRE(shard.ok());
  std::vector<std::vector<float>> seen(4);
  std::int64_t pushes = 0;
  for (std::int64_t step = 0; step < 400; ++step) {
    // All replicas read first, then push: each gradient is up to 3 updates stale.
    for (std::int32_t r = 0; r < 4; ++r) {
      auto got = shard->pull(r, step);
      REQUIRE(got.ok());
      REQUIRE(got->pulls.size() == 1);
      seen[static_cast<std::size_t>(r)] = got->pulls[0].values;
    }
    for (std::int32_t r = 0; r < 4; ++r) {
      const auto& row = a[static_cast<std::size_t>(r)];
      const auto& x = seen[static_cast<std::size_t>(r)];
      float residual = 0.0F;
      for (int j = 0; j < 3; ++j) residual += row[j] * (x[j] - x_star[j]);
      std::vector<float> g(3);
      for (int j = 0; j < 3; ++j) g[j] = 2.0F * residual * row[j];
      REQUIRE(shard->push(Push{r, step, g}).ok());
      ++pushes;
      REQUIRE(shard->held() == 0);
    }
  }
  CHECK(shard->version() == pushes);
  for (int j = 0; j < 3; ++j) CHECK(shard->values()[j] == Approx(x_star[j]).margin(1e-3));
}

TEST_CASE("shard refuses bad pushes with clear errors", "[ps][shard][errors]") {
  auto shard = Shard::create(config({2}, {0, 1}), {0.0F, 0.0F});
  REQUIRE(shard.ok());
  auto wrong_step = shard->push(Push{0, 1, std::vector<float>{1, 1}});
  REQUIRE_FALSE(wrong_step.ok());
  CHECK(wrong_step.error().code == apiary::errc::protocol);
  CHECK(wrong_step.error().message.find("push step 0 next, got step 1") != std::string::npos);
  CHECK_FALSE(shard->push(Push{2, 0, std::vector<float>{1, 1}}).ok());
  CHECK_FALSE(shard->push(Push{0, 0, std::vector<float>{1}}).ok());
  CHECK_FALSE(shard->push(Push{0, 0, SparseGradient{{0}, {1}}}).ok());
  CHECK_FALSE(shard->push(Push{0, 0, std::vector<float>{1, 1}, 0.0}).ok());
  CHECK_FALSE(shard->pull(0, -1).ok());
  // Nothing above changed the shard: replica 0 may still push step 0.
  CHECK(shard->push(Push{0, 0, std::vector<float>{1, 1}}).ok());
  CHECK_FALSE(shard->push(Push{0, 0, std::vector<float>{1, 1}}).ok());  // a duplicate

  auto bad = config({2}, {0});
  bad.sync = false;
  bad.staleness = 2;
  CHECK_FALSE(Shard::create(bad, {0, 0}).ok());
  CHECK_FALSE(Shard::create(config({2}, {}), {0, 0}).ok());
  CHECK_FALSE(Shard::create(config({2}, {0}), {0}).ok());
}

TEST_CASE("a push's learning rate drives its update, and 0 keeps the configured one", "[ps][shard][schedule]") {
  SECTION("synchronous: the step's update at the lowest-numbered replica's rate, dense and direct") {
    auto shard = Shard::create(config({}, {0, 1}), {1.0F});  // SGD at 0.01 configured
    REQUIRE(shard.ok());
    // Step 0 at 0.5 (replica 0's): 1 - 0.5 * mean(2, 4) = -0.5.
    REQUIRE(shard->push(Push{1, 0, std::vector<float>{4.0F}, 1.0, 0.25F}).ok());
    const std::vector<float> g{2.0F};
    REQUIRE(shard->push_dense(0, 0, 1.0, DenseBytes{reinterpret_cast<const char*>(g.data()), 1}, nullptr, 0.5F).ok());
    CHECK(shard->values()[0] == -0.5F);
    // Step 1 without a rate: back to the configured 0.01.
    REQUIRE(shard->push(Push{0, 1, std::vector<float>{100.0F}}).ok());
    REQUIRE(shard->push(Push{1, 1, std::vector<float>{100.0F}}).ok());
    CHECK(shard->values()[0] == Approx(-1.5F));  // -0.5 - 0.01 * 100
  }
  SECTION("sparse rows at the step's rate") {
    auto c = config({3, 1}, {0});
    c.sparse = true;
    auto shard = Shard::create(c, {0.0F, 0.0F, 0.0F});
    REQUIRE(shard.ok());
    REQUIRE(shard->push(Push{0, 0, SparseGradient{{1}, {2.0F}}, 1.0, 2.0F}).ok());
    CHECK(shard->values() == std::vector<float>{0.0F, -4.0F, 0.0F});
  }
  SECTION("asynchronous: each push at its own rate") {
    auto shard = Shard::create(config({}, {0, 1}, false), {0.0F});
    REQUIRE(shard.ok());
    REQUIRE(shard->push(Push{0, 0, std::vector<float>{1.0F}, 1.0, 1.0F}).ok());
    REQUIRE(shard->push(Push{1, 0, std::vector<float>{1.0F}, 1.0, 3.0F}).ok());
    CHECK(shard->values()[0] == -4.0F);
  }
  SECTION("a negative or non-finite rate is refused and changes nothing") {
    auto shard = Shard::create(config({}, {0}), {0.0F});
    REQUIRE(shard.ok());
    for (float bad : {-1.0F, std::nanf(""), INFINITY}) {
      auto refused = shard->push(Push{0, 0, std::vector<float>{1.0F}, 1.0, bad});
      REQUIRE_FALSE(refused.ok());
      CHECK(refused.error().message.find("learning rate") != std::string::npos);
    }
    CHECK(shard->version() == 0);
    REQUIRE(shard->push(Push{0, 0, std::vector<float>{1.0F}}).ok());
    CHECK(shard->values()[0] == -0.01F);
  }
}
