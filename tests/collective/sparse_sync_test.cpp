// Sparse variables under all-reduce: three replicas of an embedding model each prepare
// their gradient rows, gather them through the exchange core (in-memory routing), and
// apply the averaged rows. Only the touched rows move, every replica holds the same
// bits, and the result equals single-process SGD on the concatenated batch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <variant>

#include "core/collective/exchange.hpp"
#include "core/collective/synchronizer.hpp"
#include "core/ps/optimizer.hpp"
#include "tests/support/peer_addr.hpp"

using namespace apiary;
using namespace apiary::core;
using namespace apiary::core::collective;
using namespace std::chrono_literals;

namespace {

constexpr std::int64_t k_rows = 12;
constexpr std::size_t k_width = 3;
constexpr std::size_t k_replicas = 3;
constexpr std::size_t k_batch = 4;

/// One sample: an id looked up in the table and the vector its row should move to.
struct Sample {
  std::int64_t id = 0;
  std::vector<float> target;
};

/// Replica r's batch at step s: ids drawn from a small pool (rows 9..11 never appear).
std::vector<Sample> batch_of(std::size_t r, int step) {
  std::vector<Sample> out;
  for (std::size_t k = 0; k < k_batch; ++k) {
    const auto id = static_cast<std::int64_t>((r * 5 + k * 3 + static_cast<std::size_t>(step) * 7) % 9);
    std::vector<float> t(k_width);
    for (std::size_t c = 0; c < k_width; ++c) t[c] = 0.1F * static_cast<float>(id) - 0.2F * static_cast<float>(c + r);
    out.push_back({id, t});
  }
  return out;
}

/// The gradient of the mean of 0.5 |E[id] - target|^2 over `batch`, as rows (repeats kept).
ps::SparseGradient gradient_of(const std::vector<float>& table, const std::vector<Sample>& batch) {
  ps::SparseGradient g;
  for (const auto& s : batch) {
    g.rows.push_back(s.id);
    for (std::size_t c = 0; c < k_width; ++c) {
      g.values.push_back((table[static_cast<std::size_t>(s.id) * k_width + c] - s.target[c]) /
                         static_cast<float>(batch.size()));
    }
  }
  return g;
}

/// A plan with one sparse variable "emb:0" [k_rows, k_width] and no dense one.
ArPlan sparse_plan() {
  ArPlan plan;
  for (std::size_t r = 0; r < k_replicas; ++r) plan.replicas.push_back("localhost:CPU:" + std::to_string(r));
  plan.sparse.push_back({"emb:0", {k_rows, static_cast<std::int64_t>(k_width)}, k_rows, k_width});
  return plan;
}

/// Every replica's payload gathered through the exchange core, calls routed in order.
std::vector<std::vector<std::string>> gather(const std::vector<std::string>& payloads) {
  std::vector<PeerAddr> addrs;
  for (std::size_t r = 0; r < k_replicas; ++r) addrs.push_back(apiary::test::test_addr(r));
  std::vector<Exchange> members;
  for (std::size_t r = 0; r < k_replicas; ++r) members.push_back(*Exchange::create({addrs, r, "h", 10, 5s}));
  std::vector<std::pair<std::size_t, Effects>> pending;
  for (std::size_t r = 0; r < k_replicas; ++r) pending.emplace_back(r, members[r].start_gather({}, payloads[r]));
  RequestId next = 1;
  std::map<RequestId, std::pair<std::size_t, CallId>> open;
  while (!pending.empty()) {
    auto [from, fx] = std::move(pending.back());
    pending.pop_back();
    for (auto& e : fx) {
      if (auto* c = std::get_if<Call>(&e)) {
        const auto to = static_cast<std::size_t>(c->peer.port() - 1000);
        open[next] = {from, c->id};
        pending.emplace_back(to, members[to].on_request({}, next++, c->request));
      } else if (auto* r = std::get_if<Reply>(&e)) {
        const auto [caller, call] = open.at(r->request);
        pending.emplace_back(caller, members[caller].on_response({}, call, r->response));
      }
    }
  }
  std::vector<std::vector<std::string>> out;
  for (auto& m : members) {
    auto res = m.take_result();
    REQUIRE(res.ok());
    out.push_back(std::move(res->gathered));
  }
  return out;
}

}  // namespace

TEST_CASE("sparse rows gathered and averaged equal single-process SGD on the concatenated batch, touched rows only",
          "[collective][unit]") {
  auto sync = Synchronizer::create(sparse_plan());
  REQUIRE(sync.ok());
  ps::OptimizerConfig sgd;
  sgd.learning_rate = 0.5;
  std::vector<float> initial(static_cast<std::size_t>(k_rows) * k_width);
  for (std::size_t i = 0; i < initial.size(); ++i) initial[i] = 0.01F * static_cast<float>(i);
  std::vector<std::vector<float>> tables(k_replicas, initial);
  std::vector<ps::Optimizer> optimizers(k_replicas, ps::Optimizer(sgd, initial.size(), k_width));
  std::vector<float> reference = initial;
  ps::Optimizer reference_opt(sgd, initial.size(), k_width);
  for (int step = 0; step < 6; ++step) {
    // Single process: the mean gradient over the concatenation of the replicas' batches.
    std::vector<Sample> all;
    for (std::size_t r = 0; r < k_replicas; ++r) {
      for (auto& s : batch_of(r, step)) all.push_back(s);
    }
    auto merged = ps::merge_rows(gradient_of(reference, all), k_width, k_rows);
    REQUIRE(merged.ok());
    REQUIRE(reference_opt.apply_sparse(reference, *merged).ok());
    // Replicas: own rows -> gather -> weighted mean of the rows -> own optimizer.
    std::vector<std::string> payloads;
    for (std::size_t r = 0; r < k_replicas; ++r) {
      auto p = sync->prepare_sparse({{"emb:0", gradient_of(tables[r], batch_of(r, step))}}, k_batch);
      REQUIRE(p.ok());
      payloads.push_back(std::move(*p));
    }
    const auto gathered = gather(payloads);
    for (std::size_t r = 0; r < k_replicas; ++r) {
      auto avg = sync->assemble_sparse(gathered[r]);
      REQUIRE(avg.ok());
      REQUIRE(optimizers[r].apply_sparse(tables[r], avg->at("emb:0")).ok());
    }
  }
  for (std::size_t r = 0; r < k_replicas; ++r) {
    INFO("replica " << r);
    CHECK(std::memcmp(tables[r].data(), tables[0].data(), tables[0].size() * sizeof(float)) == 0);
    for (std::size_t i = 0; i < reference.size(); ++i) CHECK(tables[r][i] == Approx(reference[i]).margin(1e-6));
    // Rows 9..11 were never touched: they keep their initial bits; the others moved.
    for (std::size_t i = 9 * k_width; i < initial.size(); ++i) CHECK(tables[r][i] == initial[i]);
    for (std::size_t i = 0; i < 9 * k_width; ++i) CHECK(tables[r][i] != initial[i]);
  }
}

TEST_CASE("bad sparse gradients and payloads are refused, naming the variable", "[collective][unit]") {
  auto sync = Synchronizer::create(sparse_plan());
  REQUIRE(sync.ok());
  auto missing = sync->prepare_sparse({}, 1.0);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("emb:0") != std::string::npos);
  auto out_of_range = sync->prepare_sparse({{"emb:0", {{k_rows}, std::vector<float>(k_width)}}}, 1.0);
  REQUIRE_FALSE(out_of_range.ok());
  CHECK(out_of_range.error().message.find("row 12") != std::string::npos);
  auto ragged = sync->prepare_sparse({{"emb:0", {{1}, std::vector<float>(2)}}}, 1.0);
  REQUIRE_FALSE(ragged.ok());
  auto good = sync->prepare_sparse({{"emb:0", {{1}, std::vector<float>(k_width, 1.0F)}}}, 1.0);
  REQUIRE(good.ok());
  auto truncated = sync->assemble_sparse({*good, good->substr(0, good->size() - 1)});
  REQUIRE_FALSE(truncated.ok());
  CHECK(truncated.error().code == errc::malformed);
  CHECK(truncated.error().message.find("rank 1") != std::string::npos);
}

TEST_CASE("a gather over a table of 10^12 rows averages the same bits as over a small one", "[collective][unit]") {
  // The rows summed by a table indexed by row (12 rows) and by a hash map (10^12 rows).
  ArPlan huge = sparse_plan();
  huge.sparse[0].rows = 1'000'000'000'000;
  huge.sparse[0].shape[0] = huge.sparse[0].rows;
  auto small_sync = Synchronizer::create(sparse_plan());
  auto huge_sync = Synchronizer::create(huge);
  REQUIRE(small_sync.ok());
  REQUIRE(huge_sync.ok());
  std::vector<float> table(static_cast<std::size_t>(k_rows) * k_width, 0.5F);
  std::vector<std::string> payloads;
  for (std::size_t r = 0; r < k_replicas; ++r) {
    auto p = small_sync->prepare_sparse({{"emb:0", gradient_of(table, batch_of(r, 1))}}, 1.0 + r);
    REQUIRE(p.ok());
    payloads.push_back(std::move(*p));
  }
  auto small = small_sync->assemble_sparse(payloads);
  auto large = huge_sync->assemble_sparse(payloads);
  REQUIRE(small.ok());
  REQUIRE(large.ok());
  const auto& a = small->at("emb:0");
  const auto& b = large->at("emb:0");
  CHECK(a.rows == b.rows);
  CHECK(std::is_sorted(a.rows.begin(), a.rows.end()));
  REQUIRE(a.values.size() == b.values.size());
  CHECK(std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)) == 0);
}

TEST_CASE("a sparse payload announcing more rows than its bytes hold is refused before anything is allocated",
          "[collective][unit]") {
  auto sync = Synchronizer::create(sparse_plan());
  REQUIRE(sync.ok());
  // Weight 1, then a row count the 4 KiB that follow could not hold (rows of 8 + 12 bytes).
  std::string forged(8 + 8 + 4096, '\0');
  const double weight = 1.0;
  const std::uint64_t count = 4096 / 8;
  std::memcpy(forged.data(), &weight, 8);
  std::memcpy(forged.data() + 8, &count, 8);
  auto out = sync->assemble_sparse({forged});
  REQUIRE_FALSE(out.ok());
  CHECK(out.error().code == errc::malformed);
  CHECK(out.error().message.find("emb:0 row count") != std::string::npos);
}
