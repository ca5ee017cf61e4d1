// rpc::Engine: the four call shapes between a client engine and a server engine,
// every frame carried by hand. A call is over on a side only when both of its
// directions have ended there.
#include <catch2/catch.hpp>

#include "tests/core/rpc/engine_link.hpp"

using namespace apiary;
using namespace apiary::core::rpc;
using namespace apiary::core::rpc::testing;
using namespace std::chrono_literals;

TEST_CASE("unary call: open carries the request, the reply ends the call on both sides", "[rpc][engine]") {
  Link l;
  l.client.take(l.client.engine.open(l.now, 1, k_caller, k_server, k_echo, pb::UNARY, 5s, bytes("ping"), true));

  // The OPEN frame describes the whole call.
  REQUIRE(l.client.outbox.size() == 1);
  const Outgoing& open = l.client.outbox.front();
  CHECK(open.peer == k_server);
  CHECK(open.envelope.kind() == pb::OPEN);
  CHECK(open.envelope.call_id() == 1);
  CHECK(open.envelope.from_caller());
  CHECK(open.envelope.handle() == k_echo);
  CHECK(open.envelope.rpc_kind() == pb::UNARY);
  CHECK(open.envelope.has_message());
  CHECK(open.envelope.end_of_stream());
  CHECK(open.envelope.timeout_us() == 5'000'000);
  CHECK(text(open.payload) == "ping");
  CHECK(l.client.inbox.empty());
  CHECK(l.client.engine.open_calls() == 1);

  // The server's service sink hears the call with its request and end of stream.
  REQUIRE(l.to_server());
  REQUIRE(l.server.inbox.size() == 1);
  const Delivery got = l.server.pop();
  CHECK(got.kind == DeliveryKind::open);
  CHECK(got.sink == k_service);
  CHECK(got.handle == k_echo);
  CHECK(got.peer == k_client);
  CHECK(got.rpc_kind == pb::UNARY);
  CHECK(got.has_message);
  CHECK(got.end_of_stream);
  CHECK_FALSE(got.final);
  CHECK(text(got.data) == "ping");
  CHECK(l.server.engine.open_calls() == 1);

  // The reply ends the server's side at once.
  l.server.take(l.server.engine.send(l.now, got.call, bytes("pong"), true));
  CHECK(l.server.engine.open_calls() == 0);
  REQUIRE(l.server.outbox.size() == 1);
  CHECK(l.server.outbox.front().envelope.kind() == pb::MESSAGE);
  CHECK(l.server.outbox.front().envelope.call_id() == 1);
  CHECK_FALSE(l.server.outbox.front().envelope.from_caller());

  // The caller gets the reply as the final delivery of the call.
  REQUIRE(l.to_client());
  REQUIRE(l.client.inbox.size() == 1);
  const Delivery reply = l.client.pop();
  CHECK(reply.kind == DeliveryKind::message);
  CHECK(reply.sink == k_caller);
  CHECK(reply.call == 1);
  CHECK(reply.peer == k_server);
  CHECK(reply.has_message);
  CHECK(reply.end_of_stream);
  CHECK(reply.final);
  CHECK(text(reply.data) == "pong");

  CHECK(l.client.engine.open_calls() == 0);
  CHECK(l.client.engine.next_deadline() == std::nullopt);
  CHECK(l.server.engine.next_deadline() == std::nullopt);
  CHECK(l.client.engine.stats().calls_opened == 1);
  CHECK(l.server.engine.stats().calls_served == 1);
  CHECK(l.client.engine.stats().late_frames == 0);
  CHECK(l.server.engine.stats().late_frames == 0);
}

TEST_CASE("client stream: messages arrive in order, the single reply is final", "[rpc][engine]") {
  Link l;
  l.client.take(l.client.engine.open(l.now, 5, k_caller, k_server, k_echo, pb::CLIENT_STREAM, 5s, bytes("a"), false));
  l.client.take(l.client.engine.send(l.now, 5, bytes("b"), false));
  l.client.take(l.client.engine.send(l.now, 5, bytes("c"), false));
  l.client.take(l.client.engine.end(l.now, 5));
  l.pump();

  REQUIRE(l.server.inbox.size() == 4);
  const Delivery open = l.server.pop();
  CHECK(open.kind == DeliveryKind::open);
  CHECK(open.rpc_kind == pb::CLIENT_STREAM);
  CHECK(open.has_message);
  CHECK_FALSE(open.end_of_stream);
  CHECK(text(open.data) == "a");
  for (const char* expected : {"b", "c"}) {
    const Delivery d = l.server.pop();
    CHECK(d.kind == DeliveryKind::message);
    CHECK(d.call == open.call);
    CHECK(text(d.data) == expected);
    CHECK_FALSE(d.end_of_stream);
    CHECK_FALSE(d.final);
  }
  const Delivery end = l.server.pop();
  CHECK(end.kind == DeliveryKind::end);
  CHECK_FALSE(end.has_message);
  CHECK(end.end_of_stream);
  CHECK_FALSE(end.final);  // the server has not answered yet
  CHECK(l.server.engine.open_calls() == 1);
  CHECK(l.client.inbox.empty());

  l.server.take(l.server.engine.send(l.now, open.call, bytes("abc"), true));
  l.pump();
  REQUIRE(l.client.inbox.size() == 1);
  const Delivery reply = l.client.pop();
  CHECK(reply.kind == DeliveryKind::message);
  CHECK(text(reply.data) == "abc");
  CHECK(reply.final);
  CHECK(l.client.engine.open_calls() == 0);
  CHECK(l.server.engine.open_calls() == 0);
}

TEST_CASE("server stream: replies arrive in order, only the last is final", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(9, pb::SERVER_STREAM, bytes("3"), true);
  for (const char* m : {"1", "2"}) l.server.take(l.server.engine.send(l.now, served, bytes(m), false));
  l.server.take(l.server.engine.send(l.now, served, bytes("3"), true));
  CHECK(l.server.engine.open_calls() == 0);
  l.pump();

  REQUIRE(l.client.inbox.size() == 3);
  for (const char* expected : {"1", "2", "3"}) {
    const Delivery d = l.client.pop();
    CHECK(d.kind == DeliveryKind::message);
    CHECK(d.call == 9);
    CHECK(d.rpc_kind == pb::SERVER_STREAM);
    CHECK(text(d.data) == expected);
    const bool last = std::string(expected) == "3";
    CHECK(d.end_of_stream == last);
    CHECK(d.final == last);
  }
  CHECK(l.client.engine.open_calls() == 0);
}

TEST_CASE("server stream ended by an empty end frame", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(2, pb::SERVER_STREAM, bytes("go"), true);
  l.server.take(l.server.engine.send(l.now, served, bytes("only"), false));
  l.server.take(l.server.engine.end(l.now, served));
  l.pump();
  REQUIRE(l.client.inbox.size() == 2);
  CHECK_FALSE(l.client.pop().final);
  const Delivery end = l.client.pop();
  CHECK(end.kind == DeliveryKind::end);
  CHECK(end.end_of_stream);
  CHECK(end.final);
  CHECK(l.client.engine.open_calls() == 0);
  CHECK(l.server.engine.open_calls() == 0);
}

TEST_CASE("bidi stream: interleaved messages keep their order, final only when both ended", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(4, pb::BIDI_STREAM, std::nullopt, false);

  l.client.take(l.client.engine.send(l.now, 4, bytes("c1"), false));
  l.server.take(l.server.engine.send(l.now, served, bytes("s1"), false));
  l.client.take(l.client.engine.send(l.now, 4, bytes("c2"), false));
  l.server.take(l.server.engine.send(l.now, served, bytes("s2"), false));
  l.pump();
  REQUIRE(l.server.inbox.size() == 2);
  CHECK(text(l.server.pop().data) == "c1");
  CHECK(text(l.server.pop().data) == "c2");
  REQUIRE(l.client.inbox.size() == 2);
  CHECK(text(l.client.pop().data) == "s1");
  CHECK(text(l.client.pop().data) == "s2");

  SECTION("server ends first") {
    l.server.take(l.server.engine.end(l.now, served));
    l.pump();
    REQUIRE(l.client.inbox.size() == 1);
    const Delivery end = l.client.pop();
    CHECK(end.kind == DeliveryKind::end);
    CHECK_FALSE(end.final);  // the client still sends
    CHECK(l.client.engine.open_calls() == 1);
    CHECK(l.server.engine.open_calls() == 1);

    l.client.take(l.client.engine.send(l.now, 4, bytes("c3"), true));
    CHECK(l.client.engine.open_calls() == 0);
    l.pump();
    REQUIRE(l.server.inbox.size() == 1);
    const Delivery last = l.server.pop();
    CHECK(text(last.data) == "c3");
    CHECK(last.end_of_stream);
    CHECK(last.final);
  }
  SECTION("client ends first") {
    l.client.take(l.client.engine.end(l.now, 4));
    l.pump();
    REQUIRE(l.server.inbox.size() == 1);
    CHECK_FALSE(l.server.pop().final);
    l.server.take(l.server.engine.send(l.now, served, bytes("s3"), false));
    l.server.take(l.server.engine.send(l.now, served, bytes("s4"), true));
    CHECK(l.server.engine.open_calls() == 0);
    l.pump();
    REQUIRE(l.client.inbox.size() == 2);
    const Delivery s3 = l.client.pop();
    CHECK(text(s3.data) == "s3");
    CHECK_FALSE(s3.final);
    const Delivery s4 = l.client.pop();
    CHECK(text(s4.data) == "s4");
    CHECK(s4.final);
  }
  CHECK(l.client.engine.open_calls() == 0);
  CHECK(l.server.engine.open_calls() == 0);
}

TEST_CASE("an empty message is still a message", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(3, pb::UNARY, Buffer{}, true);
  l.server.take(l.server.engine.send(l.now, served, Buffer{}, true));
  l.pump();
  REQUIRE(l.client.inbox.size() == 1);
  const Delivery reply = l.client.pop();
  CHECK(reply.kind == DeliveryKind::message);
  CHECK(reply.has_message);
  CHECK(reply.data.empty());
  CHECK(reply.final);
}
