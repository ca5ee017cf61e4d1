// ArStep (core/collective/ar_step.hpp) driven by hand: four replicas' steps over an
// in-test router. Three fusion groups and one sparse variable give every replica the
// same averages (the weighted mean of the dense gradients, the averaged rows of the
// sparse one), over two steps; a member whose calls fail ends every step with an error
// naming the op.
#include <catch2/catch.hpp>

#include <algorithm>
#include <deque>
#include <variant>

#include "core/collective/ar_step.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/resource_spec.hpp"
#include "tests/support/peer_addr.hpp"

using apiary::test::operator""_addr;
using namespace apiary;
using namespace apiary::core;
namespace cc = core::collective;
namespace cs = core::strategy;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t k_replicas = 4;

/// Dense a[6], b[4], c[3], d[1] and sparse s[5, 2]: AllReduce, chunk 2 -> 2 groups + a gather.
cc::ArPlan plan_of() {
  cs::GraphItem item;
  for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<std::int64_t>>>{
           {"a:0", {6}}, {"b:0", {4}}, {"c:0", {3}}, {"d:0", {1}}, {"s:0", {5, 2}}}) {
    cs::Variable v;
    v.name = name;
    v.shape = shape;
    v.sparse = name == "s:0";
    item.variables.push_back(v);
  }
  auto spec = cs::parse_resource_spec("nodes:\n  - address: localhost\n    cpus: [0, 1, 2, 3]\n", "spec");
  REQUIRE(spec.ok());
  cs::BuilderOptions o;
  o.chunk_size = 2;
  o.all_reduce_spec = pb::autodist::AllReduceSynchronizer::RING;
  auto strategy = cs::build_strategy(cs::BuilderKind::all_reduce, o, item, *spec, "20260101T000000M000000");
  REQUIRE(strategy.ok());
  auto plan = cc::plan_allreduce(*strategy, item);
  REQUIRE(plan.ok());
  return *plan;
}

/// Replica r's gradients at step `step`; s touches rows r % 5 and 4 only.
std::map<std::string, std::vector<float>> gradients_of(std::size_t r, int step) {
  std::map<std::string, std::vector<float>> g;
  for (const auto& [name, n] : std::vector<std::pair<std::string, std::size_t>>{{"a:0", 6}, {"b:0", 4}, {"c:0", 3}, {"d:0", 1}}) {
    auto& v = g[name];
    for (std::size_t j = 0; j < n; ++j) v.push_back(0.25f * static_cast<float>(r + 1) - 0.125f * static_cast<float>(j + step));
  }
  std::vector<float> s(10, 0.0f);
  s[(r % 5) * 2] = 1.0f + static_cast<float>(r);
  s[8] = -2.0f;
  g["s:0"] = s;
  return g;
}

/// The replicas and a router for their calls (timers are not needed: nobody is late).
struct Group {
  std::vector<cc::ArStep> steps;
  std::vector<PeerAddr> addrs;
  std::vector<bool> dead = std::vector<bool>(k_replicas, false);
  std::deque<std::pair<std::size_t, Effects>> pending;
  std::map<std::pair<std::size_t, RequestId>, std::pair<std::size_t, CallId>> open;
  RequestId next = 1;

  Group() {
    for (std::size_t r = 0; r < k_replicas; ++r) addrs.push_back(apiary::test::addr_of("/ip4/127.0.0.1/tcp/" + std::to_string(9000 + r)));
    for (std::size_t r = 0; r < k_replicas; ++r) {
      auto step = cc::ArStep::create(plan_of(), {addrs, r, "job::Collective.rpc_exchange", 100, 5s});
      REQUIRE(step.ok());
      steps.push_back(std::move(*step));
    }
  }

  void run() {
    while (!pending.empty()) {
      auto [from, fx] = std::move(pending.front());
      pending.pop_front();
      for (auto& e : fx) {
        if (auto* c = std::get_if<Call>(&e)) {
          const auto to = static_cast<std::size_t>(std::find(addrs.begin(), addrs.end(), c->peer) - addrs.begin());
          REQUIRE(to < k_replicas);
          if (dead[to]) {
            pending.emplace_back(from, steps[from].on_response({}, c->id, make_error(errc::peer_down, "it went down")));
            continue;
          }
          open[{to, next}] = {from, c->id};
          pending.emplace_back(to, steps[to].on_request({}, next++, c->request));
        } else if (auto* rep = std::get_if<Reply>(&e)) {
          const auto [caller, call] = open.at({from, rep->request});
          pending.emplace_back(caller, steps[caller].on_response({}, call, rep->response));
        }
      }
    }
  }
};

}  // namespace

TEST_CASE("an all-reduce step gives every replica the same averages: dense groups, then sparse rows",
          "[collective][unit]") {
  Group g;
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step);
    for (std::size_t r = 0; r < k_replicas; ++r) {
      g.pending.emplace_back(r, g.steps[r].begin({}, gradients_of(r, step), 1.0 + static_cast<double>(r)));
    }
    g.run();
    std::vector<cc::ArAverages> got;
    for (std::size_t r = 0; r < k_replicas; ++r) {
      REQUIRE(g.steps[r].done());
      auto avg = g.steps[r].take();
      REQUIRE(avg.ok());
      got.push_back(std::move(*avg));
    }
    CHECK(g.steps[0].done_ops() == 3 * static_cast<std::uint64_t>(step + 1));  // 2 means + 1 gather per step
    // The weighted mean of each dense gradient, on every replica, bit for bit alike.
    double total = 0;
    for (std::size_t r = 0; r < k_replicas; ++r) total += 1.0 + static_cast<double>(r);
    for (const auto& [name, values] : got[0].dense) {
      for (std::size_t j = 0; j < values.size(); ++j) {
        double acc = 0;
        for (std::size_t r = 0; r < k_replicas; ++r) acc += (1.0 + r) * gradients_of(r, step).at(name)[j];
        CHECK(values[j] == Approx(acc / total).margin(1e-6));
      }
      for (std::size_t r = 1; r < k_replicas; ++r) CHECK(got[r].dense.at(name) == values);
    }
    CHECK(got[0].dense.size() == 4);
    // Sparse: only rows 0..3 (one replica each) and 4 (all) are touched.
    const auto& rows = got[0].sparse.at("s:0");
    for (std::size_t r = 1; r < k_replicas; ++r) {
      CHECK(got[r].sparse.at("s:0").rows == rows.rows);
      CHECK(got[r].sparse.at("s:0").values == rows.values);
    }
    std::vector<std::int64_t> touched(rows.rows.begin(), rows.rows.end());
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    CHECK(touched == std::vector<std::int64_t>{0, 1, 2, 3, 4});
  }
}

TEST_CASE("a member whose calls fail ends the step with an error naming the op, not a hang", "[collective][unit]") {
  Group g;
  g.dead[3] = true;
  for (std::size_t r = 0; r + 1 < k_replicas; ++r) g.pending.emplace_back(r, g.steps[r].begin({}, gradients_of(r, 0), 1.0));
  g.run();
  for (std::size_t r = 0; r + 1 < k_replicas; ++r) {
    INFO("replica " << r);
    REQUIRE(g.steps[r].done());
    auto avg = g.steps[r].take();
    REQUIRE_FALSE(avg.ok());
    CHECK(avg.error().message.find("fusion group") != std::string::npos);
    CHECK(g.steps[r].take().error().code == errc::unavailable);  // taken once
  }
}
