// The gateway actor: request/then access to RPC, over the in-process transport.
#include <catch2/catch.hpp>

#include "actors/gateway_actor.hpp"
#include "actors/rpc.hpp"
#include "tests/support/test_messages.hpp"
#include "tests/support/test_services.hpp"
#include "tests/support/test_system.hpp"

using namespace apiary;
using namespace std::chrono_literals;

TEST_CASE("the gateway actor serves and calls by message", "[actor]") {
  testing::TestSystem t;
  auto& sys = t.sys;
  auto server = testing::start_local_gateway(sys);
  auto client = testing::start_local_gateway(sys);
  testing::install_test_services(sys, server);
  auto front = actors::spawn_gateway_actor(sys, client);

  caf::scoped_actor self{sys};
  const Buffer req = testing::test_request(12);
  Result<Buffer> got = make_error(errc::internal, "no answer");
  self->request(front, 5s, actors::call_atom::value, server->address(), std::string("test.rpc_square"), req,
                caf::timespan{2s})
      .receive([&](Result<Buffer>& r) { got = std::move(r); }, [](caf::error&) {});
  REQUIRE(got.ok());
  CHECK(testing::response_number(*got) == 144);

  // Errors come back as the Result's error, with the remote message.
  self->request(front, 5s, actors::call_atom::value, server->address(), std::string("test.nope"), req,
                caf::timespan{2s})
      .receive([&](Result<Buffer>& r) { got = std::move(r); }, [](caf::error&) {});
  REQUIRE_FALSE(got.ok());
  CHECK(got.error().code == errc::not_found);
  CHECK_THAT(got.error().message, Catch::Contains("test.nope"));

  // Handles registered through a gateway actor are served.
  auto echo = actors::serve_unary(sys, server, "test.unused", [](const actors::Delivery& d) -> Result<Buffer> {
    return d.data;
  });
  auto server_front = actors::spawn_gateway_actor(sys, server);
  self->send(server_front, actors::serve_atom::value, std::string("test.via_actor"), echo);
  for (int attempt = 0; attempt < 50; ++attempt) {  // the registration is asynchronous
    self->request(front, 5s, actors::call_atom::value, server->address(), std::string("test.via_actor"),
                  Buffer::copy_of("hello"), caf::timespan{2s})
        .receive([&](Result<Buffer>& r) { got = std::move(r); }, [](caf::error&) {});
    if (got.ok() || got.error().code != errc::not_found) break;
    std::this_thread::sleep_for(20ms);
  }
  REQUIRE(got.ok());
  CHECK(got->view() == "hello");
  caf::anon_send_exit(front, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(server_front, caf::exit_reason::user_shutdown);
  server->stop();
}

TEST_CASE("a call on a stopped gateway fails at once", "[actor]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto gw = testing::start_local_gateway(sys);
  gw->stop();
  caf::scoped_actor self{sys};
  auto r = actors::call_unary(self, *gw, "127.0.0.1:1", "test.rpc_square", Buffer{}, 5s);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == errc::unavailable);
  CHECK_THAT(r.error().message, Catch::Contains("stopped"));
}
