// The copy-free entry points of core/ps: Shard::push_dense against Shard::push, and
// Replica::push_views / take_parameters against push / parameters. Each pair must give
// bit-identical results; only the copies differ.
#include <cstring>

#include <catch2/catch.hpp>

#include "core/ps/replica.hpp"
#include "core/ps/shard.hpp"

using namespace apiary::core::ps;

namespace {

constexpr std::size_t kSize = 37;  // not a multiple of any vector width

std::vector<float> gradient_of(std::int32_t replica, std::int64_t step) {
  std::vector<float> g(kSize);
  for (std::size_t j = 0; j < kSize; ++j) {
    g[j] = 0.1F * static_cast<float>(replica + 1) - 0.037F * static_cast<float>(j) + 0.01F * static_cast<float>(step);
  }
  return g;
}

/// Gradient bytes at an odd address, as they lie in a received message.
struct Unaligned {
  std::vector<char> storage;
  DenseBytes bytes(const std::vector<float>& g) {
    storage.assign(g.size() * sizeof(float) + 1, '\0');
    std::memcpy(storage.data() + 1, g.data(), g.size() * sizeof(float));
    return DenseBytes{storage.data() + 1, g.size()};
  }
};

ShardConfig config(OptimizerKind kind, Aggregation aggregation, bool sync, std::int64_t staleness) {
  ShardConfig c;
  c.variable = "w";
  c.layout.shape = {static_cast<std::int64_t>(kSize)};
  c.optimizer.kind = kind;
  c.optimizer.learning_rate = 0.3F;
  c.sync = sync;
  c.staleness = staleness;
  c.replica_hosts = {0, 0, 1};  // host_mean weights 1/4, 1/4, 1/2; 1/3 below with 3 hosts
  c.aggregation = aggregation;
  return c;
}

}  // namespace

TEST_CASE("push_dense gives the bits push gives, for every rule and optimizer", "[ps][shard]") {
  struct Case {
    OptimizerKind kind;
    Aggregation aggregation;
    bool sync;
    std::int64_t staleness;
    std::vector<std::int32_t> hosts;
  };
  const std::vector<Case> cases = {
      {OptimizerKind::sgd, Aggregation::sample_weighted, true, 0, {0, 0, 1}},
      {OptimizerKind::momentum, Aggregation::host_mean, true, 0, {0, 0, 1}},
      {OptimizerKind::adam, Aggregation::host_mean, true, 0, {0, 1, 2}},  // weights of 1/3: not floats
      {OptimizerKind::sgd, Aggregation::sample_weighted, true, 1, {0, 0, 1}},  // SSP: pushes held
      {OptimizerKind::adam, Aggregation::sample_weighted, false, 0, {0, 0, 1}},  // async
  };
  for (const auto& c : cases) {
    auto cfg = config(c.kind, c.aggregation, c.sync, c.staleness);
    cfg.replica_hosts = c.hosts;
    auto by_push = Shard::create(cfg, std::vector<float>(kSize, 0.5F));
    auto by_bytes = Shard::create(cfg, std::vector<float>(kSize, 0.5F));
    auto by_kept = Shard::create(cfg, std::vector<float>(kSize, 0.5F));  // the bytes kept, not copied
    REQUIRE(by_push.ok());
    REQUIRE(by_bytes.ok());
    REQUIRE(by_kept.ok());
    Unaligned buffer;
    bool held_any = false;
    // Replica 2 lags two steps behind, so that the others' later pushes are held (and
    // released by its pushes) under BSP and SSP alike.
    const std::vector<std::pair<std::int32_t, std::int64_t>> order = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2},
                                                                      {1, 2}, {2, 0}, {2, 1}, {2, 2}};
    for (const auto& [r, step] : order) {
      const double samples = 1.0 + r;  // weights 1, 2, 3 (sample_weighted)
      auto a = by_push->push(Push{r, step, gradient_of(r, step), samples});
      auto b = by_bytes->push_dense(r, step, samples, buffer.bytes(gradient_of(r, step)));
      auto kept = std::make_shared<Unaligned>();
      const DenseBytes kept_bytes = kept->bytes(gradient_of(r, step));
      auto k = by_kept->push_dense(r, step, samples, kept_bytes, kept);
      REQUIRE(a.ok() == b.ok());
      REQUIRE(a.ok());
      REQUIRE(k.ok());
      CHECK(a->acks.size() == b->acks.size());
      CHECK(a->acks.size() == k->acks.size());
      CHECK(by_push->held() == by_bytes->held());
      CHECK(by_push->held() == by_kept->held());
      held_any = held_any || by_bytes->held() > 0;
    }
    CHECK(held_any == c.sync);
    CHECK(by_push->version() == by_bytes->version());
    CHECK(by_push->version() == (c.sync ? 3 : 9));
    CHECK(std::memcmp(by_push->values().data(), by_bytes->values().data(), kSize * sizeof(float)) == 0);
    CHECK(std::memcmp(by_push->values().data(), by_kept->values().data(), kSize * sizeof(float)) == 0);
  }
}

TEST_CASE("a synchronous step sums its gradients in replica order, whatever order they arrive in",
          "[ps][shard]") {
  // Float sums depend on their order: ((1e8 + 1) - 1e8) + 1 = 1, but ((1 + 1) + 1e8) - 1e8 = 0.
  const std::vector<float> values = {1e8F, 1.0F, -1e8F, 1.0F};
  auto gradient = [&](std::int32_t r) { return std::vector<float>(kSize, values[static_cast<std::size_t>(r)]); };
  std::vector<float> first;
  for (const std::size_t cap : {std::size_t{512} << 20, std::size_t{0}}) {  // summed at the end, or at once
    for (const auto& order : std::vector<std::vector<std::int32_t>>{{0, 1, 2, 3}, {3, 1, 0, 2}, {2, 3, 1, 0}}) {
      for (const bool kept : {false, true}) {
        INFO("cap " << cap << ", first pusher " << order[0] << ", bytes kept " << kept);
        auto cfg = config(OptimizerKind::sgd, Aggregation::sample_weighted, true, 0);
        cfg.optimizer.learning_rate = 1.0F;
        cfg.replica_hosts = {0, 0, 0, 0};
        cfg.max_unsummed_bytes = cap;
        auto shard = Shard::create(cfg, std::vector<float>(kSize, 0.0F));
        REQUIRE(shard.ok());
        for (const std::int32_t r : order) {
          if (kept) {
            auto bytes = std::make_shared<Unaligned>();
            const DenseBytes g = bytes->bytes(gradient(r));
            REQUIRE(shard->push_dense(r, 0, 1.0, g, bytes).ok());
          } else {
            REQUIRE(shard->push(Push{r, 0, gradient(r), 1.0}).ok());
          }
        }
        REQUIRE(shard->version() == 1);
        CHECK(shard->values() == std::vector<float>(kSize, -0.25F));  // -(1/4) * (((1e8 + 1) - 1e8) + 1)
        if (first.empty()) first = shard->values();
        CHECK(std::memcmp(first.data(), shard->values().data(), kSize * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("a synchronous step sums sparse rows in replica order, whatever order they arrive in",
          "[ps][shard][sparse]") {
  const std::vector<float> values = {1e8F, 1.0F, -1e8F, 1.0F};
  for (const auto& order : std::vector<std::vector<std::int32_t>>{{0, 1, 2, 3}, {3, 1, 0, 2}, {2, 3, 1, 0}}) {
    INFO("first pusher " << order[0]);
    ShardConfig c;
    c.variable = "emb";
    c.layout.shape = {4, 2};
    c.sparse = true;
    c.optimizer.kind = OptimizerKind::sgd;
    c.optimizer.learning_rate = 1.0F;
    c.replica_hosts = {0, 0, 0, 0};
    auto shard = Shard::create(c, std::vector<float>(8, 0.0F));
    REQUIRE(shard.ok());
    for (const std::int32_t r : order) {
      const float v = values[static_cast<std::size_t>(r)];
      REQUIRE(shard->push(Push{r, 0, SparseGradient{{1}, {v, v}}, 1.0}).ok());
    }
    REQUIRE(shard->version() == 1);
    // Row 1 is -(1/4) * (((1e8 + 1) - 1e8) + 1); the other rows are untouched.
    CHECK(shard->values() == std::vector<float>{0.0F, 0.0F, -0.25F, -0.25F, 0.0F, 0.0F, 0.0F, 0.0F});
  }
}

TEST_CASE("push_dense refuses what push refuses, and without pull values the owner reads them", "[ps][shard]") {
  auto shard = Shard::create(config(OptimizerKind::sgd, Aggregation::sample_weighted, true, 0),
                             std::vector<float>(kSize, 0.0F));
  REQUIRE(shard.ok());
  Unaligned buffer;
  const auto g = gradient_of(0, 0);
  auto short_one = shard->push_dense(0, 0, 1.0, DenseBytes{buffer.bytes(g).bytes, kSize - 1});
  REQUIRE_FALSE(short_one.ok());
  CHECK_THAT(short_one.error().message, Catch::Contains("expected a gradient of 37 values, got 36"));
  CHECK_FALSE(shard->push_dense(0, 1, 1.0, buffer.bytes(g)).ok());  // not its next step
  CHECK_FALSE(shard->push_dense(5, 0, 1.0, buffer.bytes(g)).ok());  // no such replica
  CHECK_FALSE(shard->push_dense(0, 0, 0.0, buffer.bytes(g)).ok());  // no samples
  shard->set_pull_values(false);
  auto pulled = shard->pull(1, 0);
  REQUIRE(pulled.ok());
  REQUIRE(pulled->pulls.size() == 1);
  CHECK(pulled->pulls[0].values.empty());
  CHECK(pulled->pulls[0].version == shard->version());
}

TEST_CASE("push_views and take_parameters match push and parameters without the copies", "[ps][replica]") {
  // w is split along axis 0 (its pieces are ranges of its values), m along axis 1 (not).
  const std::vector<VariablePlan> plans = {VariablePlan{"w", {4, 2}, "2,1", false, {0, 1}},
                                           VariablePlan{"b", {3}, "", false, {2}},
                                           VariablePlan{"m", {2, 4}, "1,2", false, {3, 4}}};
  auto a = Replica::create(0, plans);
  auto b = Replica::create(0, plans);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const std::vector<std::vector<float>> pieces = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11}, {12, 13, 16, 17},
                                                  {14, 15, 18, 19}};
  for (auto* r : {&*a, &*b}) {
    REQUIRE(r->start_pull().ok());
    for (std::size_t s = 0; s < pieces.size(); ++s) REQUIRE(r->on_pull_reply(s, PullReply{0, 0, 0, pieces[s]}).ok());
  }
  auto copied = a->parameters();
  auto taken = b->take_parameters();
  REQUIRE(copied.ok());
  REQUIRE(taken.ok());
  CHECK(*copied == *taken);
  CHECK(taken->at("b") == pieces[2]);
  CHECK_FALSE(b->take_parameters().ok());  // once per step
  CHECK_FALSE(b->parameters().ok());       // the pieces are gone
  const std::map<std::string, Gradient> grads = {{"w", std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}},
                                                 {"b", std::vector<float>{9, 10, 11}},
                                                 {"m", std::vector<float>{12, 13, 14, 15, 16, 17, 18, 19}}};
  auto pushes = a->push(grads, 2.0);
  auto views = b->push_views(grads, 2.0);
  REQUIRE(pushes.ok());
  REQUIRE(views.ok());
  REQUIRE(pushes->size() == views->size());
  CHECK(b->phase() == ReplicaPhase::pushing);
  for (std::size_t i = 0; i < views->size(); ++i) {
    const auto& v = (*views)[i];
    const auto& p = (*pushes)[i];
    CHECK(v.shard == p.shard);
    CHECK(v.samples == p.push.samples);
    const auto& expected = std::get<std::vector<float>>(p.push.gradient);
    if (v.shard >= 3) {
      // m's pieces along axis 1 are not ranges of its values: cut out.
      REQUIRE(v.piece);
      CHECK(std::get<std::vector<float>>(*v.piece) == expected);
    } else {
      // The unpartitioned variable, and each piece of w, are read where the caller holds them.
      REQUIRE_FALSE(v.piece);
      const float* at = v.shard == 2 ? std::get<std::vector<float>>(grads.at("b")).data()
                                     : std::get<std::vector<float>>(grads.at("w")).data() + 4 * v.shard;
      CHECK(v.dense == at);
      CHECK(std::vector<float>(v.dense, v.dense + v.count) == expected);
    }
  }
}
