#include "core/ps/optimizer.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <map>

using namespace apiary::core::ps;

namespace {
OptimizerConfig config(OptimizerKind kind, float lr) {
  OptimizerConfig c;
  c.kind = kind;
  c.learning_rate = lr;
  return c;
}
}  // namespace

TEST_CASE("SGD subtracts the scaled gradient", "[ps][optimizer]") {
  Optimizer opt(config(OptimizerKind::sgd, 0.5F), 3, 1);
  std::vector<float> p{1.0F, 2.0F, 3.0F};
  REQUIRE(opt.apply_dense(p, {2.0F, -2.0F, 0.0F}).ok());
  CHECK(p == std::vector<float>{0.0F, 3.0F, 3.0F});
  CHECK(opt.slot_m().empty());
}

TEST_CASE("momentum keeps an accumulator (plain and Nesterov)", "[ps][optimizer]") {
  auto c = config(OptimizerKind::momentum, 0.1F);
  c.momentum = 0.5F;
  Optimizer opt(c, 1, 1);
  std::vector<float> p{0.0F};
  REQUIRE(opt.apply_dense(p, {1.0F}).ok());  // a = 1, p = -0.1
  REQUIRE(opt.apply_dense(p, {1.0F}).ok());  // a = 1.5, p = -0.25
  CHECK(opt.slot_m()[0] == Approx(1.5F));
  CHECK(p[0] == Approx(-0.25F));

  c.nesterov = true;
  Optimizer nes(c, 1, 1);
  std::vector<float> q{0.0F};
  REQUIRE(nes.apply_dense(q, {1.0F}).ok());  // a = 1, q -= 0.1 * (1 + 0.5 * 1)
  CHECK(q[0] == Approx(-0.15F));
}

TEST_CASE("Adam matches the bias-corrected formula", "[ps][optimizer]") {
  auto c = config(OptimizerKind::adam, 0.01F);
  Optimizer opt(c, 2, 1);
  std::vector<float> p{1.0F, 1.0F};
  const std::vector<float> g{0.5F, -2.0F};
  double m[2] = {0, 0}, v[2] = {0, 0}, ref[2] = {1, 1};
  for (int t = 1; t <= 3; ++t) {
    REQUIRE(opt.apply_dense(p, g).ok());
    const double lr_t = 0.01 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
    for (int i = 0; i < 2; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      ref[i] -= lr_t * m[i] / (std::sqrt(v[i]) + 1e-7);
    }
  }
  CHECK(p[0] == Approx(ref[0]).epsilon(1e-5));
  CHECK(p[1] == Approx(ref[1]).epsilon(1e-5));
  CHECK(opt.updates() == 3);
}

TEST_CASE("sparse Adam touches only its rows and uses the global update count", "[ps][optimizer][sparse]") {
  Optimizer opt(config(OptimizerKind::adam, 0.01F), 6, 2);  // 3 rows x 2
  std::vector<float> p(6, 1.0F);
  REQUIRE(opt.apply_sparse(p, SparseGradient{{0}, {1.0F, 1.0F}}).ok());
  // Row 2, listed twice, counts as the sum; its first touch is update 2.
  REQUIRE(opt.apply_sparse(p, SparseGradient{{2, 2}, {1.0F, 0.5F, 1.0F, 0.5F}}).ok());
  CHECK(p[2] == 1.0F);
  CHECK(p[3] == 1.0F);
  CHECK(opt.slot_m()[2] == 0.0F);
  CHECK(opt.slot_v()[3] == 0.0F);
  // Row 0 was not decayed by update 2 (lazy Adam).
  CHECK(opt.slot_m()[0] == Approx(0.1F));
  const double lr_t = 0.01 * std::sqrt(1 - 0.999 * 0.999) / (1 - 0.9 * 0.9);
  const double m = 0.1 * 2.0, v = 0.001 * 4.0;
  CHECK(p[4] == Approx(1.0 - lr_t * m / (std::sqrt(v) + 1e-7)).epsilon(1e-5));
}

TEST_CASE("a gradient applied block by block gives the bits of the whole gradient", "[ps][optimizer]") {
  constexpr std::size_t n = 41;
  std::vector<float> grad(n);
  for (std::size_t i = 0; i < n; ++i) grad[i] = 0.37F * static_cast<float>(i) - 5.1F;
  for (const auto kind : {OptimizerKind::sgd, OptimizerKind::momentum, OptimizerKind::adam}) {
    for (const bool nesterov : {false, true}) {
      for (const std::size_t block : {std::size_t{1}, std::size_t{7}, n + 3}) {
        INFO("kind " << static_cast<int>(kind) << ", nesterov " << nesterov << ", block " << block);
        auto c = config(kind, 0.05F);
        c.momentum = 0.9F;
        c.nesterov = nesterov;
        Optimizer whole(c, n, 1), blocked(c, n, 1);
        std::vector<float> a(n, 1.5F), b(n, 1.5F);
        for (int step = 0; step < 3; ++step) {  // Adam's bias correction and the slots carry over
          REQUIRE(whole.apply_dense_scaled(a, grad, 0.25F).ok());
          std::vector<std::size_t> asked;
          REQUIRE(blocked
                      .apply_dense_blocks(b, 0.25F, block,
                                          [&](std::size_t at, std::size_t len) {
                                            asked.push_back(at);
                                            CHECK(len == std::min(block, n - at));
                                            return grad.data() + at;
                                          })
                      .ok());
          CHECK(asked.size() == (n + block - 1) / block);
        }
        CHECK(std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0);
        CHECK(whole.slot_m() == blocked.slot_m());
        CHECK(whole.slot_v() == blocked.slot_v());
      }
    }
  }
  Optimizer opt(config(OptimizerKind::sgd, 0.1F), 3, 1);
  std::vector<float> wrong(2, 0.0F);
  CHECK_FALSE(opt.apply_dense_blocks(wrong, 1.0F, 4, [](std::size_t, std::size_t) -> const float* { return nullptr; })
                  .ok());
}

TEST_CASE("optimizer rejects bad input without changing anything", "[ps][optimizer][errors]") {
  Optimizer opt(config(OptimizerKind::momentum, 0.1F), 4, 2);
  std::vector<float> p(4, 1.0F);
  CHECK(opt.apply_dense(p, {1.0F}).error().code == apiary::errc::invalid_argument);
  auto bad_row = opt.apply_sparse(p, SparseGradient{{2}, {1.0F, 1.0F}});
  REQUIRE_FALSE(bad_row.ok());
  CHECK(bad_row.error().message.find("rows in [0, 2)") != std::string::npos);
  CHECK_FALSE(opt.apply_sparse(p, SparseGradient{{0}, {1.0F}}).ok());
  CHECK(p == std::vector<float>(4, 1.0F));
  CHECK(opt.updates() == 0);
  auto c = config(OptimizerKind::adam, 0.1F);
  c.beta1 = 1.0F;
  CHECK_FALSE(validate(c).ok());
  CHECK_FALSE(validate(config(OptimizerKind::sgd, 0.0F)).ok());
}

TEST_CASE("merge_rows sums repeated rows in the order given and sorts them, by table or by hash", "[ps][optimizer][sparse]") {
  // The reference: a std::map from row to its running float sums.
  auto reference = [](const SparseGradient& g, std::size_t width) {
    std::map<std::int64_t, std::vector<float>> sums;
    for (std::size_t i = 0; i < g.rows.size(); ++i) {
      auto& acc = sums[g.rows[i]];
      acc.resize(width, 0.0F);
      for (std::size_t j = 0; j < width; ++j) acc[j] += g.values[i * width + j];
    }
    SparseGradient out;
    for (const auto& [row, acc] : sums) {
      out.rows.push_back(row);
      out.values.insert(out.values.end(), acc.begin(), acc.end());
    }
    return out;
  };
  // 2,000 entries over few rows (a table indexed by row) and over 10^12 rows (a hash map).
  const std::int64_t num_rows = GENERATE(std::int64_t{300}, std::int64_t{1'000'000'000'000});
  const std::size_t width = GENERATE(std::size_t{1}, std::size_t{3});
  INFO("rows " << num_rows << ", width " << width);
  SparseGradient g;
  std::uint64_t x = 88172645463325252ULL;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (int i = 0; i < 2000; ++i) {
    g.rows.push_back(static_cast<std::int64_t>(next() % 300) * (num_rows / 300));
    for (std::size_t j = 0; j < width; ++j) g.values.push_back(static_cast<float>(next() % 2001) / 1000.0F - 1.0F);
  }
  auto merged = merge_rows(g, width, num_rows);
  REQUIRE(merged.ok());
  const SparseGradient want = reference(g, width);
  CHECK(merged->rows == want.rows);
  REQUIRE(merged->values.size() == want.values.size());
  CHECK(std::memcmp(merged->values.data(), want.values.data(), want.values.size() * sizeof(float)) == 0);
  CHECK(std::is_sorted(merged->rows.begin(), merged->rows.end()));
  CHECK_FALSE(merge_rows(SparseGradient{{num_rows}, std::vector<float>(width, 1.0F)}, width, num_rows).ok());
  CHECK_FALSE(merge_rows(SparseGradient{{-1}, std::vector<float>(width, 1.0F)}, width, num_rows).ok());
}
