// apiary::Optimizer over UCX in one process (each peer beside its own Dht): two peers of
// different speeds with constant gradients take each epoch's step with the
// sample-weighted average; a latecomer loads the state; bad arguments are refused.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <atomic>
#include <thread>

#include "api/dht.hpp"
#include "api/optimizer.hpp"
#include "tests/actors/dht_peers.hpp"

using namespace apiary;
using namespace std::chrono_literals;

namespace {

/// `n` DHT nodes to start with; add() starts more.
struct Peers : testing::DhtPeers {
  explicit Peers(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) add();
  }
};

OptimizerOptions options_of(const std::string& run) {
  OptimizerOptions o;
  o.run_id = run;
  auto key = messages::Ed25519PrivateKey::generate();  // the peers of this process sign apart
  REQUIRE(key.ok());
  o.owner_key = std::move(*key);
  o.params = {std::vector<float>(5, 0.0f)};
  o.inner.kind = core::ps::OptimizerKind::sgd;
  o.inner.learning_rate = 0.1f;
  o.tracker.target_batch_size = 24;
  o.tracker.min_refresh_period = 0.1;
  o.tracker.max_refresh_period = 0.5;
  o.tracker.default_refresh_period = 0.2;
  o.matchmaking_time = 1.0;
  o.averaging_timeout = 30.0;
  o.request_timeout = 1.0;
  return o;
}

/// Epochs one peer took: (epoch left, samples it gave, w after).
struct Epoch {
  std::int64_t from = 0;
  std::int64_t samples = 0;
  float w = 0;
};

}  // namespace

TEST_CASE("two peers step each epoch with the sample-weighted average gradient", "[actor][optim]") {
  Peers peers(2);
  std::vector<std::unique_ptr<Optimizer>> opts;
  for (std::size_t i = 0; i < 2; ++i) {
    auto opt = Optimizer::start(*peers.dhts[i], options_of("constant"));
    REQUIRE(opt.ok());
    opts.push_back(std::move(*opt));
  }
  // Peer i's gradient is i + 1 everywhere; batches of 2 and 3 samples.
  std::vector<std::vector<Epoch>> logs(2);
  std::vector<std::thread> threads;
  std::atomic<bool> failed{false};
  for (std::size_t i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      const std::int64_t batch = i == 0 ? 2 : 3;
      const std::vector<std::vector<float>> grads{std::vector<float>(5, static_cast<float>(i + 1))};
      std::int64_t given = 0;
      const auto deadline = std::chrono::steady_clock::now() + 90s;
      while (opts[i]->local_epoch() < 3 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(i == 0 ? 50ms : 80ms);
        const std::int64_t before = opts[i]->local_epoch();
        auto step = opts[i]->step(grads, batch);
        if (!step) {
          failed = true;
          return;
        }
        given += batch;
        if (step->new_epoch) {
          logs[i].push_back(Epoch{before, given, opts[i]->params()[0][0]});
          given = 0;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE_FALSE(failed);
  REQUIRE(logs[0].size() == 3);
  REQUIRE(logs[1].size() == 3);
  float w = 0;
  for (std::size_t e = 0; e < 3; ++e) {
    INFO("epoch " << e);
    const auto s1 = static_cast<float>(logs[0][e].samples);
    const auto s2 = static_cast<float>(logs[1][e].samples);
    w -= 0.1f * (s1 * 1 + s2 * 2) / (s1 + s2);
    CHECK(logs[0][e].w == Approx(w).margin(1e-5));
    CHECK(logs[1][e].w == Approx(w).margin(1e-5));
  }
  CHECK(opts[0]->params() == opts[1]->params());

  // A latecomer loads the swarm's parameters and epoch.
  auto late = Optimizer::start(peers.add(), options_of("constant"));
  REQUIRE(late.ok());
  auto loaded = (*late)->load_state_from_peers();
  REQUIRE(loaded.ok());
  CHECK(*loaded);
  CHECK((*late)->local_epoch() == 3);
  CHECK((*late)->params() == opts[0]->params());
}

TEST_CASE("the optimizer refuses bad options and bad gradients, changing nothing", "[actor][optim]") {
  Peers peers(1);
  auto bad = options_of("bad");
  bad.run_id.clear();
  CHECK(Optimizer::start(*peers.dhts[0], bad).error().code == errc::invalid_argument);
  bad = options_of("bad");
  bad.tracker.target_batch_size = 0;
  CHECK(Optimizer::start(*peers.dhts[0], bad).error().code == errc::invalid_argument);
  bad = options_of("bad");
  bad.inner.learning_rate = -1;
  CHECK(Optimizer::start(*peers.dhts[0], bad).error().code == errc::invalid_argument);
  auto opt = Optimizer::start(*peers.dhts[0], options_of("ok"));
  REQUIRE(opt.ok());
  CHECK((*opt)->step({std::vector<float>(4, 1.0f)}, 2).error().code == errc::invalid_argument);
  CHECK((*opt)->step({std::vector<float>(5, 1.0f)}, 0).error().code == errc::invalid_argument);
  CHECK((*opt)->step({}, 2).error().code == errc::invalid_argument);
  CHECK((*opt)->params()[0] == std::vector<float>(5, 0.0f));
  // Alone: no donor to load from.
  auto loaded = (*opt)->load_state_from_peers();
  REQUIRE(loaded.ok());
  CHECK_FALSE(*loaded);
}
