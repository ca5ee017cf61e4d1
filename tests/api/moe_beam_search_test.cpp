// apiary::MoEBeamSearcher over DHT nodes on UCX in one process (hivemind's
// test_beam_search_correctness, test_negative_caching, test_beam_search): searches
// equal the exhaustive top-k, a batch equals its samples searched alone, empty
// prefixes are cached (here and in the DHT) and not fetched again, errors come in time,
// and the experts a server declares are found and called (search, then call_many).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "api/dht.hpp"
#include "api/expert_server.hpp"
#include "api/moe_beam_search.hpp"
#include "api/moe_call_many.hpp"
#include "api/remote_expert.hpp"
#include "core/moe/dht_layout.hpp"
#include "core/rng.hpp"
#include "tests/actors/dht_peers.hpp"

using namespace apiary;
using namespace std::chrono_literals;
namespace moe = apiary::core::moe;

namespace {

/// Declares `uids` from `dht`, naming `server` (a multiaddr) as their server, for an hour.
void declare(Dht& dht, const std::vector<std::string>& uids, const std::string& server) {
  auto entries = moe::declaration_entries(uids, server);
  REQUIRE(entries.ok());
  auto stored = dht.store_records(moe::store_items(*entries, Dht::now() + 3600));
  REQUIRE(stored.wait_for(10s) == std::future_status::ready);
  auto result = stored.get();
  REQUIRE(result.ok());
  for (const auto& s : *result) REQUIRE(s.ok);
}

/// Whether a get of `key` from `dht` finds a value.
bool found(Dht& dht, const std::string& key) {
  auto got = dht.get(DhtKey::str(key));
  REQUIRE(got.wait_for(10s) == std::future_status::ready);
  auto value = got.get();
  REQUIRE(value.ok());
  return value->has_value();
}

/// Random grid scores in [-1, 1).
ExpertGridScores random_scores(core::Rng& rng, std::vector<std::size_t> grid) {
  ExpertGridScores scores;
  for (std::size_t n : grid) {
    std::vector<float> row(n);
    for (float& s : row) s = static_cast<float>(rng.uniform01() * 2 - 1);
    scores.push_back(std::move(row));
  }
  return scores;
}

std::vector<std::string> uids_of(const std::vector<FoundExpert>& experts) {
  std::vector<std::string> out;
  for (const auto& e : experts) out.push_back(e.uid);
  return out;
}

}  // namespace

TEST_CASE("beam search over a DHT equals the exhaustive top-k of 1000 experts in 25 trials", "[integration][moe]") {
  testing::DhtPeers peers;
  Dht& server = peers.add();
  peers.add();
  Dht& client = peers.add();
  const std::string address = server.address().to_string();
  // hivemind's test_beam_search_correctness: ffn.{5..14}.{10..19}.{15..24} in (32, 32, 32).
  std::vector<std::string> uids;
  for (int i = 5; i < 15; ++i) {
    for (int j = 10; j < 20; ++j) {
      for (int k = 15; k < 25; ++k) uids.push_back(fmt::format("ffn.{}.{}.{}", i, j, k));
    }
  }
  declare(server, uids, address);

  MoEBeamSearcher searcher(client, "ffn.", {32, 32, 32});
  core::Rng rng(7);
  const std::size_t k_best = 4;
  std::vector<ExpertGridScores> batch;
  std::vector<std::vector<std::string>> singles;
  for (int trial = 0; trial < 25; ++trial) {
    const auto scores = random_scores(rng, {32, 32, 32});
    // Exhaustive: every declared expert's summed score, best first.
    std::vector<std::pair<double, std::string>> all;
    for (int i = 5; i < 15; ++i) {
      for (int j = 10; j < 20; ++j) {
        for (int k = 15; k < 25; ++k) {
          const double s = 0.0 + double(scores[0][i]) + double(scores[1][j]) + double(scores[2][k]);
          all.emplace_back(-s, fmt::format("ffn.{}.{}.{}", i, j, k));
        }
      }
    }
    std::sort(all.begin(), all.end());
    auto best = searcher.find_best_experts(scores, k_best);
    REQUIRE(best.ok());
    REQUIRE(best->size() == k_best);
    for (std::size_t n = 0; n < k_best; ++n) {
      CHECK((*best)[n].uid == all[n].second);
      CHECK((*best)[n].score == Approx(-all[n].first).epsilon(1e-12));
      CHECK((*best)[n].server.multiaddr() == address);
    }
    batch.push_back(scores);
    singles.push_back(uids_of(*best));
  }
  // Prefixes of the first dimension outside 5..14 were found empty and remembered.
  CHECK(searcher.negative_cache_size() > 0);

  // All 25 in one batch: the same experts, each step one get_many.
  const std::size_t before = searcher.lookups();
  auto many = searcher.batch_find_best_experts(batch, k_best);
  REQUIRE(many.ok());
  REQUIRE(many->size() == batch.size());
  for (std::size_t s = 0; s < batch.size(); ++s) CHECK(uids_of((*many)[s]) == singles[s]);
  CHECK(searcher.lookups() > before);
}

TEST_CASE("beam search finds experts of a sparse grid and its active successors", "[integration][moe]") {
  testing::DhtPeers peers;
  Dht& server = peers.add();
  Dht& client = peers.add();
  const std::string address = server.address().to_string();
  declare(server, {"e.1.2.3", "e.1.2.5", "e.2.0.0", "e.4.5.6"}, address);
  MoEBeamSearcher searcher(client, "e.", {8, 8, 8});

  auto successors = searcher.get_active_successors({"e.1.2.", "e.2.", "e.4.5.", "e.7."});
  REQUIRE(successors.ok());
  CHECK(successors->at("e.1.2.").size() == 2);
  CHECK(successors->at("e.1.2.").count(3) == 1);
  CHECK(successors->at("e.1.2.").at(5).uid == "e.1.2.5");
  CHECK(successors->at("e.2.").size() == 1);
  CHECK(successors->at("e.4.5.").size() == 1);
  CHECK(successors->at("e.7.").empty());
  auto narrow = searcher.get_active_successors({"e.1.2."}, 4);
  REQUIRE(narrow.ok());
  CHECK(narrow->at("e.1.2.").size() == 1);  // coordinate 5 is outside a grid of 4

  // Scores that favour e.4.5.6 in every dimension, then e.1.2.5.
  ExpertGridScores scores(3, std::vector<float>(8, 0.0f));
  scores[0][4] = 3;
  scores[1][5] = 3;
  scores[2][6] = 3;
  scores[0][1] = 2;
  scores[2][5] = 1;
  auto best = searcher.find_best_experts(scores, 2);
  REQUIRE(best.ok());
  CHECK(uids_of(*best) == std::vector<std::string>{"e.4.5.6", "e.1.2.5"});
  CHECK((*best)[0].score == Approx(9));
}

TEST_CASE("prefixes without experts are cached here and in the DHT and not fetched again", "[integration][moe]") {
  testing::DhtPeers peers;
  Dht& server = peers.add();
  Dht& client = peers.add();
  Dht& other = peers.add();
  declare(server, {"ffn.1.2.3", "ffn.3.4.5"}, server.address().to_string());

  // hivemind's test_negative_caching: six first coordinates, two of them with experts.
  MoEBeamSearcher searcher(client, "ffn.", {10, 10, 10});
  const std::vector<float> scores{0.1f, 0.5f, 0.2f, 0.4f, 0.3f, 0.0f};
  auto beam = searcher.get_initial_beam(scores, 3);
  REQUIRE(beam.ok());
  REQUIRE(beam->size() == 2);
  CHECK((*beam)[0].prefix == "ffn.1.");
  CHECK((*beam)[1].prefix == "ffn.3.");
  CHECK((*beam)[0].successors.count(2) == 1);
  CHECK(searcher.lookups() == 6);
  CHECK(searcher.negative_cache_size() == 4);

  // The empty prefixes are in the DHT now (as negative-cache records); the ones past the
  // scores were never looked up.
  for (const char* prefix : {"ffn.0.", "ffn.2.", "ffn.4.", "ffn.5."}) {
    bool there = false;
    for (int i = 0; i < 50 && !there; ++i) {
      there = found(other, prefix);
      if (!there) std::this_thread::sleep_for(100ms);
    }
    CHECK(there);
  }
  for (const char* prefix : {"ffn.6.", "ffn.7.", "ffn.8.", "ffn.9."}) CHECK(!found(other, prefix));

  // Searched again: only the two prefixes with experts are fetched.
  auto again = searcher.get_initial_beam(scores, 3);
  REQUIRE(again.ok());
  CHECK(again->size() == 2);
  CHECK(searcher.lookups() == 8);

  // Without negative caching every prefix is fetched each time.
  MoEBeamSearcher uncached(client, "ffn.", {10, 10, 10}, false);
  REQUIRE(uncached.get_initial_beam(scores, 3).ok());
  REQUIRE(uncached.get_initial_beam(scores, 3).ok());
  CHECK(uncached.lookups() == 12);
  CHECK(uncached.negative_cache_size() == 0);
}

TEST_CASE("beam search refuses bad scores and fails in time without a DHT", "[integration][moe]") {
  testing::DhtPeers peers;
  Dht& client = peers.add();
  MoEBeamSearcher searcher(client, "ffn.", {4, 4}, true, 300s, 2s);
  auto wrong = searcher.find_best_experts({{0, 1, 2, 3}}, 2);
  REQUIRE(!wrong.ok());
  CHECK(wrong.error().code == errc::invalid_argument);
  auto zero = searcher.find_best_experts({{0, 1, 2, 3}, {0, 1, 2, 3}}, 0);
  REQUIRE(!zero.ok());
  CHECK(zero.error().code == errc::invalid_argument);
  MoEBeamSearcher bad_prefix(client, "ffn", {4});
  CHECK(!bad_prefix.find_best_experts({{0, 1, 2, 3}}, 1).ok());

  // Nothing declared: no experts, no error.
  auto none = searcher.find_best_experts({{0, 1, 2, 3}, {0, 1, 2, 3}}, 2);
  REQUIRE(none.ok());
  CHECK(none->empty());

  // A stopped node: an error within the timeout, not a wait without end.
  client.stop();
  MoEBeamSearcher uncached(client, "ffn.", {4, 4}, false, 300s, 2s);
  const auto t0 = std::chrono::steady_clock::now();
  auto stopped = uncached.find_best_experts({{3, 1, 2, 0}, {0, 1, 2, 3}}, 2);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  REQUIRE(!stopped.ok());
  INFO(stopped.error().what());
  CHECK(stopped.error().message.find("beam search") != std::string::npos);
}

TEST_CASE("experts an expert server declares are found by beam search and answer a call_many", "[integration][moe]") {
  testing::DhtPeers peers;
  Dht& server_dht = peers.add();
  Dht& client_dht = peers.add();
  ExpertServerOptions o;
  o.expert_cls = "nop";
  o.hidden_dim = 4;
  o.expert_pattern = "expert.[0:4].[0:4]";
  o.num_experts = 6;
  auto server = ExpertServer::start(server_dht.runtime(), o, &server_dht);
  REQUIRE(server.ok());

  // Every sample asks for the best 3 of the 6 experts; all are found once declared.
  MoEBeamSearcher searcher(client_dht, "expert.", {4, 4}, false);
  core::Rng rng(3);
  std::vector<ExpertGridScores> batch{random_scores(rng, {4, 4}), random_scores(rng, {4, 4})};
  Result<std::vector<std::vector<FoundExpert>>> found = std::vector<std::vector<FoundExpert>>{};
  for (int i = 0; i < 50; ++i) {
    found = searcher.batch_find_best_experts(batch, 3);
    REQUIRE(found.ok());
    if ((*found)[0].size() == 3 && (*found)[1].size() == 3) break;
    std::this_thread::sleep_for(100ms);
  }
  REQUIRE((*found)[0].size() == 3);
  REQUIRE((*found)[1].size() == 3);

  // One RemoteExpert per uid found; each sample's rows go to its three.
  std::map<std::string, std::unique_ptr<RemoteExpert>> remotes;
  ExpertsPerSample experts(batch.size());
  for (std::size_t s = 0; s < batch.size(); ++s) {
    for (const FoundExpert& e : (*found)[s]) {
      CHECK(e.server.multiaddr() == (*server)->address());
      auto& remote = remotes[e.uid];
      if (!remote) remote = std::make_unique<RemoteExpert>(client_dht.runtime(), e.uid, e.server, 5s);
      experts[s].push_back(remote.get());
    }
  }
  const std::vector<std::vector<ExpertTensor>> inputs{{ExpertTensor{{1, 4}, {1, 2, 3, 4}}},
                                                      {ExpertTensor{{2, 4}, {5, 6, 7, 8, 9, 10, 11, 12}}}};
  auto outputs = call_many_forward(experts, inputs);
  REQUIRE(outputs.ok());
  for (std::size_t s = 0; s < batch.size(); ++s) {
    CHECK(outputs->mask[s] == std::vector<bool>(3, true));
    for (const auto& out : outputs->outputs[s]) CHECK(out.front().values == inputs[s][0].values);  // nop
  }
}
