// RPC semantics between two real processes over UCX on loopback: unary, client
// stream, server stream, bidi, cancellation both ways, deadlines, unknown handles,
// handler errors and exceptions.
#include <catch2/catch.hpp>

#include "actors/rpc.hpp"
#include "test.pb.h"
#include "tests/support/server_fixture.hpp"
#include "tests/support/test_messages.hpp"

using namespace apiary;
using namespace std::chrono_literals;
using testing::response_number;
using testing::test_request;

namespace {

struct Fixture : testing::ServerFixture {
  explicit Fixture(const std::string& mode = "tcp") : ServerFixture({}, client_config(mode)) {}
  static actors::GatewayConfig client_config(const std::string& mode) {
    actors::GatewayConfig gc;
    gc.transport.mode = mode == "shm" ? transport::Mode::shm : transport::Mode::tcp;
    return gc;
  }
};

}  // namespace

TEST_CASE("unary rpc_square over UCX between processes", "[integration]") {
  Fixture f;
  caf::scoped_actor self{*f.sys};
  auto r = actors::call_unary(self, *f.gw, f.peer, "test.rpc_square", test_request(10), 5s);
  REQUIRE(r.ok());
  CHECK(response_number(*r) == 100);
}

TEST_CASE("client stream sums 0..9 to 45", "[integration]") {
  Fixture f;
  caf::scoped_actor self{*f.sys};
  auto id = f.gw->open(self, f.peer, "test.rpc_sum", pb::CLIENT_STREAM, 5s, std::nullopt, false);
  for (int i = 0; i < 10; ++i) f.gw->send(id, test_request(i), i == 9);
  auto out = actors::await_calls(self, *f.gw, {id}, 6s)[id];
  REQUIRE_FALSE(out.error);
  REQUIRE(out.messages.size() == 1);
  CHECK(response_number(out.messages[0]) == 45);
}

TEST_CASE("server stream counts to 10", "[integration]") {
  Fixture f;
  caf::scoped_actor self{*f.sys};
  auto id = f.gw->open(self, f.peer, "test.rpc_count", pb::SERVER_STREAM, 5s, test_request(10), true);
  auto out = actors::await_calls(self, *f.gw, {id}, 6s)[id];
  REQUIRE_FALSE(out.error);
  REQUIRE(out.messages.size() == 10);
  for (int i = 0; i < 10; ++i) CHECK(response_number(out.messages[i]) == i + 1);
}

TEST_CASE("bidi stream echoes in order", "[integration]") {
  Fixture f;
  caf::scoped_actor self{*f.sys};
  auto id = f.gw->open(self, f.peer, "test.rpc_echo", pb::BIDI_STREAM, 5s, std::nullopt, false);
  for (int i = 0; i < 20; ++i) f.gw->send(id, test_request(i * 3), false);
  f.gw->end(id);
  auto out = actors::await_calls(self, *f.gw, {id}, 6s)[id];
  REQUIRE_FALSE(out.error);
  REQUIRE(out.messages.size() == 20);
  for (int i = 0; i < 20; ++i) CHECK(response_number(out.messages[i]) == i * 3);
}

TEST_CASE("a cancel from the caller reaches the server", "[integration]") {
  Fixture f;
  caf::scoped_actor self{*f.sys};
  auto before = actors::call_unary(self, *f.gw, f.peer, "test.rpc_cancelled", test_request(0), 5s);
  REQUIRE(before.ok());
  auto id = f.gw->open(self, f.peer, "test.rpc_forever", pb::SERVER_STREAM, 10s, test_request(0), true);
  // Wait for the stream to flow, then cancel.
  int seen = 0;
  self->receive_while([&] { return seen < 3; })([&](actors::Delivery& d) {
    if (d.call == id && d.has_message) ++seen;
  });
  f.gw->cancel(id, "test is done");
  int after = response_number(*before);
  for (int i = 0; i < 100 && after == response_number(*before); ++i) {
    std::this_thread::sleep_for(20ms);
    auto r = actors::call_unary(self, *f.gw, f.peer, "test.rpc_cancelled", test_request(0), 5s);
    REQUIRE(r.ok());
    after = response_number(*r);
  }
  CHECK(after == response_number(*before) + 1);
}

TEST_CASE("a cancel from the server reaches the caller", "[integration]") {
  Fixture f;
  caf::scoped_actor self{*f.sys};
  auto id = f.gw->open(self, f.peer, "test.rpc_cancel_me", pb::SERVER_STREAM, 5s, test_request(0), true);
  auto out = actors::await_calls(self, *f.gw, {id}, 6s)[id];
  REQUIRE(out.error);
  CHECK(out.error->code == errc::cancelled);
  CHECK_THAT(out.error->message, Catch::Contains("the server cancelled this call"));
  CHECK(out.messages.size() == 1);
}

TEST_CASE("an expired deadline ends the call with deadline_exceeded", "[integration]") {
  Fixture f;
  caf::scoped_actor self{*f.sys};
  auto r = actors::call_unary(self, *f.gw, f.peer, "test.rpc_sleep", test_request(1500), 200ms);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == errc::deadline_exceeded);
  // The connection is still good.
  auto ok = actors::call_unary(self, *f.gw, f.peer, "test.rpc_square", test_request(7), 5s);
  REQUIRE(ok.ok());
  CHECK(response_number(*ok) == 49);
}

TEST_CASE("an unknown handle comes back as an error naming it", "[integration]") {
  Fixture f;
  caf::scoped_actor self{*f.sys};
  auto r = actors::call_unary(self, *f.gw, f.peer, "test.no_such_thing", test_request(1), 5s);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == errc::not_found);
  CHECK_THAT(r.error().message, Catch::Contains("test.no_such_thing"));
}

TEST_CASE("handler errors and exceptions come back as error frames", "[integration]") {
  Fixture f;
  caf::scoped_actor self{*f.sys};
  auto thrown = actors::call_unary(self, *f.gw, f.peer, "test.rpc_throw", test_request(1), 5s);
  REQUIRE_FALSE(thrown.ok());
  CHECK(thrown.error().code == errc::handler_error);
  CHECK_THAT(thrown.error().message, Catch::Contains("boom"));
  auto failed = actors::call_unary(self, *f.gw, f.peer, "test.rpc_fail", test_request(3), 5s);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().code == errc::invalid_argument);
  CHECK_THAT(failed.error().message, Catch::Contains("odd number 3"));
  auto fine = actors::call_unary(self, *f.gw, f.peer, "test.rpc_fail", test_request(4), 5s);
  REQUIRE(fine.ok());
  CHECK(response_number(*fine) == 4);
}

TEST_CASE("many calls in flight at once on one peer", "[integration]") {
  Fixture f;
  caf::scoped_actor self{*f.sys};
  std::set<actors::CallId> ids;
  std::map<actors::CallId, int> want;
  for (int i = 0; i < 200; ++i) {
    auto id = f.gw->unary(self, f.peer, "test.rpc_square", test_request(i), 10s);
    ids.insert(id);
    want[id] = i * i;
  }
  auto out = actors::await_calls(self, *f.gw, ids, 15s);
  for (auto& [id, o] : out) {
    REQUIRE_FALSE(o.error);
    REQUIRE(o.messages.size() == 1);
    CHECK(response_number(o.messages[0]) == want[id]);
  }
}

TEST_CASE("many calls in flight at once across several peers", "[integration]") {
  Fixture f;
  auto second = testing::start_test_server({"--mode", "tcp"});
  auto third = testing::start_test_server({"--mode", "tcp"});
  const std::vector<std::string> peers{f.peer, second.second, third.second};
  caf::scoped_actor self{*f.sys};
  std::set<actors::CallId> ids;
  std::map<actors::CallId, int> want;
  for (int i = 0; i < 300; ++i) {
    auto id = f.gw->unary(self, peers[i % 3], "test.rpc_square", test_request(i), 10s);
    ids.insert(id);
    want[id] = i * i;
  }
  auto out = actors::await_calls(self, *f.gw, ids, 15s);
  REQUIRE(out.size() == 300);
  for (auto& [id, o] : out) {
    REQUIRE_FALSE(o.error);
    REQUIRE(o.messages.size() == 1);
    CHECK(response_number(o.messages[0]) == want[id]);
  }
}
