// rpc::Engine: how calls end without an answer. Deadlines (both roles), peers going
// down, frames that arrive after a call ended, and commands on calls that do not
// exist. Time only moves when the test passes a later `now`.
#include <catch2/catch.hpp>

#include "tests/core/rpc/engine_link.hpp"

using namespace apiary;
using namespace apiary::core::rpc;
using namespace apiary::core::rpc::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using apiary::core::Duration;
using apiary::core::TimePoint;

TEST_CASE("next_deadline reports the earliest deadline and a tick before it does nothing", "[rpc][engine]") {
  Link l;
  const TimePoint t0 = l.now;
  const CallId served_a = l.open(1, pb::BIDI_STREAM, std::nullopt, false, 5s);
  l.open(2, pb::BIDI_STREAM, std::nullopt, false, 2s);
  l.open(3, pb::BIDI_STREAM, std::nullopt, false, Duration::zero());  // no deadline
  CHECK(l.client.engine.next_deadline() == t0 + 2s);
  CHECK(l.server.engine.next_deadline() == t0 + 2s);

  const Effects early = l.client.engine.on_tick(t0 + 2s - 1ns);
  CHECK(early.frames.empty());
  CHECK(early.deliveries.empty());
  CHECK(l.server.engine.on_tick(t0 + 2s - 1ns).deliveries.empty());
  CHECK(l.client.engine.open_calls() == 3);

  // At the deadline the caller gives up and tells the callee.
  l.now = t0 + 2s;
  l.client.take(l.client.engine.on_tick(l.now));
  REQUIRE(l.client.inbox.size() == 1);
  const Delivery d = l.client.pop();
  CHECK(d.kind == DeliveryKind::error);
  CHECK(d.final);
  CHECK(d.call == 2);
  CHECK(d.error.code == errc::deadline_exceeded);
  CHECK_THAT(d.error.message, Contains(k_echo));
  REQUIRE(l.client.outbox.size() == 1);
  const pb::Envelope& cancel = l.client.outbox.front().envelope;
  CHECK(cancel.kind() == pb::CANCEL);
  CHECK(cancel.call_id() == 2);
  CHECK(cancel.error_code() == static_cast<std::uint32_t>(errc::deadline_exceeded));
  CHECK(l.client.engine.open_calls() == 2);
  CHECK(l.client.engine.next_deadline() == t0 + 5s);
  CHECK(l.client.engine.stats().deadlines == 1);

  // The callee, told the timeout in the OPEN, expires its side on its own.
  l.server.take(l.server.engine.on_tick(l.now));
  REQUIRE(l.server.inbox.size() == 1);
  const Delivery s = l.server.pop();
  CHECK(s.kind == DeliveryKind::error);
  CHECK(s.final);
  CHECK(s.error.code == errc::deadline_exceeded);
  CHECK(l.server.outbox.empty());
  CHECK(l.server.engine.open_calls() == 2);
  CHECK(l.server.engine.next_deadline() == t0 + 5s);

  // The caller's CANCEL then finds nothing to cancel.
  REQUIRE(l.to_server());
  CHECK(l.server.inbox.empty());
  CHECK(l.server.engine.stats().late_frames == 1);

  // A tick long after expires the 5 s call and leaves the one without a deadline.
  l.now = t0 + 1h;
  l.client.take(l.client.engine.on_tick(l.now));
  l.server.take(l.server.engine.on_tick(l.now));
  REQUIRE(l.client.inbox.size() == 1);
  CHECK(l.client.pop().call == 1);
  REQUIRE(l.server.inbox.size() == 1);
  CHECK(l.server.pop().call == served_a);
  CHECK(l.client.engine.open_calls() == 1);
  CHECK(l.server.engine.open_calls() == 1);
  CHECK(l.client.engine.next_deadline() == std::nullopt);
  CHECK(l.server.engine.next_deadline() == std::nullopt);
}

TEST_CASE("the callee's deadline counts from when the OPEN arrived", "[rpc][engine]") {
  Link l;
  l.client.take(l.client.engine.open(l.now, 1, k_caller, k_server, k_echo, pb::UNARY, 1500ms, bytes("x"), true));
  l.now += 400ms;  // time on the wire
  REQUIRE(l.to_server());
  CHECK(l.server.engine.next_deadline() == l.now + 1500ms);
}

TEST_CASE("a call that finishes clears its deadline", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(1, pb::UNARY, bytes("x"), true, 1s);
  l.server.take(l.server.engine.send(l.now, served, bytes("y"), true));
  l.pump();
  CHECK(l.client.engine.next_deadline() == std::nullopt);
  CHECK(l.server.engine.next_deadline() == std::nullopt);
  l.client.take(l.client.engine.on_tick(l.now + 1h));
  l.server.take(l.server.engine.on_tick(l.now + 1h));
  REQUIRE(l.client.inbox.size() == 1);  // the reply only
  CHECK(l.client.inbox.front().kind == DeliveryKind::message);
  CHECK(l.server.inbox.empty());
  CHECK(l.client.engine.stats().deadlines == 0);
}

TEST_CASE("timeouts too long to add to now never expire early", "[rpc][engine]") {
  Link l;
  SECTION("caller side") {
    l.open(1, pb::UNARY, bytes("x"), true, Duration::max());
    REQUIRE(l.client.engine.next_deadline().has_value());
    CHECK(*l.client.engine.next_deadline() > l.now + 24h);
  }
  SECTION("callee side, from a peer's OPEN") {
    pb::Envelope open = envelope(pb::OPEN, 1, true);
    open.set_handle(k_echo);
    open.set_end_of_stream(true);
    open.set_timeout_us(~std::uint64_t{0});
    l.server.take(l.server.engine.on_frame(l.now, k_client, open, Buffer{}, std::nullopt));
    REQUIRE(l.server.inbox.size() == 1);
    REQUIRE(l.server.engine.next_deadline().has_value());
    CHECK(*l.server.engine.next_deadline() > l.now + 24h);
  }
  l.client.take(l.client.engine.on_tick(l.now + 24h));
  l.server.take(l.server.engine.on_tick(l.now + 24h));
  CHECK(l.client.inbox.empty());
  CHECK(l.server.inbox.size() <= 1);  // the open, no error
  for (const Delivery& d : l.server.inbox) CHECK(d.kind == DeliveryKind::open);
}

TEST_CASE("a peer going down fails its calls in both roles and no others", "[rpc][engine]") {
  Link l;
  const PeerKey other = "10.0.0.3:4100";
  l.client.engine.serve("client.callback", 55);
  l.open(1, pb::BIDI_STREAM, std::nullopt, false);  // client calls the server
  l.client.take(l.client.engine.open(l.now, 2, k_caller, other, k_echo, pb::UNARY, 5s, bytes("x"), true));
  l.client.outbox.clear();  // `other` never hears of it in this test
  pb::Envelope inbound = envelope(pb::OPEN, 8, true);  // the server calls the client
  inbound.set_handle("client.callback");
  inbound.set_timeout_us(3'000'000);
  l.client.take(l.client.engine.on_frame(l.now, k_server, inbound, Buffer{}, std::nullopt));
  REQUIRE(l.client.inbox.size() == 1);
  const CallId callback = l.client.pop().call;
  REQUIRE(l.client.engine.open_calls() == 3);

  l.client.take(l.client.engine.on_peer_down(l.now, k_server, make_error(errc::unavailable, "connection reset")));
  CHECK(l.client.outbox.empty());  // nobody left to tell
  REQUIRE(l.client.inbox.size() == 2);
  std::vector<CallId> failed;
  for (const Delivery& d : l.client.inbox) {
    CHECK(d.kind == DeliveryKind::error);
    CHECK(d.final);
    CHECK(d.error.code == errc::peer_down);
    CHECK(d.error.message == "connection reset");
    CHECK(d.peer == k_server);
    failed.push_back(d.call);
  }
  CHECK(failed == std::vector<CallId>{1, callback});  // in id order
  CHECK(l.client.inbox[0].sink == k_caller);
  CHECK(l.client.inbox[1].sink == 55);
  CHECK(l.client.engine.open_calls() == 1);
  CHECK(l.client.engine.next_deadline() == l.now + 5s);  // the call to `other` only

  // What the dead peer had in flight is late now.
  l.client.inbox.clear();
  pb::Envelope reply = envelope(pb::MESSAGE, 1, false);
  reply.set_has_message(true);
  l.client.take(l.client.engine.on_frame(l.now, k_server, reply, bytes("late"), std::nullopt));
  CHECK(l.client.inbox.empty());
  CHECK(l.client.engine.stats().late_frames == 1);
}

TEST_CASE("a refused connection fails its calls keeping the refusal's code, which is not worth retrying",
          "[rpc][engine]") {
  for (errc code : {errc::protocol, errc::crypto, errc::malformed, errc::peer_down, errc::unavailable}) {
    INFO(to_string(code));
    Link l;
    l.client.take(l.client.engine.open(l.now, 1, k_caller, k_server, k_echo, pb::UNARY, 5s, bytes("ping"), true));
    l.client.take(l.client.engine.on_peer_down(l.now, k_server, make_error(code, "refused, saying why")));
    REQUIRE(l.client.inbox.size() == 1);
    const Delivery& d = l.client.inbox.front();
    const bool refusal = code == errc::protocol || code == errc::crypto || code == errc::malformed;
    CHECK(d.error.code == (refusal ? code : errc::peer_down));
    CHECK(d.error.message == "refused, saying why");
  }
}

TEST_CASE("frames for a call the caller cancelled are dropped and counted", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(1, pb::SERVER_STREAM, bytes("go"), true);
  l.server.take(l.server.engine.send(l.now, served, bytes("r1"), false));
  l.server.take(l.server.engine.send(l.now, served, bytes("r2"), true));
  l.client.take(l.client.engine.cancel(l.now, 1, "no longer needed"));  // crosses the replies

  l.pump();
  CHECK(l.client.inbox.empty());
  CHECK(l.server.inbox.empty());  // the server had finished; the CANCEL came too late
  CHECK(l.client.engine.stats().late_frames == 2);
  CHECK(l.server.engine.stats().late_frames == 1);
  CHECK(l.client.engine.open_calls() == 0);
  CHECK(l.server.engine.open_calls() == 0);
}

TEST_CASE("commands on unknown or finished calls are no-ops", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(1, pb::UNARY, bytes("x"), true);
  l.server.take(l.server.engine.send(l.now, served, bytes("y"), true));
  l.pump();
  l.client.inbox.clear();

  for (CallId id : {CallId{1}, CallId{42}, served}) {
    for (Side* side : {&l.client, &l.server}) {
      Engine& e = side->engine;
      for (const Effects& fx : {e.send(l.now, id, bytes("z"), false), e.send(l.now, id, bytes("z"), true),
                                e.end(l.now, id), e.cancel(l.now, id, "why"),
                                e.fail(l.now, id, make_error(errc::internal, "why"))}) {
        CHECK(fx.frames.empty());
        CHECK(fx.deliveries.empty());
      }
    }
  }
  CHECK(l.client.engine.stats().late_frames == 15);
  CHECK(l.server.engine.stats().late_frames == 15);
}

TEST_CASE("sending after ending our direction is a no-op", "[rpc][engine]") {
  Link l;
  l.open(1, pb::CLIENT_STREAM, bytes("a"), false);
  l.client.take(l.client.engine.end(l.now, 1));
  l.client.outbox.clear();
  l.client.take(l.client.engine.send(l.now, 1, bytes("b"), false));
  l.client.take(l.client.engine.end(l.now, 1));
  CHECK(l.client.outbox.empty());
  CHECK(l.client.inbox.empty());
  CHECK(l.client.engine.open_calls() == 1);  // still waiting for the reply
}
