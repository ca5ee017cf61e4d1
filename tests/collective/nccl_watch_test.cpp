// NcclWatch: the liveness of a NCCL group's members over apiary's RPC (UCX on loopback,
// each member on its own gateway in one process). A member whose gateway stops is taken
// for one that went down: every other member learns it, naming it.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <functional>
#include <thread>

#include "actors/collective/nccl_watch.hpp"
#include "actors/rpc.hpp"

using namespace apiary;
using namespace std::chrono_literals;

namespace {

/// `ranks` members of group "g", each on its own UCX gateway; rank 0 serves the watch.
struct Group {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::vector<std::shared_ptr<actors::Gateway>> gws;
  std::vector<std::unique_ptr<actors::NcclWatch>> watches;

  explicit Group(std::size_t ranks) {
    cfg.set("work-stealing.moderate-poll-attempts", 0);
    sys = std::make_unique<caf::actor_system>(cfg);
    for (std::size_t r = 0; r < ranks; ++r) {
      auto gw = actors::Gateway::start(*sys, actors::GatewayConfig{});
      REQUIRE(gw.ok());
      gws.push_back(*gw);
      auto w = actors::NcclWatch::start(*sys, *gw, "g", r, ranks, r == 0 ? "" : gws[0]->address());
      REQUIRE(w.ok());
      watches.push_back(std::move(*w));
    }
    REQUIRE(eventually([&] { return watches[0]->members_watched() == ranks - 1; }));
  }
  ~Group() {
    watches.clear();
    for (auto& gw : gws) gw->stop();
  }

  /// Whether `done` holds within 30 s (not a timing assertion: a bound on a hang).
  static bool eventually(const std::function<bool()>& done) {
    for (int i = 0; i < 3000; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return done();
  }
};

}  // namespace

TEST_CASE("a member going down breaks the NCCL watch on every other member, naming it", "[collective][actor]") {
  Group g(3);
  for (auto& w : g.watches) CHECK(w->broken().empty());
  g.gws[2]->stop();  // member 2's process goes away: its connections close
  REQUIRE(Group::eventually([&] { return !g.watches[0]->broken().empty() && !g.watches[1]->broken().empty(); }));
  for (std::size_t r : {0, 1}) {
    INFO("rank " << r << ": " << g.watches[r]->broken());
    CHECK_THAT(g.watches[r]->broken(), Catch::Contains("NCCL group 'g': replica 2 at " + g.gws[2]->address()));
    CHECK_THAT(g.watches[r]->broken(), Catch::Contains("went down"));
  }
}

TEST_CASE("rank 0 going down breaks the NCCL watch on the members", "[collective][actor]") {
  Group g(3);
  g.gws[0]->stop();
  REQUIRE(Group::eventually([&] { return !g.watches[1]->broken().empty() && !g.watches[2]->broken().empty(); }));
  for (std::size_t r : {1, 2}) {
    INFO("rank " << r << ": " << g.watches[r]->broken());
    CHECK_THAT(g.watches[r]->broken(), Catch::Contains("NCCL group 'g': replica 0 at " + g.gws[0]->address()));
  }
}

TEST_CASE("members leaving normally do not break the NCCL watch, a stream without a valid rank is refused",
          "[collective][actor]") {
  Group g(3);
  g.watches[2].reset();  // ends its stream
  REQUIRE(Group::eventually([&] { return g.watches[0]->members_watched() == 1; }));
  CHECK(g.watches[0]->broken().empty());
  CHECK(g.watches[1]->broken().empty());
  // Not a member's rank: refused with the reason, and nothing breaks.
  caf::scoped_actor self{*g.sys};
  for (const std::string bad : {"0", "3", "x1", ""}) {
    INFO("first message '" << bad << "'");
    auto answer = actors::call_unary(self, *g.gws[1], g.gws[0]->address(), actors::nccl_watch_handle("g"),
                                     Buffer::copy_of(bad.data(), bad.size()), 10000ms);
    REQUIRE_FALSE(answer.ok());
    CHECK_THAT(answer.error().message, Catch::Contains("expected the member's rank (1..2)"));
  }
  CHECK(g.watches[0]->broken().empty());
  CHECK(g.watches[0]->members_watched() == 1);
  auto bad_config = actors::NcclWatch::start(*g.sys, g.gws[1], "g", 1, 3, "");
  REQUIRE_FALSE(bad_config.ok());
  CHECK(bad_config.error().code == errc::invalid_argument);
}
