// rpc::Engine: frames a peer should not have sent, and payloads the transport
// refused. Each ends the affected call on both sides with a clear error; frames for
// calls that do not exist (or belong to another peer) change nothing.
#include <catch2/catch.hpp>

#include "tests/core/rpc/engine_link.hpp"

using namespace apiary;
using namespace apiary::core::rpc;
using namespace apiary::core::rpc::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

const Error k_too_large = make_error(errc::too_large, "frame payload of 9000 bytes exceeds the limit of 4096 bytes");

// Hands `to` a message of call 1 from `from` after `from` ended its stream, and checks
// that `to` counted a protocol error, closed the call and delivered one thing.
void message_after_end(Link& l, Side& from, Side& to) {
  pb::Envelope extra = envelope(pb::MESSAGE, 1, &from == &l.client);
  extra.set_has_message(true);
  to.take(to.engine.on_frame(l.now, from.key, extra, bytes("more"), std::nullopt));
  CHECK(to.engine.stats().protocol_errors == 1);
  CHECK(to.engine.open_calls() == 0);
  REQUIRE(to.inbox.size() == 1);
}

}  // namespace

TEST_CASE("a message after the caller's end of stream is a protocol error on both sides", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(1, pb::UNARY, bytes("req"), true);
  message_after_end(l, l.client, l.server);
  const Delivery local = l.server.pop();
  check_error(local, errc::protocol);
  CHECK(local.call == served);
  CHECK_THAT(local.error.message, Contains("after its end of stream"));
  REQUIRE(l.server.outbox.size() == 1);
  CHECK(l.server.outbox.front().envelope.kind() == pb::ERROR);

  REQUIRE(l.to_client());
  const Delivery remote = only_error(l.client, errc::protocol);
  CHECK(remote.call == 1);
  CHECK(l.client.engine.open_calls() == 0);
}

TEST_CASE("a message after the callee's end of stream is a protocol error on both sides", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(1, pb::BIDI_STREAM, std::nullopt, false);
  l.server.take(l.server.engine.end(l.now, served));
  l.pump();
  REQUIRE(l.client.inbox.size() == 1);
  CHECK(l.client.pop().kind == DeliveryKind::end);

  message_after_end(l, l.server, l.client);
  check_error(l.client.pop(), errc::protocol);
  REQUIRE(l.client.outbox.size() == 1);
  CHECK(l.client.outbox.front().envelope.kind() == pb::CANCEL);
  CHECK(l.client.outbox.front().envelope.error_code() == static_cast<std::uint32_t>(errc::protocol));

  REQUIRE(l.to_server());
  const Delivery d = only_error(l.server, errc::cancelled);
  CHECK(d.call == served);
  CHECK(l.server.engine.open_calls() == 0);
}

TEST_CASE("an OPEN whose payload was refused is answered with that error", "[rpc][engine]") {
  Link l;
  l.client.take(l.client.engine.open(l.now, 1, k_caller, k_server, k_echo, pb::UNARY, 5s, bytes("huge"), true));
  REQUIRE(l.to_server(k_too_large));
  const pb::Envelope& err = refused_open(l.server);
  check_error_frame(err, 1, errc::too_large);
  CHECK(err.error_message() == k_too_large.message);

  REQUIRE(l.to_client());
  const Delivery d = only_error(l.client, errc::too_large);
  CHECK(d.error.message == k_too_large.message);
  CHECK(l.client.engine.open_calls() == 0);
}

TEST_CASE("a refused message payload at the callee fails the call both ways", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(1, pb::CLIENT_STREAM, bytes("a"), false);
  l.client.take(l.client.engine.send(l.now, 1, bytes("huge"), false));
  REQUIRE(l.to_server(k_too_large));

  const Delivery local = only_error(l.server, errc::too_large);
  CHECK(local.call == served);
  CHECK(l.server.engine.open_calls() == 0);
  CHECK(l.server.engine.stats().protocol_errors == 0);  // the peer did nothing wrong
  REQUIRE(l.server.outbox.size() == 1);
  CHECK(l.server.outbox.front().envelope.kind() == pb::ERROR);

  REQUIRE(l.to_client());
  only_error(l.client, errc::too_large);
  CHECK(l.client.engine.open_calls() == 0);
}

TEST_CASE("a refused message payload at the caller fails the call both ways", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(1, pb::SERVER_STREAM, bytes("go"), true);
  l.server.take(l.server.engine.send(l.now, served, bytes("huge"), false));
  REQUIRE(l.to_client(k_too_large));

  const Delivery local = only_error(l.client, errc::too_large);
  CHECK(local.call == 1);
  CHECK(l.client.engine.open_calls() == 0);
  REQUIRE(l.client.outbox.size() == 1);
  const pb::Envelope& cancel = l.client.outbox.front().envelope;
  CHECK(cancel.kind() == pb::CANCEL);
  CHECK(cancel.error_code() == static_cast<std::uint32_t>(errc::too_large));

  REQUIRE(l.to_server());
  const Delivery d = only_error(l.server, errc::cancelled);
  CHECK_THAT(d.error.message, Contains("exceeds the limit"));
  CHECK(l.server.engine.open_calls() == 0);
}

TEST_CASE("an OPEN not from a caller, or with call id 0, is rejected", "[rpc][engine]") {
  Link l;
  for (auto [id, from_caller] : {std::pair<std::uint64_t, bool>{0, true}, {3, false}}) {
    pb::Envelope open = envelope(pb::OPEN, id, from_caller);
    open.set_handle(k_echo);
    l.server.take(l.server.engine.on_frame(l.now, k_client, open, Buffer{}, std::nullopt));
    CHECK(l.server.inbox.empty());
    CHECK(l.server.engine.open_calls() == 0);
    REQUIRE(l.server.outbox.size() == 1);
    CHECK(l.server.pop_frame().envelope.error_code() == static_cast<std::uint32_t>(errc::protocol));
  }
  CHECK(l.server.engine.stats().protocol_errors == 2);
}

TEST_CASE("frames naming a call of another peer, or in the wrong role, change nothing", "[rpc][engine]") {
  Link l;
  const CallId served = l.open(1, pb::BIDI_STREAM, std::nullopt, false);
  const PeerKey stranger = "10.0.0.66:4100";

  pb::Envelope msg = envelope(pb::MESSAGE, 1, false);
  msg.set_has_message(true);
  l.client.take(l.client.engine.on_frame(l.now, stranger, msg, bytes("forged"), std::nullopt));
  l.client.take(l.client.engine.on_frame(l.now, k_server, envelope(pb::CANCEL, 1, true), Buffer{}, std::nullopt));
  l.server.take(l.server.engine.on_frame(l.now, stranger, envelope(pb::CANCEL, 1, true), Buffer{}, std::nullopt));
  l.server.take(l.server.engine.on_frame(l.now, k_client, envelope(pb::CANCEL, served, false), Buffer{}, std::nullopt));

  CHECK(l.client.inbox.empty());
  CHECK(l.server.inbox.empty());
  CHECK(l.client.outbox.empty());
  CHECK(l.server.outbox.empty());
  CHECK(l.client.engine.open_calls() == 1);
  CHECK(l.server.engine.open_calls() == 1);
  CHECK(l.client.engine.stats().late_frames == 2);
  CHECK(l.server.engine.stats().late_frames == 2);

  // The real call still works.
  l.client.take(l.client.engine.send(l.now, 1, bytes("hi"), true));
  l.server.take(l.server.engine.end(l.now, served));
  l.pump();
  CHECK(l.client.engine.open_calls() == 0);
  CHECK(l.server.engine.open_calls() == 0);
}

TEST_CASE("frame kinds the engine does not handle are ignored", "[rpc][engine]") {
  Link l;
  l.open(1, pb::BIDI_STREAM, std::nullopt, false);
  for (pb::FrameKind kind : {pb::HELLO, pb::KEEPALIVE, pb::KEEPALIVE_ACK, pb::FRAME_UNSPECIFIED}) {
    const Effects fx = l.client.engine.on_frame(l.now, k_server, envelope(kind, 1, false), Buffer{}, std::nullopt);
    CHECK(fx.frames.empty());
    CHECK(fx.deliveries.empty());
  }
  CHECK(l.client.engine.open_calls() == 1);
}
