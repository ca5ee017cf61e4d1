// rpc::Engine: how calls fail. Cancellation both ways, handler errors, unknown
// handles, protocol violations and payloads the transport refused; every failure
// ends the call on both sides with one final error delivery.
#include <catch2/catch.hpp>

#include "tests/core/rpc/engine_link.hpp"

using namespace apiary;
using namespace apiary::core::rpc;
using namespace apiary::core::rpc::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

TEST_CASE("caller cancel reaches the callee as a final cancelled error", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(1, pb::UNARY, bytes("slow"), true);
  l.client.take(l.client.engine.cancel(l.now, 1, "the user gave up"));
  CHECK(l.client.engine.open_calls() == 0);
  CHECK(l.client.inbox.empty());  // the caller asked for it; nothing to tell it
  REQUIRE(l.client.outbox.size() == 1);
  CHECK(l.client.outbox.front().envelope.kind() == pb::CANCEL);
  CHECK(l.client.outbox.front().envelope.from_caller());

  REQUIRE(l.to_server());
  const Delivery d = only_error(l.server, errc::cancelled);
  CHECK(d.call == served);
  CHECK(d.sink == k_service);
  CHECK_THAT(d.error.message, Contains("the user gave up"));
  CHECK(l.server.engine.open_calls() == 0);
  CHECK(l.server.outbox.empty());
}

TEST_CASE("callee cancel reaches the caller as a final cancelled error", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(1, pb::SERVER_STREAM, bytes("go"), true);
  l.server.take(l.server.engine.cancel(l.now, served, "shutting down"));
  CHECK(l.server.engine.open_calls() == 0);
  CHECK(l.server.inbox.empty());
  l.pump();
  const Delivery d = only_error(l.client, errc::cancelled);
  CHECK(d.call == 1);
  CHECK(d.sink == k_caller);
  CHECK_THAT(d.error.message, Contains("shutting down"));
  CHECK(l.client.engine.open_calls() == 0);
}

TEST_CASE("a handler failure reaches the caller with its code and message", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(1, pb::UNARY, bytes("key"), true);
  l.server.take(l.server.engine.fail(l.now, served, make_error(errc::not_found, "no record under 'key'")));
  CHECK(l.server.engine.open_calls() == 0);
  REQUIRE(l.server.outbox.size() == 1);
  CHECK(l.server.outbox.front().envelope.kind() == pb::ERROR);
  l.pump();
  const Delivery d = only_error(l.client, errc::not_found);
  CHECK(d.error.message == "no record under 'key'");
  CHECK(l.client.engine.open_calls() == 0);
}

TEST_CASE("a long or binary error message goes out as at most 1 KiB of UTF-8 the peer can parse", "[rpc][engine]") {
  // protobuf refuses a string field holding invalid UTF-8: a message cut inside a
  // character, or quoting bytes from a request, would make the whole ERROR unreadable.
  Link l;
  const CallId served = l.open(1, pb::UNARY, bytes("key"), true);
  std::string message = "x";
  for (int i = 0; i < 700; ++i) message += "\xc3\xa9";  // é: the 1024th byte is half of one
  message.insert(9, "\xff\xfe");                      // and bytes that are not UTF-8
  l.server.take(l.server.engine.fail(l.now, served, make_error(errc::not_found, "{}", message)));
  REQUIRE(l.server.outbox.size() == 1);
  const pb::Envelope& sent = l.server.outbox.front().envelope;
  CHECK(sent.error_message().size() <= k_max_error_message);
  CHECK(sent.error_message().size() >= k_max_error_message - 1);
  CHECK(sent.error_message().substr(0, 13) == "x\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9??\xc3\xa9");
  pb::Envelope back;
  CHECK(back.ParseFromString(sent.SerializeAsString()));
  CHECK(back.error_message() == sent.error_message());
  l.pump();
  const Delivery d = only_error(l.client, errc::not_found);
  CHECK(d.error.message.size() >= k_max_error_message - 1);
}

TEST_CASE("an error code the caller does not know becomes handler_error", "[rpc][engine]") {
  Link l;
  for (std::uint32_t code : {0u, 999u}) {
    l.client.take(l.client.engine.open(l.now, 2, k_caller, k_server, k_echo, pb::UNARY, 5s, bytes("y"), true));
    l.client.outbox.clear();
    pb::Envelope err = envelope(pb::ERROR, 2, false);
    err.set_error_code(code);
    err.set_error_message("odd");
    l.client.take(l.client.engine.on_frame(l.now, k_server, err, Buffer{}, std::nullopt));
    only_error(l.client, errc::handler_error);
  }
}

TEST_CASE("a caller failing its own call cancels it", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(1, pb::CLIENT_STREAM, bytes("a"), false);
  l.client.take(l.client.engine.fail(l.now, 1, make_error(errc::io, "input file vanished")));
  REQUIRE(l.client.outbox.size() == 1);
  CHECK(l.client.outbox.front().envelope.kind() == pb::CANCEL);
  l.pump();
  const Delivery d = only_error(l.server, errc::cancelled);
  CHECK(d.call == served);
  CHECK_THAT(d.error.message, Contains("input file vanished"));
}

TEST_CASE("an unknown handle is answered with an error frame naming it and the served ones", "[rpc][engine]") {
  Link l;
  l.server.engine.serve("b.two", k_service);
  l.server.engine.serve("a.one", k_service);
  l.client.take(l.client.engine.open(l.now, 1, k_caller, k_server, "c.three", pb::UNARY, 5s, bytes("x"), true));
  REQUIRE(l.to_server());
  const pb::Envelope& err = refused_open(l.server);
  check_error_frame(err, 1, errc::not_found);
  CHECK_FALSE(err.from_caller());
  CHECK_THAT(err.error_message(), Contains("'c.three'"));
  CHECK_THAT(err.error_message(), Contains("a.one, b.two, test.echo"));

  REQUIRE(l.to_client());
  const Delivery d = only_error(l.client, errc::not_found);
  CHECK(d.call == 1);
  CHECK_THAT(d.error.message, Contains("c.three"));
  CHECK(l.client.engine.open_calls() == 0);
}

TEST_CASE("an unserved handle is unknown and a node serving nothing says so", "[rpc][engine]") {
  Link l;
  l.server.engine.unserve(k_echo);
  l.client.take(l.client.engine.open(l.now, 1, k_caller, k_server, k_echo, pb::UNARY, 5s, bytes("x"), true));
  l.pump();
  const Delivery d = only_error(l.client, errc::not_found);
  CHECK_THAT(d.error.message, Contains("nothing"));
}

TEST_CASE("a second OPEN with an id already open from that peer is a protocol error", "[rpc][engine]") {
  Link l;
  l.client.take(l.client.engine.open(l.now, 1, k_caller, k_server, k_echo, pb::BIDI_STREAM, 5s, std::nullopt, false));
  const Outgoing open = l.client.outbox.front();
  REQUIRE(l.to_server());
  REQUIRE(l.server.inbox.size() == 1);

  l.server.take(l.server.engine.on_frame(l.now, k_client, open.envelope, open.payload, std::nullopt));
  CHECK(l.server.engine.stats().protocol_errors == 1);
  CHECK(l.server.engine.stats().calls_served == 1);
  CHECK(l.server.inbox.size() == 1);  // no second call
  REQUIRE(l.server.outbox.size() == 1);
  const pb::Envelope& err = l.server.outbox.front().envelope;
  check_error_frame(err, 1, errc::protocol);
  CHECK_THAT(err.error_message(), Contains("already open"));

  // The same id from another peer is another call.
  l.server.take(l.server.engine.on_frame(l.now, "10.0.0.9:4100", open.envelope, open.payload, std::nullopt));
  CHECK(l.server.inbox.size() == 2);
  CHECK(l.server.engine.open_calls() == 2);
}

TEST_CASE("opening an id already in use fails locally and sends nothing", "[rpc][engine]") {
  Link l;
  l.open(1, pb::BIDI_STREAM, std::nullopt, false);
  l.client.take(l.client.engine.open(l.now, 1, k_caller + 1, k_server, k_echo, pb::UNARY, 5s, bytes("x"), true));
  CHECK(l.client.outbox.empty());
  const Delivery d = only_error(l.client, errc::internal);
  CHECK(d.sink == k_caller + 1);
  CHECK_THAT(d.error.message, Contains("already in use"));
  CHECK(l.client.engine.open_calls() == 1);  // the first call is untouched
}

TEST_CASE("a handle that is empty or too long is refused before anything is sent", "[rpc][engine]") {
  Link l;
  for (const std::string& handle : {std::string(), std::string(k_max_handle_bytes + 1, 'h')}) {
    l.client.take(l.client.engine.open(l.now, 1, k_caller, k_server, handle, pb::UNARY, 5s, bytes("x"), true));
    CHECK(l.client.outbox.empty());
    only_error(l.client, errc::invalid_argument);
    CHECK(l.client.engine.open_calls() == 0);
  }
}

TEST_CASE("a call id outside 1..2^63-1 is refused before anything is sent", "[rpc][engine]") {
  // Id 0 means "no call" on the wire, and ids with the top bit set name served calls.
  Link l;
  for (CallId id : {CallId{0}, CallId{1} << 63, ~CallId{0}}) {
    l.client.take(l.client.engine.open(l.now, id, k_caller, k_server, k_echo, pb::UNARY, 5s, bytes("x"), true));
    CHECK(l.client.outbox.empty());
    const Delivery d = only_error(l.client, errc::invalid_argument);
    CHECK(d.call == id);
    CHECK(l.client.engine.open_calls() == 0);
  }
}
