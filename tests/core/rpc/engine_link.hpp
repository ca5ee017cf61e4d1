#pragma once
/// A hand-driven wire between two rpc::Engine instances, a "client" and a "server",
/// for unit tests. Frames each engine emits wait in its outbox until the test delivers
/// them, one at a time, at the link's current time `now`; local deliveries collect in
/// each side's inbox. Nothing runs unless the test says so.
#include <catch2/catch.hpp>

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/rpc/engine.hpp"

namespace apiary::core::rpc::testing {

/// Transport key of the client side.
inline const PeerKey k_client = "10.0.0.1:4100";
/// Transport key of the server side.
inline const PeerKey k_server = "10.0.0.2:4100";
/// The server's sink for the handles a Link serves.
inline constexpr Sink k_service = 7;
/// The client's sink for the calls the tests open.
inline constexpr Sink k_caller = 100;
/// Handle the server of a Link serves from the start.
inline const std::string k_echo = "test.echo";

/// A payload holding `s`.
inline Buffer bytes(std::string_view s) { return Buffer::copy_of(s); }
/// The bytes of `b` as a string.
inline std::string text(const Buffer& b) { return std::string(b.view()); }

/// A hand-made envelope, for frames a well-behaved engine would never send.
inline pb::Envelope envelope(pb::FrameKind kind, std::uint64_t call_id, bool from_caller) {
  pb::Envelope env;
  env.set_kind(kind);
  env.set_call_id(call_id);
  env.set_from_caller(from_caller);
  return env;
}

/// One end of the link: its engine, frames it sent and not yet delivered, and what it
/// delivered locally, in order.
struct Side {
  Engine engine;
  PeerKey key;
  std::deque<Outgoing> outbox;
  std::vector<Delivery> inbox;

  /// Records what one engine call returned.
  void take(Effects fx) {
    for (auto& f : fx.frames) outbox.push_back(std::move(f));
    for (auto& d : fx.deliveries) inbox.push_back(std::move(d));
  }
  /// Removes and returns the oldest local delivery (fails the test when there is none).
  Delivery pop() {
    REQUIRE_FALSE(inbox.empty());
    Delivery d = std::move(inbox.front());
    inbox.erase(inbox.begin());
    return d;
  }
  /// Removes and returns the oldest outgoing frame without delivering it.
  Outgoing pop_frame() {
    REQUIRE_FALSE(outbox.empty());
    Outgoing f = std::move(outbox.front());
    outbox.pop_front();
    return f;
  }
};

/// Two engines and the frames between them.
struct Link {
  Side client{Engine{}, k_client, {}, {}};
  Side server{Engine{}, k_server, {}, {}};
  /// The time every input is given, in nanoseconds since an arbitrary epoch.
  TimePoint now = std::chrono::seconds(1000);

  Link() { server.engine.serve(k_echo, k_service); }

  /// Delivers the oldest frame `from` sent to `to`, as the transport would hand it over
  /// (with `payload_error` when the transport refused the payload). False if none.
  bool deliver(Side& from, Side& to, const std::optional<Error>& payload_error = std::nullopt) {
    if (from.outbox.empty()) return false;
    Outgoing f = from.pop_frame();
    REQUIRE(f.peer == to.key);
    to.take(to.engine.on_frame(now, from.key, f.envelope, std::move(f.payload), payload_error));
    return true;
  }
  /// Delivers the client's oldest frame to the server.
  bool to_server(const std::optional<Error>& payload_error = std::nullopt) {
    return deliver(client, server, payload_error);
  }
  /// Delivers the server's oldest frame to the client.
  bool to_client(const std::optional<Error>& payload_error = std::nullopt) {
    return deliver(server, client, payload_error);
  }
  /// Delivers every frame, both ways, until no side has one left.
  void pump() {
    while (to_server() || to_client()) {
    }
  }

  /// Client: opens call `id` to `handle` on the server and sends the OPEN frame to it.
  /// Returns the server-side id of the call (fails the test unless the server got it).
  CallId open(CallId id, pb::RpcKind kind, std::optional<Buffer> first, bool end,
              Duration timeout = std::chrono::seconds(5), const std::string& handle = k_echo) {
    client.take(client.engine.open(now, id, k_caller, k_server, handle, kind, timeout, std::move(first), end));
    REQUIRE(to_server());
    REQUIRE(server.inbox.size() == 1);
    REQUIRE(server.inbox.back().kind == DeliveryKind::open);
    return server.pop().call;
  }
};

/// Checks that `d` is the final error delivery of a call, with `code`.
inline void check_error(const Delivery& d, errc code) {
  CHECK(d.kind == DeliveryKind::error);
  CHECK(d.final);
  CHECK(d.error.code == code);
}

/// The one delivery waiting at `side`, checked as the final error of its call with `code`.
inline Delivery only_error(Side& side, errc code) {
  REQUIRE(side.inbox.size() == 1);
  Delivery d = side.pop();
  check_error(d, code);
  return d;
}

/// Checks that `env` is an ERROR frame for call `call_id` carrying `code`.
inline void check_error_frame(const pb::Envelope& env, std::uint64_t call_id, errc code) {
  CHECK(env.kind() == pb::ERROR);
  CHECK(env.call_id() == call_id);
  CHECK(env.error_code() == static_cast<std::uint32_t>(code));
}

/// Checks that the server answered the OPEN it was just given with one error frame, and
/// nothing else: no delivery, no open call, none counted as served. Returns that frame.
inline const pb::Envelope& refused_open(const Side& server) {
  CHECK(server.inbox.empty());
  CHECK(server.engine.open_calls() == 0);
  CHECK(server.engine.stats().calls_served == 0);
  REQUIRE(server.outbox.size() == 1);
  return server.outbox.front().envelope;
}

}  // namespace apiary::core::rpc::testing
