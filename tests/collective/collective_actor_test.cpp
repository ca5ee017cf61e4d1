// The collective's blocking API over in-process gateways: three members join, run
// several weighted all-reduces of fused tensors (float32 and float16 on the wire),
// identical-result means and gathers, and leave; a member that is gone makes the
// others' next op fail with a clear error.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <thread>

#include <caf/all.hpp>

#include "actors/collective/collective.hpp"
#include "messages/identity/multiaddr.hpp"
#include "api/startup.hpp"
#include "tests/support/peer_addr.hpp"

using apiary::test::operator""_addr;
using namespace apiary;
using namespace std::chrono_literals;

namespace {

/// `n` members of one group, each on its own in-process gateway.
struct Group {
  std::unique_ptr<caf::actor_system_config> cfg = api::node_actor_system_config(0);
  std::unique_ptr<caf::actor_system> sys = std::make_unique<caf::actor_system>(*cfg);
  std::vector<std::shared_ptr<actors::Gateway>> gateways;
  std::vector<std::unique_ptr<actors::Collective>> members;

  Group(std::size_t n, std::chrono::milliseconds timeout) {
    std::vector<core::PeerAddr> addrs;
    for (std::size_t i = 0; i < n; ++i) {
      actors::GatewayConfig gc;
      gc.backend = actors::Backend::local;
      auto gw = actors::Gateway::start(*sys, gc);
      REQUIRE(gw.ok());
      gateways.push_back(*gw);
      auto a = core::PeerAddr::from_host_port((*gw)->address());
      REQUIRE(a.ok());
      addrs.push_back(std::move(*a));
    }
    for (std::size_t i = 0; i < n; ++i) {
      actors::CollectiveActorConfig c{"testjob", i, addrs, timeout, 64};  // 64-byte parts: many per tensor
      auto m = actors::Collective::create(*sys, gateways[i], c);
      REQUIRE(m.ok());
      members.push_back(std::move(*m));
    }
  }
  ~Group() {
    members.clear();
    for (auto& gw : gateways) gw->stop();
  }

  /// Runs `fn(rank)` on one thread per member and returns their results.
  template <class Fn>
  auto on_every_member(Fn fn) {
    std::vector<decltype(fn(std::size_t{0}))> out(members.size(), make_error(errc::internal, "not run"));
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < members.size(); ++r) threads.emplace_back([&, r] { out[r] = fn(r); });
    for (auto& t : threads) t.join();
    return out;
  }
};

}  // namespace

TEST_CASE("three members average fused tensors by weight, op after op, then leave", "[collective][actor]") {
  Group g(3, 5000ms);
  for (const auto& s : g.on_every_member([&](std::size_t r) { return g.members[r]->join(10s); })) REQUIRE(s.ok());
  for (int op = 0; op < 4; ++op) {
    const bool fp16 = op % 2 == 1;
    auto results = g.on_every_member([&](std::size_t r) {
      // Member r holds r + op in a 40-value tensor and 10 * r in a 3-value one, weight r + 1.
      std::vector<std::vector<float>> t{std::vector<float>(40, static_cast<float>(r + op)),
                                        std::vector<float>(3, 10.0F * static_cast<float>(r))};
      return g.members[r]->allreduce(t, static_cast<double>(r + 1), {fp16 ? pb::FLOAT16 : pb::NONE, pb::NONE});
    });
    // sum(w_i x_i) / sum(w_i) with weights 1, 2, 3: (0 + 2 + 6) / 6 + op and 10 * 8 / 6.
    const float first = 8.0F / 6.0F + static_cast<float>(op);
    const float second = 80.0F / 6.0F;
    for (std::size_t r = 0; r < 3; ++r) {
      INFO("member " << r << " op " << op);
      REQUIRE(results[r].ok());
      REQUIRE(results[r]->size() == 2);
      for (float v : (*results[r])[0]) CHECK(std::abs(v - first) < (fp16 ? 2e-3F : 1e-5F));
      for (float v : (*results[r])[1]) CHECK(std::abs(v - second) < 1e-4F);
    }
  }
  for (const auto& s : g.on_every_member([&](std::size_t r) { return g.members[r]->leave(10s); })) CHECK(s.ok());
  CHECK(g.members[0]->ops() == 4);
}

TEST_CASE("an uncompressed all-reduce gives every member the same bits, not x + (mean - x)", "[collective][actor]") {
  Group g(3, 5000ms);
  for (const auto& s : g.on_every_member([&](std::size_t r) { return g.members[r]->join(10s); })) REQUIRE(s.ok());
  for (int op = 0; op < 3; ++op) {
    auto results = g.on_every_member([&](std::size_t r) {
      // Irregular values and weights: x + (mean - x) would differ from the mean in the last bit
      // for many elements, and differently on each member.
      std::vector<float> t(3001);
      for (std::size_t j = 0; j < t.size(); ++j) t[j] = 0.37F * static_cast<float>((j * 7919 + r * 104729 + op) % 1000) - 11.1F;
      return g.members[r]->allreduce({t}, 0.3 + 1.7 * static_cast<double>(r));
    });
    for (std::size_t r = 0; r < 3; ++r) {
      INFO("member " << r << " op " << op);
      REQUIRE(results[r].ok());
      REQUIRE((*results[r])[0].size() == 3001);
      CHECK(std::memcmp((*results[r])[0].data(), (*results[0])[0].data(), 3001 * sizeof(float)) == 0);
    }
  }
  // The answers' values were received straight into the members' tensors (posted landings).
  for (const auto& gw : g.gateways) CHECK(gw->transport_stats().frames_landed > 0);
  for (const auto& s : g.on_every_member([&](std::size_t r) { return g.members[r]->leave(10s); })) CHECK(s.ok());
}

TEST_CASE("a FLOAT16 mean gives every member the same bits, gathers mix with all-reduces", "[collective][actor]") {
  Group g(3, 5000ms);
  for (const auto& s : g.on_every_member([&](std::size_t r) { return g.members[r]->join(10s); })) REQUIRE(s.ok());
  for (int op = 0; op < 3; ++op) {
    auto means = g.on_every_member([&](std::size_t r) {
      // Values whose weighted mean is no fp16 number, and no member's own copy near it.
      std::vector<float> t(101);
      for (std::size_t j = 0; j < t.size(); ++j) t[j] = 0.013F * static_cast<float>(j * (r + 1)) + 0.7F * op;
      return g.members[r]->mean({t, std::vector<float>(2, 3.0F * r)}, 1.0 + r, {pb::FLOAT16, pb::NONE});
    });
    auto gathered =
        g.on_every_member([&](std::size_t r) { return g.members[r]->gather("member " + std::to_string(r)); });
    auto reduced = g.on_every_member([&](std::size_t r) {
      return g.members[r]->allreduce({std::vector<float>(8, static_cast<float>(r))}, 1.0);
    });
    for (std::size_t r = 0; r < 3; ++r) {
      INFO("member " << r << " op " << op);
      REQUIRE(means[r].ok());
      REQUIRE(gathered[r].ok());
      REQUIRE(reduced[r].ok());
      CHECK(*gathered[r] == std::vector<std::string>{"member 0", "member 1", "member 2"});
      CHECK((*reduced[r])[0][0] == Approx(1.0));
      CHECK((*means[r])[1][0] == Approx(4.0));  // (1 * 0 + 2 * 3 + 3 * 6) / 6
      for (std::size_t t = 0; t < 2; ++t) {
        REQUIRE((*means[r])[t].size() == (*means[0])[t].size());
        CHECK(std::memcmp((*means[r])[t].data(), (*means[0])[t].data(), (*means[0])[t].size() * sizeof(float)) == 0);
      }
    }
  }
  for (const auto& s : g.on_every_member([&](std::size_t r) { return g.members[r]->leave(10s); })) CHECK(s.ok());
  CHECK(g.members[0]->ops() == 9);
}

TEST_CASE("a member that is gone makes the others' op fail naming it, within the timeouts", "[collective][actor]") {
  Group g(3, 1000ms);
  for (const auto& s : g.on_every_member([&](std::size_t r) { return g.members[r]->join(10s); })) REQUIRE(s.ok());
  // Member 2 leaves the process: its handles are no longer served and its gateway stops.
  g.members[2].reset();
  g.gateways[2]->stop();
  std::vector<Result<std::vector<std::vector<float>>>> results;
  std::vector<std::thread> threads;
  results.assign(2, make_error(errc::internal, "not run"));
  for (std::size_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { results[r] = g.members[r]->allreduce({std::vector<float>(16, 1.0F)}, 1.0); });
  }
  for (auto& t : threads) t.join();
  for (std::size_t r = 0; r < 2; ++r) {
    INFO("member " << r);
    REQUIRE_FALSE(results[r].ok());
    CHECK(results[r].error().code == errc::peer_down);
    CHECK(results[r].error().message.find("rank 2") != std::string::npos);
  }
  g.members.resize(2);
}

TEST_CASE("a bad configuration is refused", "[collective][actor]") {
  Group g(1, 1000ms);
  actors::CollectiveActorConfig c{"job", 3, {"/ip4/127.0.0.1/tcp/1"_addr}, 1000ms, 64};
  auto bad_rank = actors::Collective::create(*g.sys, g.gateways[0], c);
  REQUIRE_FALSE(bad_rank.ok());
  CHECK(bad_rank.error().code == errc::invalid_argument);
  c.rank = 0;
  c.members = {core::PeerAddr{}};
  auto bad_addr = actors::Collective::create(*g.sys, g.gateways[0], c);
  REQUIRE_FALSE(bad_addr.ok());
  CHECK(bad_addr.error().message.find("multiaddr") != std::string::npos);
}
