// BSP and SSP over several shards, driven step by step as replicas would drive them.
#include <catch2/catch.hpp>
#include <cstdint>

#include "core/ps/partition.hpp"
#include "core/ps/shard.hpp"

using namespace apiary::core::ps;

namespace {
constexpr std::size_t kFeatures = 5;
constexpr std::size_t kBatch = 3;  // samples per replica
constexpr std::int32_t kReplicas = 4;

/// Deterministic values in [-1, 1).
struct Lcg {
  std::uint64_t s = 12345;
  float next() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>((s >> 40) % 2000) / 1000.0F - 1.0F;
  }
};

struct Sample {
  std::vector<float> x;
  float y = 0.0F;
};

/// Gradient of the mean squared error of y = w.x + b over `batch`: (dL/dw, dL/db).
std::pair<std::vector<float>, float> gradient(const std::vector<float>& w, float b, const std::vector<Sample>& batch) {
  std::vector<float> gw(kFeatures, 0.0F);
  float gb = 0.0F;
  for (const auto& s : batch) {
    float err = b - s.y;
    for (std::size_t j = 0; j < kFeatures; ++j) err += w[j] * s.x[j];
    for (std::size_t j = 0; j < kFeatures; ++j) gw[j] += 2.0F * err * s.x[j] / static_cast<float>(batch.size());
    gb += 2.0F * err / static_cast<float>(batch.size());
  }
  return {gw, gb};
}

ShardConfig shard_config(std::string name, ShardLayout layout, OptimizerConfig opt, std::int64_t staleness) {
  ShardConfig c;
  c.variable = std::move(name);
  c.layout = std::move(layout);
  c.optimizer = opt;
  c.staleness = staleness;
  c.replica_hosts = {0, 0, 1, 1};
  return c;
}
}  // namespace

TEST_CASE("BSP with 4 replicas equals one process on the concatenated batch", "[ps][shard][bsp]") {
  OptimizerConfig opt;
  opt.kind = GENERATE(OptimizerKind::sgd, OptimizerKind::momentum, OptimizerKind::adam);
  opt.learning_rate = 0.05F;
  CAPTURE(to_string(opt.kind));
  Lcg rng;
  std::vector<float> w0(kFeatures);
  for (auto& x : w0) x = rng.next();
  // w is partitioned in two shards (rows 3 + 2); b is a third shard.
  const std::vector<std::int64_t> w_shape{static_cast<std::int64_t>(kFeatures)};
  auto layouts = shard_layouts(w_shape, "2");
  REQUIRE(layouts.ok());
  auto w_pieces = split_dense(w0, w_shape, *layouts);
  REQUIRE(w_pieces.ok());
  std::vector<Shard> shards;
  for (std::size_t i = 0; i < 2; ++i) {
    auto s = Shard::create(shard_config("w/part_" + std::to_string(i), (*layouts)[i], opt, 0), (*w_pieces)[i]);
    REQUIRE(s.ok());
    shards.push_back(std::move(*s));
  }
  auto b_shard = Shard::create(shard_config("b", ShardLayout{}, opt, 0), {0.25F});
  REQUIRE(b_shard.ok());
  shards.push_back(std::move(*b_shard));

  // The single-process reference: the same optimizer over the whole batch.
  std::vector<float> ref_w = w0, ref_b{0.25F};
  Optimizer ref_w_opt(opt, kFeatures, 1), ref_b_opt(opt, 1, 1);

  for (std::int64_t step = 0; step < 6; ++step) {
    std::vector<std::vector<Sample>> batches(kReplicas);
    std::vector<Sample> all;
    for (auto& batch : batches) {
      for (std::size_t i = 0; i < kBatch; ++i) {
        Sample s{std::vector<float>(kFeatures), rng.next()};
        for (auto& x : s.x) x = rng.next();
        batch.push_back(s);
        all.push_back(s);
      }
    }
    // Every replica pulls all shards for this step: admitted at once, version == step.
    std::vector<std::pair<std::vector<float>, float>> grads;
    for (std::int32_t r = 0; r < kReplicas; ++r) {
      std::vector<std::vector<float>> pieces;
      for (auto& shard : shards) {
        auto got = shard.pull(r, step);
        REQUIRE(got.ok());
        REQUIRE(got->pulls.size() == 1);
        CHECK(got->pulls[0].version == step);
        pieces.push_back(got->pulls[0].values);
      }
      auto w = reassemble({pieces[0], pieces[1]}, w_shape, *layouts);
      REQUIRE(w.ok());
      grads.push_back(gradient(*w, pieces[2][0], batches[static_cast<std::size_t>(r)]));
    }
    // Pushes arrive in a different order each step; replica `early` already asks for
    // step + 1, which must wait for the last push of this step.
    const std::int32_t early = static_cast<std::int32_t>(step % kReplicas);
    std::size_t released = 0;
    for (std::int32_t i = 0; i < kReplicas; ++i) {
      const std::int32_t r = (early + i) % kReplicas;
      auto g_pieces = split_dense(grads[static_cast<std::size_t>(r)].first, w_shape, *layouts);
      REQUIRE(g_pieces.ok());
      const std::vector<Gradient> g{(*g_pieces)[0], (*g_pieces)[1],
                                    std::vector<float>{grads[static_cast<std::size_t>(r)].second}};
      for (std::size_t k = 0; k < shards.size(); ++k) {
        auto out = shards[k].push(Push{r, step, g[k]});
        REQUIRE(out.ok());
        REQUIRE(out->acks.size() == 1);
        for (const auto& reply : out->pulls) {
          CHECK(reply.replica == early);
          CHECK(reply.version == step + 1);
          ++released;
        }
        if (i == 0) {
          auto wait = shards[k].pull(early, step + 1);
          REQUIRE(wait.ok());
          CHECK(wait->pulls.empty());
        }
      }
      if (i < kReplicas - 1) CHECK(shards[0].version() == step);
    }
    CHECK(released == shards.size());
    auto [gw, gb] = gradient(ref_w, ref_b[0], all);
    REQUIRE(ref_w_opt.apply_dense(ref_w, gw).ok());
    REQUIRE(ref_b_opt.apply_dense(ref_b, {gb}).ok());
  }
  auto w = reassemble({shards[0].values(), shards[1].values()}, w_shape, *layouts);
  REQUIRE(w.ok());
  for (std::size_t j = 0; j < kFeatures; ++j) CHECK((*w)[j] == Approx(ref_w[j]).margin(1e-5));
  CHECK(shards[2].values()[0] == Approx(ref_b[0]).margin(1e-5));
  CHECK(shards[2].version() == 6);
}

TEST_CASE("SSP: a replica never runs more than s steps ahead of the slowest", "[ps][shard][ssp]") {
  const std::int64_t s = GENERATE(1, 3);
  CAPTURE(s);
  OptimizerConfig opt;
  auto c = shard_config("v", ShardLayout{{2}, 0, 0, 1}, opt, s);
  c.replica_hosts = {0, 1, 2};
  auto shard = Shard::create(c, {0.0F, 0.0F});
  REQUIRE(shard.ok());
  // Each replica: pull step n, push step n, n + 1. Replica 2 is slow: it moves on one
  // tick in four. A replica whose pull is held waits until a later call releases it.
  std::vector<std::int64_t> next(3, 0);
  std::vector<bool> waiting(3, false), has_params(3, false);
  std::int64_t max_lead = 0;
  std::size_t held_at_bound = 0;
  auto admit = [&](const PullReply& p) {
    // The bound, checked when the shard answers: step <= slowest + s, and the values
    // include every step up to step - s - 1.
    CHECK(p.step <= shard->slowest() + s);
    CHECK(p.version >= p.step - s);
    max_lead = std::max(max_lead, p.step - shard->slowest());
    const auto r = static_cast<std::size_t>(p.replica);
    waiting[r] = false;
    has_params[r] = true;
  };
  for (int tick = 0; tick < 200; ++tick) {
    for (std::int32_t r = 0; r < 3; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (waiting[i] || (r == 2 && tick % 4 != 0)) continue;
      if (!has_params[i]) {
        auto got = shard->pull(r, next[i]);
        REQUIRE(got.ok());
        if (got->pulls.empty()) {
          CHECK(next[i] == shard->slowest() + s + 1);  // held exactly past the bound
          ++held_at_bound;
          waiting[i] = true;
        }
        for (const auto& p : got->pulls) admit(p);
        continue;
      }
      auto out = shard->push(Push{r, next[i], std::vector<float>{0.1F, -0.1F}});
      REQUIRE(out.ok());
      CHECK(out->acks.size() == 1);
      for (const auto& p : out->pulls) admit(p);
      has_params[i] = false;
      ++next[i];
      for (std::int32_t q = 0; q < 3; ++q) CHECK(shard->clock(q) <= shard->slowest() + s + 1);
    }
  }
  CHECK(max_lead == s);  // the bound is reached, so it is exact, not merely respected
  CHECK(held_at_bound > 0);
  CHECK(next[2] == 25);  // the slow replica was never held
  CHECK(shard->version() == shard->slowest());
}
