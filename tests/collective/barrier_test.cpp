// Barrier: three members meet at a level; an ask to a member not listening yet is
// retried; a member behind holds the ask until it gets there; a member that never
// answers fails the round at its deadline, named.
#include <catch2/catch.hpp>

#include "core/collective/barrier.hpp"
#include "tests/core/effects_of.hpp"
#include "tests/support/peer_addr.hpp"

using apiary::test::operator""_addr;
using namespace apiary;
using namespace std::chrono_literals;
namespace cc = core::collective;

namespace {

using apiary::testing::all_of;

cc::Barrier member(std::size_t self) {
  cc::BarrierConfig c;
  c.peers = {"/ip4/127.0.0.1/tcp/1"_addr, "/ip4/127.0.0.1/tcp/2"_addr, "/ip4/127.0.0.1/tcp/3"_addr};
  c.self = self;
  c.handle = "job::Collective.rpc_barrier";
  c.id_base = 1000;
  return cc::Barrier(c);
}

}  // namespace

TEST_CASE("a barrier round ends once every other member answered", "[collective][unit]") {
  auto b = member(0);
  const core::TimePoint t0{};
  auto fx = b.start(t0, 0, t0 + 10s);
  auto calls = all_of<core::Call>(fx);
  REQUIRE(calls.size() == 2);
  CHECK(calls[0].peer == "/ip4/127.0.0.1/tcp/2"_addr);
  CHECK(calls[0].request == "0 0");
  CHECK_FALSE(b.finished());
  // Member 2 is not listening yet: asked again after the retry pause.
  fx = b.on_response(t0 + 1ms, calls[1].id, make_error(errc::unavailable, "connection refused"));
  auto timers = all_of<core::SetTimer>(fx);
  REQUIRE(timers.size() == 1);
  fx = b.on_timer(timers[0].at, timers[0].id);
  auto again = all_of<core::Call>(fx);
  REQUIRE(again.size() == 1);
  CHECK(again[0].peer == calls[1].peer);
  (void)b.on_response(t0 + 60ms, calls[0].id, std::string("0"));
  CHECK_FALSE(b.finished());
  (void)b.on_response(t0 + 70ms, again[0].id, std::string("0"));
  REQUIRE(b.finished());
  CHECK(b.status().ok());
}

TEST_CASE("an ask for a level not reached yet is held until reach()", "[collective][unit]") {
  auto b = member(1);
  const core::TimePoint t0{};
  CHECK(all_of<core::Reply>(b.on_request(t0, 7, "0 0")).size() == 1);  // level 0: at once
  CHECK(b.on_request(t0, 8, "2 2").empty());
  CHECK(b.reach(1).empty());
  auto replies = all_of<core::Reply>(b.reach(2));
  REQUIRE(replies.size() == 1);
  CHECK(replies[0].request == 8);
  for (const char* body : {"x", "2", "2 3", "2 1x"}) {
    auto bad = all_of<core::Reply>(b.on_request(t0, 9, body));
    REQUIRE(bad.size() == 1);
    CHECK_FALSE(bad[0].response.ok());
  }
}

TEST_CASE("a member that never answers fails the round at its deadline, named", "[collective][unit]") {
  auto b = member(0);
  const core::TimePoint t0{};
  auto calls = all_of<core::Call>(b.start(t0, 3, t0 + 1s));
  REQUIRE(calls.size() == 2);
  (void)b.on_response(t0 + 1ms, calls[0].id, std::string("3"));
  (void)b.on_response(t0 + 990ms, calls[1].id, make_error(errc::deadline_exceeded, "no answer"));
  auto fx = b.on_timer(t0 + 1s, 1000 + 3);
  REQUIRE(b.finished());
  REQUIRE_FALSE(b.status().ok());
  CHECK(b.status().error().code == errc::deadline_exceeded);
  CHECK(b.status().error().message.find("rank(s) 2 (/ip4/127.0.0.1/tcp/3)") != std::string::npos);
}

TEST_CASE("a member that asked at the level is not asked back, even after it left", "[collective][unit]") {
  auto b = member(0);
  const core::TimePoint t0{};
  // Member 2 finished op 5 and asks; it may leave as soon as everyone answered it.
  auto answer = all_of<core::Reply>(b.reach(5));
  CHECK(answer.empty());
  CHECK(all_of<core::Reply>(b.on_request(t0, 4, "5 2")).size() == 1);
  auto calls = all_of<core::Call>(b.start(t0, 5, t0 + 1s));
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].peer == "/ip4/127.0.0.1/tcp/2"_addr);
  // Member 1 asks while this member's own ask to it is still out: the round is met.
  (void)b.on_request(t0 + 1ms, 5, "5 1");
  REQUIRE(b.finished());
  CHECK(b.status().ok());
  // The late failure of the ask to member 1 changes nothing.
  CHECK(b.on_response(t0 + 2ms, calls[0].id, make_error(errc::peer_down, "gone")).empty());
  CHECK(b.status().ok());
}

TEST_CASE("an ask waits for a member behind until the round's deadline, not a call timeout", "[collective][unit]") {
  // Member 0 asks member 2, which is behind and holds the ask. When member 2 gets there, its
  // answer to that ask is all member 0 will hear from it: member 2 does not ask back a
  // member that asked, and may leave at once. An ask that had timed out after
  // call_timeout would leave member 0 re-asking a member that is gone.
  auto a = member(0);
  auto c = member(2);
  const core::TimePoint t0{};
  CHECK(a.reach(6).empty());
  auto asks = all_of<core::Call>(a.start(t0, 6, t0 + 60s));
  REQUIRE(asks.size() == 2);
  CHECK(asks[1].peer == "/ip4/127.0.0.1/tcp/3"_addr);
  CHECK(asks[1].timeout == 60s);
  CHECK(c.on_request(t0 + 1ms, 9, asks[1].request).empty());  // held: member 2 is at level 5
  // 10 s later (past call_timeout) member 2 gets there: it answers the held ask and needs
  // no ask back from member 0, which asked; it meets member 1 and is done.
  auto held = all_of<core::Reply>(c.reach(6));
  REQUIRE(held.size() == 1);
  CHECK(held[0].request == 9);
  auto c_asks = all_of<core::Call>(c.start(t0 + 10s, 6, t0 + 70s));
  REQUIRE(c_asks.size() == 1);
  CHECK(c_asks[0].peer == "/ip4/127.0.0.1/tcp/2"_addr);
  // The answer reaches member 0 on the ask it made 10 s before.
  (void)a.on_response(t0 + 10s, asks[0].id, std::string("6"));
  (void)a.on_response(t0 + 10s, asks[1].id, std::string("6"));
  REQUIRE(a.finished());
  CHECK(a.status().ok());
  // A retry after a failed ask gets the time left.
  auto b = member(1);
  auto b_asks = all_of<core::Call>(b.start(t0, 1, t0 + 30s));
  REQUIRE(b_asks.size() == 2);
  auto timers = all_of<core::SetTimer>(b.on_response(t0 + 5s, b_asks[0].id, make_error(errc::unavailable, "refused")));
  REQUIRE(timers.size() == 1);
  auto again = all_of<core::Call>(b.on_timer(timers[0].at, timers[0].id));
  REQUIRE(again.size() == 1);
  CHECK(again[0].timeout == 30s - (timers[0].at - t0));
}

TEST_CASE("a member that refuses the connection fails the round at once, saying why", "[collective][unit]") {
  auto b = member(0);
  const core::TimePoint t0{};
  auto calls = all_of<core::Call>(b.start(t0, 0, t0 + 60s));
  REQUIRE(calls.size() == 2);
  auto fx = b.on_response(t0 + 1ms, calls[1].id,
                          make_error(errc::protocol, "start both with --insecure, or neither"));
  REQUIRE(b.finished());
  REQUIRE_FALSE(b.status().ok());
  CHECK(b.status().error().code == errc::protocol);
  CHECK_THAT(b.status().error().message, Catch::Contains("rank 2 (/ip4/127.0.0.1/tcp/3) refused the connection") &&
                                             Catch::Contains("start both with --insecure, or neither"));
  CHECK(all_of<core::SetTimer>(fx).empty());
  CHECK(all_of<core::Cancel>(fx).size() == 1);  // the ask still out to rank 1
}
