// core::averaging load balancing: the reference's expectations, optimality of the exact
// LP solution against random and grid-searched feasible points, and random splits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "core/averaging/load_balancing.hpp"

namespace {

using apiary::errc;
using apiary::core::averaging::hagenbach_bischoff;
using apiary::core::averaging::load_balance_peers;
using apiary::core::averaging::optimize_parts_lp;
using Split = std::vector<std::int64_t>;
using Bandwidths = std::vector<std::optional<double>>;

Split balance(std::int64_t size, const Bandwidths& bandwidths, std::int64_t min_size = 0) {
  auto r = load_balance_peers(size, bandwidths, min_size);
  INFO((r.ok() ? std::string() : r.error().what()));
  REQUIRE(r.ok());
  return *r;
}

Bandwidths declared(const std::vector<double>& b) { return Bandwidths(b.begin(), b.end()); }

/// The reference test's round time of a split: max_i (V - p_i + (N - 1) p_i) / b_i.
double cost(std::int64_t size, const Split& parts, const std::vector<double>& bandwidths) {
  double worst = 0.0;
  const double n = static_cast<double>(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const double p = static_cast<double>(parts[i]);
    worst = std::max(worst, (static_cast<double>(size) - p + (n - 1) * p) /
                                std::max(bandwidths[i], 1e-9));
  }
  return worst;
}

/// The LP objective of fractions w: max over reducing-capable peers of (1 + (N-2) w_i) / b_i.
double lp_objective(const std::vector<double>& w, const std::vector<double>& b) {
  double xi = -1e300;
  const double c = static_cast<double>(w.size()) - 2.0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (b[i] > 0.0) xi = std::max(xi, (1.0 + c * w[i]) / b[i]);
  }
  return xi;
}

void check_optimality(std::int64_t size, const std::vector<double>& b, const Split& reference) {
  const Split ours = balance(size, declared(b));
  CAPTURE(size, b, ours, reference);
  CHECK(cost(size, ours, b) <= cost(size, reference, b));
}

}  // namespace

TEST_CASE("the reference's load-balancing expectations hold", "[averaging][load_balancing]") {
  CHECK(balance(60, declared({0.55, 0.44, 0.40}), 10) == Split{41, 19, 0});
  CHECK(balance(60, declared({0.32, 0.55, 0.44}), 10) == Split{0, 40, 20});
  CHECK(balance(2, declared({0.55, 0.20, 0.44}), 10) == Split{1, 0, 1});
  CHECK(balance(1, declared({0.55, 0.20, 0.44}), 10) == Split{1, 0, 0});
  CHECK(balance(100, {std::nullopt, std::nullopt}) == Split{50, 50});
  CHECK(balance(100, Bandwidths(5, std::nullopt)) == Split{20, 20, 20, 20, 20});
  CHECK(balance(100, {0.0, 0.0, 0.0, std::nullopt, std::nullopt}) == Split{0, 0, 0, 50, 50});

  auto all_zero = load_balance_peers(100, {0.0, 0.0, 0.0});
  REQUIRE_FALSE(all_zero.ok());
  CHECK(all_zero.error().code == errc::invalid_argument);
  CHECK_THAT(all_zero.error().message, Catch::Contains("bandwidth 0"));
}

TEST_CASE("splits are at least as fast as the reference's optimal partitions",
          "[averaging][load_balancing]") {
  check_optimality(60, {0.25, 0.25, 0.25, 0.25}, {15, 15, 15, 15});
  check_optimality(1024, {0.3, 0.5, 0.9}, {0, 255, 769});
  check_optimality(60, {0.44, 0.33, 0.22}, {42, 18, 0});
  check_optimality(60, {0.55, 0.44, 0.40}, {35, 16, 9});
  check_optimality(1024 * 1024, {0.3, 0.5, 0.9, 0.6}, {0, 169327, 602629, 276620});
  check_optimality(1024 * 1024, {0.0, 0.5, 0.0, 0.6}, {0, 428963, 0, 619613});
}

TEST_CASE("the closed-form optimum is never beaten by a feasible point",
          "[averaging][load_balancing]") {
  std::mt19937_64 rng(20261130);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = 1 + rng() % 7;
    std::vector<double> b(n);
    for (double& x : b) x = unit(rng) < 0.2 ? 0.0 : 1e-3 + unit(rng) * 10.0;
    if (std::all_of(b.begin(), b.end(), [](double x) { return x == 0.0; })) b[0] = 1.0;
    auto lp = optimize_parts_lp(b);
    REQUIRE(lp.ok());
    CAPTURE(b, lp->fractions, lp->xi);

    // Feasible, and its objective is the reported optimum.
    double sum = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      CHECK(lp->fractions[i] >= 0.0);
      CHECK(lp->fractions[i] <= 1.0 + 1e-12);
      if (b[i] == 0.0) CHECK(lp->fractions[i] == 0.0);
      sum += lp->fractions[i];
    }
    CHECK(sum == Approx(1.0).epsilon(1e-12));
    CHECK(lp_objective(lp->fractions, b) <= lp->xi * (1 + 1e-12) + 1e-12);

    // Random feasible points (uniform on the simplex of reducing peers) never do better.
    for (int sample = 0; sample < 200; ++sample) {
      std::vector<double> w(n, 0.0);
      double total = 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        if (b[i] > 0.0) total += w[i] = -std::log(1.0 - unit(rng));
      }
      for (double& x : w) x /= total;
      CHECK(lp_objective(w, b) >= lp->xi * (1 - 1e-12) - 1e-12);
    }
  }
}

TEST_CASE("a fine grid over three peers finds nothing better", "[averaging][load_balancing]") {
  const std::vector<std::vector<double>> cases = {
      {0.55, 0.44, 0.40}, {0.32, 0.55, 0.44}, {0.55, 0.20, 0.44}, {3.0, 1.0, 0.0}, {1, 1, 1}};
  for (const auto& b : cases) {
    auto lp = optimize_parts_lp(b);
    REQUIRE(lp.ok());
    double best = 1e300;
    const int steps = 400;
    for (int i = 0; i <= steps; ++i) {
      for (int j = 0; i + j <= steps; ++j) {
        std::vector<double> w = {double(i) / steps, double(j) / steps,
                                 double(steps - i - j) / steps};
        bool feasible = true;
        for (std::size_t k = 0; k < 3; ++k) feasible = feasible && (b[k] > 0.0 || w[k] == 0.0);
        if (feasible) best = std::min(best, lp_objective(w, b));
      }
    }
    CAPTURE(b, lp->xi, best);
    CHECK(lp->xi <= best + 1e-12);
    CHECK(lp->xi == Approx(best).epsilon(1e-2));  // the grid gets close to it
  }
}

TEST_CASE("one and two peers", "[averaging][load_balancing]") {
  // One peer reduces everything; the program's optimum is 0.
  CHECK(balance(77, declared({0.3})) == Split{77});
  auto one = optimize_parts_lp({0.3});
  REQUIRE(one.ok());
  CHECK(one->xi == 0.0);
  // Two peers: the round time does not depend on the split; the reference's solver
  // returns an equal split between peers that can reduce, and so do we.
  CHECK(balance(100, declared({1.0, 3.0})) == Split{50, 50});
  CHECK(balance(101, declared({5.0, 0.5})) == Split{51, 50});
  CHECK(balance(100, declared({0.0, 5.0})) == Split{0, 100});
  auto two = optimize_parts_lp({1.0, 4.0});
  REQUIRE(two.ok());
  CHECK(two->xi == 1.0);
}

TEST_CASE("undeclared bandwidths take the mean of the declared ones",
          "[averaging][load_balancing]") {
  CHECK(balance(1000, {std::nullopt, 2.0, 4.0}) == balance(1000, declared({3.0, 2.0, 4.0})));
  CHECK(balance(1000, {std::nullopt, 2.0, 0.0}) == balance(1000, declared({2.0, 2.0, 0.0})));
  // Faster peers reduce more.
  const Split s = balance(1000, declared({1.0, 2.0, 3.0, 4.0}));
  CHECK(std::is_sorted(s.begin(), s.end()));
}

TEST_CASE("random splits sum to the vector size and are never negative",
          "[averaging][load_balancing]") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 40; ++trial) {
    const std::int64_t size = 1 + static_cast<std::int64_t>(rng() % (1ULL << 30));
    const std::size_t n = 1 + rng() % 255;
    const double scale = 1e-9 + unit(rng) * 1e5;
    Bandwidths b(n);
    for (auto& x : b) x = unit(rng) * scale + 1e-6;
    const std::int64_t min_size = trial % 2 ? 0 : static_cast<std::int64_t>(rng() % (size / 10 + 1));
    const Split s = balance(size, b, min_size);
    REQUIRE(s.size() == n);
    CHECK(std::accumulate(s.begin(), s.end(), std::int64_t{0}) == size);
    CHECK(std::all_of(s.begin(), s.end(), [](std::int64_t x) { return x >= 0; }));
  }
}

TEST_CASE("Hagenbach-Bischoff gives leftovers to the largest quotient, first on ties",
          "[averaging][load_balancing]") {
  CHECK(*hagenbach_bischoff(10, {1.0, 1.0, 1.0}) == Split{4, 3, 3});
  CHECK(*hagenbach_bischoff(7, {0.0, 2.0, 1.0}) == Split{0, 5, 2});
  CHECK(*hagenbach_bischoff(0, {1.0, 2.0}) == Split{0, 0});
  CHECK_FALSE(hagenbach_bischoff(10, {0.0, 0.0}).ok());
  CHECK_FALSE(hagenbach_bischoff(10, {1.0, -1.0}).ok());
}

TEST_CASE("bad load-balancing inputs are rejected with clear errors",
          "[averaging][load_balancing]") {
  auto negative = load_balance_peers(10, {1.0, -2.0});
  REQUIRE_FALSE(negative.ok());
  CHECK_THAT(negative.error().message, Catch::Contains("peer 1"));
  CHECK_FALSE(load_balance_peers(10, {1.0, std::nan("")}).ok());
  CHECK_FALSE(load_balance_peers(10, {1.0, HUGE_VAL}).ok());
  CHECK_FALSE(load_balance_peers(-1, {1.0}).ok());
  CHECK_FALSE(load_balance_peers(10, {1.0}, -5).ok());
  CHECK_FALSE(load_balance_peers(10, {}).ok());
  CHECK_FALSE(optimize_parts_lp({0.0, 0.0}).ok());
  // An empty vector is split into nothing.
  CHECK(balance(0, declared({1.0, 2.0})) == Split{0, 0});
}
