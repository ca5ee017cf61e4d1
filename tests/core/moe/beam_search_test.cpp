// The client's beam search over the expert grid (hivemind's MoEBeamSearcher, reference
// §6.3, test_beam_search_correctness, test_dht_single_node, test_negative_caching),
// against experts declared in a DHT node of the in-memory network.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/moe/beam_search.hpp"
#include "core/rng.hpp"
#include "tests/core/moe/expert_dht.hpp"

namespace {

namespace moe = apiary::core::moe;
using apiary::core::Rng;
using moe::BeamSearch;
using moe::BeamSearchConfig;
using moe::GridScores;
using moe::NegativeCache;
using moe::testing::OneNodeDht;
using namespace std::chrono_literals;

const std::string k_peer = "12D3KooWPeer";

BeamSearchConfig grid_config(const std::string& prefix, std::vector<std::size_t> grid) {
  BeamSearchConfig c;
  c.uid_prefix = prefix;
  c.grid_size = std::move(grid);
  return c;
}

std::vector<std::string> uids_of(const std::vector<moe::ScoredExpert>& experts) {
  std::vector<std::string> out;
  for (const auto& e : experts) out.push_back(e.expert.uid);
  return out;
}

std::vector<std::string> prefixes_of(const std::vector<moe::BeamEntry>& beam) {
  std::vector<std::string> out;
  for (const auto& e : beam) out.push_back(e.prefix);
  return out;
}

}  // namespace

TEST_CASE("beam search equals the exhaustive top-k over 1000 experts in a 32x32x32 grid in 25 trials", "[moe]") {
  OneNodeDht d;
  // hivemind's test_beam_search_correctness: ffn.{5..14}.{10..19}.{15..24}.
  std::vector<std::string> uids;
  for (int i = 5; i < 15; ++i) {
    for (int j = 10; j < 20; ++j) {
      for (int k = 15; k < 25; ++k) uids.push_back(fmt::format("ffn.{}.{}.{}", i, j, k));
    }
  }
  REQUIRE(uids.size() == 1000);
  const auto stored = moe::testing::declare(d.net, d.node, uids, k_peer);
  CHECK(std::count(stored.begin(), stored.end(), true) == 1000 + 1000 + 100);  // uids, (i.j., k), (i., j)

  Rng rng(2024);
  const std::size_t k_best = 4;
  for (int trial = 0; trial < 25; ++trial) {
    GridScores scores(3, std::vector<double>(32));
    for (auto& row : scores) {
      for (double& s : row) s = rng.uniform01() * 2 - 1;
    }
    // Exhaustive: every declared expert's summed score, best first.
    std::vector<double> all;
    for (int i = 5; i < 15; ++i) {
      for (int j = 10; j < 20; ++j) {
        for (int k = 15; k < 25; ++k) all.push_back(0.0 + scores[0][i] + scores[1][j] + scores[2][k]);
      }
    }
    std::sort(all.rbegin(), all.rend());

    auto search = BeamSearch::create(grid_config("ffn.", {32, 32, 32}), scores, k_best);
    REQUIRE(search);
    NegativeCache cache;
    moe::testing::run_search(d.net, d.node, *search, cache);
    const auto found = search->experts();
    REQUIRE(found.size() == k_best);
    for (std::size_t i = 0; i < k_best; ++i) {
      INFO("trial " << trial << " rank " << i << " " << found[i].expert.uid);
      CHECK(found[i].score == all[i]);
      CHECK(found[i].expert.peer_id == k_peer);
      const auto parts = moe::parse_uid(found[i].expert.uid);
      REQUIRE(parts);
      const auto& c = parts->coordinates;
      CHECK(found[i].score == 0.0 + scores[0][c[0]] + scores[1][c[1]] + scores[2][c[2]]);
    }
  }
}

TEST_CASE("a beam as wide as the populated prefixes ranks 1000 scattered experts exhaustively", "[moe]") {
  // Experts at random places of the grid: a narrow beam is a heuristic there (a good first
  // coordinate may hold only poor experts), but a beam that keeps every populated prefix
  // must see and rank every expert.
  OneNodeDht d;
  Rng rng(77);
  std::set<std::string> placed;
  while (placed.size() < 1000) {
    placed.insert(fmt::format("ffn.{}.{}.{}", rng.uniform(32), rng.uniform(32), rng.uniform(32)));
  }
  const std::vector<std::string> uids(placed.begin(), placed.end());
  (void)moe::testing::declare(d.net, d.node, uids, k_peer);
  for (int trial = 0; trial < 3; ++trial) {
    GridScores scores(3, std::vector<double>(32));
    for (auto& row : scores) {
      for (double& s : row) s = rng.uniform01();
    }
    std::vector<std::pair<double, std::string>> all;
    for (const std::string& uid : uids) {
      const auto c = moe::parse_uid(uid)->coordinates;
      all.emplace_back(0.0 + scores[0][c[0]] + scores[1][c[1]] + scores[2][c[2]], uid);
    }
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    auto search = BeamSearch::create(grid_config("ffn.", {32, 32, 32}), scores, 32 * 32);
    REQUIRE(search);
    NegativeCache cache;
    moe::testing::run_search(d.net, d.node, *search, cache);
    const auto found = search->experts();
    REQUIRE(found.size() == all.size());
    for (std::size_t i = 0; i < all.size(); ++i) {
      INFO("trial " << trial << " rank " << i);
      CHECK(found[i].expert.uid == all[i].second);
      CHECK(found[i].score == all[i].first);
    }
  }
}

TEST_CASE("beam search over a one-dimensional grid finds flat experts", "[moe]") {
  OneNodeDht d;
  (void)moe::testing::declare(d.net, d.node, {"expert.1", "expert.2", "expert.3", "expert.5"}, k_peer);
  auto search = BeamSearch::create(grid_config("expert.", {10}),
                                   GridScores{{0.0, 0.1, 0.2, 0.8, 0.4, 0.9, 0.95, 0.0, 0.0, 0.0}}, 2);
  REQUIRE(search);
  NegativeCache cache;
  moe::testing::run_search(d.net, d.node, *search, cache);
  // expert.6 scores best but does not exist.
  CHECK(uids_of(search->experts()) == std::vector<std::string>{"expert.5", "expert.3"});
  CHECK(search->experts()[0].score == 0.9);
  CHECK(cache.contains(d.net.now(), "expert.6."));
}

TEST_CASE("the initial beam takes prefixes with experts from the best score down", "[moe]") {
  OneNodeDht d;
  (void)moe::testing::declare(d.net, d.node, {"expert.1", "expert.2", "expert.3"}, k_peer);
  std::vector<double> scores(10, -1.0);
  for (int i = 0; i < 4; ++i) scores[static_cast<std::size_t>(i)] = 3.0 - i;  // 3, 2, 1, 0, -1, ...
  auto search = BeamSearch::initial_beam(grid_config("expert.", {10}), scores, 3);
  REQUIRE(search);
  NegativeCache cache;
  moe::testing::run_search(d.net, d.node, *search, cache);
  REQUIRE(search->beam().size() == 3);
  CHECK(prefixes_of(search->beam()) == std::vector<std::string>{"expert.1.", "expert.2.", "expert.3."});
  CHECK(search->beam()[0].score == 2.0);
  CHECK(search->beam()[1].score == 1.0);
  CHECK(search->beam()[2].score == 0.0);
  CHECK(search->beam()[0].successors == moe::Successors{{-1, moe::ExpertInfo{"expert.1", k_peer}}});
}

TEST_CASE("prefixes without experts are cached as empty until their expiry", "[moe]") {
  OneNodeDht d;
  (void)moe::testing::declare(d.net, d.node, {"ffn.1.2.3", "ffn.3.4.5"}, k_peer);
  const BeamSearchConfig config = grid_config("ffn.", {10, 10, 10});
  const std::vector<double> scores{0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
  NegativeCache cache;
  std::vector<std::string> asked;
  auto first = BeamSearch::initial_beam(config, scores, 3);
  REQUIRE(first);
  moe::testing::run_search(d.net, d.node, *first, cache, &asked);
  CHECK(prefixes_of(first->beam()) == std::vector<std::string>{"ffn.3.", "ffn.1."});
  CHECK(asked.size() == 6);
  for (int i = 0; i < 10; ++i) {
    const std::string prefix = fmt::format("ffn.{}.", i);
    INFO(prefix);
    CHECK(cache.contains(d.net.now(), prefix) == (i == 0 || i == 2 || i == 4 || i == 5));
  }

  // Within the expiration a search asks only for the populated prefixes.
  d.net.advance(299s);
  asked.clear();
  auto second = BeamSearch::initial_beam(config, scores, 3);
  moe::testing::run_search(d.net, d.node, *second, cache, &asked);
  CHECK(asked == std::vector<std::string>{"ffn.3.", "ffn.1."});
  CHECK(prefixes_of(second->beam()) == std::vector<std::string>{"ffn.3.", "ffn.1."});

  // After it, the empty prefixes are asked again (and an expert declared meanwhile is found).
  d.net.advance(2s);
  (void)moe::testing::declare(d.net, d.node, {"ffn.5.0.0"}, k_peer);
  asked.clear();
  auto third = BeamSearch::initial_beam(config, scores, 3);
  moe::testing::run_search(d.net, d.node, *third, cache, &asked);
  CHECK(asked.size() == 6);
  CHECK(prefixes_of(third->beam()) == std::vector<std::string>{"ffn.5.", "ffn.3.", "ffn.1."});
  // ffn.4. and ffn.2. are empty again; ffn.0. was asked for, but the beam was full
  // (ffn.1.) before its answer was needed: cancelled, not cached.
  cache.purge(d.net.now());
  CHECK(cache.size() == 2);
  CHECK(cache.contains(d.net.now(), "ffn.4."));
  CHECK(cache.contains(d.net.now(), "ffn.2."));

  // Without negative caching nothing is remembered.
  BeamSearchConfig uncached = config;
  uncached.negative_caching = false;
  NegativeCache untouched;
  auto plain = BeamSearch::initial_beam(uncached, scores, 3);
  moe::testing::run_search(d.net, d.node, *plain, untouched);
  CHECK(untouched.size() == 0);
}

TEST_CASE("lookups answered out of order are taken in score order and cancelled ones ignored", "[moe]") {
  BeamSearchConfig config = grid_config("e.", {4, 3});
  config.initial_workers = 4;
  auto search = BeamSearch::create(config, GridScores{{0.4, 0.3, 0.2, 0.1}, {0.0, 5.0, 1.0}}, 1);
  REQUIRE(search);
  NegativeCache cache;
  const auto now = apiary::core::TimePoint{0};
  auto step = search->begin(now, cache);
  CHECK(step.lookups == std::vector<std::string>{"e.0.", "e.1.", "e.2.", "e.3."});
  // e.1. answers first: it waits, e.0. (better) is not decided yet.
  step = search->on_found(now, "e.1.", moe::Successors{{1, {"e.1.1", "p"}}}, cache);
  CHECK(step.lookups.empty());
  CHECK(search->beam().empty());
  // e.0. has nothing: e.1. takes the only place, the rest are cancelled, the grid's
  // last dimension is reached: done.
  step = search->on_found(now, "e.0.", std::nullopt, cache);
  CHECK(step.found_empty == std::vector<std::string>{"e.0."});
  CHECK(step.cancelled == std::vector<std::string>{"e.2.", "e.3."});
  REQUIRE(search->done());
  CHECK(uids_of(search->experts()) == std::vector<std::string>{"e.1.1"});
  CHECK(search->experts()[0].score == 0.3 + 5.0);
  step = search->on_found(now, "e.2.", moe::Successors{{2, {"e.2.2", "p"}}}, cache);  // too late: ignored
  CHECK(uids_of(search->experts()) == std::vector<std::string>{"e.1.1"});
  CHECK(search->pending() == 0);
}

TEST_CASE("successors outside the grid and foreign uids are not experts of the search", "[moe]") {
  auto search = BeamSearch::create(grid_config("e.", {2, 2}), GridScores{{1.0, 0.0}, {0.0, 1.0}}, 3);
  REQUIRE(search);
  NegativeCache cache;
  const auto now = apiary::core::TimePoint{0};
  auto step = search->begin(now, cache);
  REQUIRE(step.lookups == std::vector<std::string>{"e.0.", "e.1."});
  step = search->on_found(now, "e.0.",
                          moe::Successors{{0, {"e.0.0", "p"}},
                                          {1, {"e.0.1", "p"}},
                                          {2, {"e.0.2", "p"}},        // past the grid
                                          {-1, {"e.0", "p"}},         // a 1-D uid
                                          {3, {"x.0.3", "p"}}},       // another grid's uid
                          cache);
  step = search->on_found(now, "e.1.", moe::Successors{{0, {"e.1.1", "p"}}}, cache);  // names another coordinate
  REQUIRE(search->done());
  CHECK(uids_of(search->experts()) == std::vector<std::string>{"e.0.1", "e.0.0"});
}

TEST_CASE("bad beam search configs and scores are refused", "[moe]") {
  const GridScores scores{{0.0, 1.0}, {0.0, 1.0}};
  auto bad_prefix = BeamSearch::create(grid_config("expert", {2, 2}), scores, 1);
  REQUIRE_FALSE(bad_prefix);
  CHECK(bad_prefix.error().message.find("'expert' is not a prefix") != std::string::npos);
  CHECK_FALSE(BeamSearch::create(grid_config("e.", {}), {}, 1));
  CHECK_FALSE(BeamSearch::create(grid_config("e.", {2, 0}), scores, 1));
  CHECK_FALSE(BeamSearch::create(grid_config("e.", {2, 2}), scores, 0));
  auto shape = BeamSearch::create(grid_config("e.", {2, 3}), scores, 1);
  REQUIRE_FALSE(shape);
  CHECK(shape.error().message.find("dimension 1 has 2 scores, the grid 3") != std::string::npos);
  auto rows = BeamSearch::create(grid_config("e.", {2, 2, 2}), scores, 1);
  REQUIRE_FALSE(rows);
  CHECK(rows.error().message.find("2 rows of grid scores for a grid of 3 dimensions") != std::string::npos);
  auto nan = BeamSearch::create(grid_config("e.", {2, 2}),
                                GridScores{{0.0, std::numeric_limits<double>::quiet_NaN()}, {0.0, 1.0}}, 1);
  REQUIRE_FALSE(nan);
  CHECK(nan.error().message.find("not finite") != std::string::npos);
  CHECK_FALSE(BeamSearch::initial_beam(grid_config("e.", {2, 2}), {0.0, 1.0, 2.0}, 1));
}
