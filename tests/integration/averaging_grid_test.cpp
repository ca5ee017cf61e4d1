// Moshpit averaging on a grid (hivemind's test_allreduce_grid): 8 averagers, each beside
// its own DHT node and UCX gateway on loopback, in groups of 2 keyed by 2 group bits.
// Every round all 8 step and the test waits for all of them before the next, as
// hivemind's test does; separate `apiary average --steps K` processes cannot keep their
// rounds aligned (a pair that finishes a round early meets a late peer of the previous
// round under the same key), so this check runs the averagers in one process.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <future>
#include <thread>

#include "api/averager.hpp"
#include "api/dht.hpp"

using namespace apiary;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t k_peers = 8;
constexpr std::size_t k_size = 1000;  ///< elements per averager

/// Per element, the mean and the (population) standard deviation across averagers.
struct Spread {
  std::vector<double> mean;
  std::vector<double> stddev;
};

Spread spread(const std::vector<std::unique_ptr<Averager>>& averagers) {
  Spread s{std::vector<double>(k_size, 0.0), std::vector<double>(k_size, 0.0)};
  std::vector<std::vector<float>> values;
  for (const auto& a : averagers) {
    auto tensors = a->tensors();
    REQUIRE(tensors.size() == 1);
    REQUIRE(tensors[0].size() == k_size);
    values.push_back(tensors[0]);
  }
  for (std::size_t i = 0; i < k_size; ++i) {
    for (const auto& v : values) s.mean[i] += v[i] / static_cast<double>(values.size());
    for (const auto& v : values) s.stddev[i] += (v[i] - s.mean[i]) * (v[i] - s.mean[i]);
    s.stddev[i] = std::sqrt(s.stddev[i] / static_cast<double>(values.size()));
  }
  return s;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

/// Averagers, each beside its own DHT node (bootstrapped from the first), over the
/// generated vectors sin(1.7 (p + 1) + 0.37 i), grouped by `bits[p]` in groups of 2.
struct Grid {
  std::vector<std::unique_ptr<Dht>> dhts;
  std::vector<std::unique_ptr<Averager>> averagers;

  explicit Grid(const std::vector<std::string>& bits) {
    for (std::size_t p = 0; p < bits.size(); ++p) {
      DhtOptions d;
      d.threads = 2;
      if (!dhts.empty()) d.initial_peers = dhts[0]->visible_addrs();
      auto dht = Dht::start(d);
      REQUIRE(dht.ok());
      dhts.push_back(std::move(*dht));
      AveragerOptions o;
      o.prefix = "grid";
      o.tensors = {std::vector<float>(k_size)};
      for (std::size_t i = 0; i < k_size; ++i) {
        const double x = 1.7 * static_cast<double>(p + 1) + 0.37 * static_cast<double>(i);
        o.tensors[0][i] = static_cast<float>(std::sin(x));
      }
      o.initial_group_bits = bits[p];
      o.target_group_size = 2;
      o.min_group_size = 2;
      o.min_matchmaking_time = 1.0;
      o.request_timeout = 1.0;
      o.part_size_bytes = 512;
      auto averager = Averager::start(*dhts.back(), o);
      REQUIRE(averager.ok());
      averagers.push_back(std::move(*averager));
    }
  }
  ~Grid() {
    averagers.clear();
    for (auto& d : dhts) d->stop();
  }

  /// One round: every averager steps, `stagger` apart, each failing after `timeout`
  /// seconds; the reports once all are done.
  std::vector<Result<AveragerStepReport>> round(std::chrono::milliseconds stagger, double timeout = 30) {
    std::vector<std::future<Result<AveragerStepReport>>> steps;
    AveragerStepOptions step;
    step.timeout = timeout;
    for (auto& a : averagers) {
      steps.push_back(a->step(step));
      std::this_thread::sleep_for(stagger);
    }
    std::vector<Result<AveragerStepReport>> out;
    for (auto& f : steps) out.push_back(f.get());
    return out;
  }
};

}  // namespace

TEST_CASE("a Moshpit grid of 8 averagers in groups of 2 keeps the mean and converges in 3 rounds",
          "[integration]") {
  // hivemind: initial bits bin(i // 2) on 2 digits.
  Grid grid({"00", "00", "01", "01", "10", "10", "11", "11"});
  auto& averagers = grid.averagers;
  const Spread initial = spread(averagers);
  REQUIRE(*std::max_element(initial.stddev.begin(), initial.stddev.end()) > 0.1);
  Spread previous = initial;
  for (int round = 0; round < 5; ++round) {
    INFO("round " << round);
    // Steps begun a few milliseconds apart, as hivemind's loop of step(wait=False) calls
    // begins them (steps begun within the same millisecond: the lockstep test below).
    auto reports = grid.round(20ms);
    for (std::size_t p = 0; p < k_peers; ++p) {
      const auto& report = reports[p];
      INFO("averager " << p << ": " << (report ? std::string("ok") : report.error().what()));
      REQUIRE(report.ok());
      CHECK(report->peers.size() == 2);
      CHECK(report->failed_senders.empty());
      CHECK(report->failed_reducers.empty());
    }
    const Spread now = spread(averagers);
    CHECK(max_abs_diff(now.mean, initial.mean) < 1e-6);
    const double worst = *std::max_element(now.stddev.begin(), now.stddev.end());
    INFO("largest std " << worst);
    if (round <= 2) {
      // Pairwise averaging never widens the spread (1e-7: float rounding).
      std::size_t wider = 0;
      for (std::size_t i = 0; i < k_size; ++i) wider += now.stddev[i] > previous.stddev[i] + 1e-7 ? 1 : 0;
      CHECK(wider == 0);
    } else {
      CHECK(worst < 1e-6);
    }
    previous = now;
  }
}

// Two averagers whose steps begin in the same millisecond, with request_timeout ==
// min_matchmaking_time (1 s): both read an empty leader queue before either declared.
// Were the next read due at their expiration, each would find the other between its
// expiring and its renewed declaration, round after round; the queue is read again once
// the own declaration is stored, and at most halfway to the expiration.
TEST_CASE("two averagers stepping in lockstep pair up every round", "[integration][lockstep]") {
  Grid grid({"", ""});
  for (int round = 0; round < 10; ++round) {
    INFO("round " << round);
    for (const auto& report : grid.round(0ms, 5)) {
      INFO((report ? std::string("ok") : report.error().what()));
      CHECK(report.ok());
    }
  }
}
