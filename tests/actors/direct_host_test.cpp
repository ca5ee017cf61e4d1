// The transport-thread host (actors/direct_host.hpp) on the in-process transport: local
// calls complete, its timers fire with the transport's ticks, a Mux answers Asks between
// its roles, Asks cross to and from actor hosts, and a host that stops answers its
// callers with errc::cancelled.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <future>
#include <memory>

#include "actors/direct_host.hpp"
#include "actors/gateway.hpp"
#include "actors/role_actor.hpp"
#include "core/mux.hpp"
#include "messages/identity/multiaddr.hpp"
#include "tests/actors/worker_role.hpp"
#include "tests/support/test_system.hpp"

using namespace apiary;
using namespace apiary::core;
using namespace std::chrono_literals;
using apiary::testing::Worker;

namespace {

struct Fixture : testing::TestSystem {
  std::shared_ptr<actors::Gateway> gw = testing::start_local_gateway(sys);
  ~Fixture() { gw->stop(); }
  actors::RoleHost host(std::unique_ptr<Role> role, actors::RoleRoutes routes = {}) {
    return actors::spawn_role(sys, gw, std::move(role), actors::HostKind::transport_thread, std::move(routes));
  }
  /// The result of `f`, which must come within 10 s.
  static Result<Value> get(std::future<Result<Value>> f) {
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
    return f.get();
  }
};

/// Serves "test.echo" with its request; its local method "call" (args: the multiaddr of
/// a gateway serving it) makes one such call and completes with the answer.
class EchoCaller final : public Role {
 public:
  std::vector<std::string> handles() const override { return {"test.echo"}; }
  Effects on(TimePoint, Input input) override {
    if (auto* r = std::get_if<Request>(&input)) return {Reply{r->id, "echo:" + std::string(r->body.view())}};
    if (auto* c = std::get_if<LocalCall>(&input)) {
      op_ = c->op;
      return {unary_call(1, messages::PeerAddress::parse(*c->args.as<std::string>()).value(), "test.echo", "hi", 5s)};
    }
    if (auto* r = std::get_if<Response>(&input)) {
      if (!r->result) return {Complete{op_, r->result.error()}};
      return {Complete{op_, Value::of(*r->result)}};
    }
    return {};
  }

 private:
  OpId op_ = 0;
};

}  // namespace

TEST_CASE("a transport-thread host's call to its own gateway is answered at once and not lost", "[direct_host]") {
  // The answer is made while the call is being opened: it must wait until the host
  // knows the call's id.
  Fixture f;
  auto host = f.host(std::make_unique<EchoCaller>());
  auto self = messages::Multiaddr::from_host_port(f.gw->address());
  REQUIRE(self.ok());
  auto r = Fixture::get(actors::call_role(host, "", "call", Value::of(self->to_string())));
  REQUIRE(r.ok());
  CHECK(*r->as<std::string>() == "echo:hi");
  actors::stop_role(*f.gw, host, {"test.echo"});
}

TEST_CASE("a transport-thread host's local calls complete and an unknown method fails with not_found", "[direct_host]") {
  Fixture f;
  auto host = f.host(std::make_unique<Worker>());
  REQUIRE(host.direct());
  auto r = Fixture::get(actors::call_role(host, "", "double", Value::of(4)));
  REQUIRE(r.ok());
  CHECK(*r->as<int>() == 8);
  auto e = Fixture::get(actors::call_role(host, "", "triple", Value::of(4)));
  REQUIRE(!e.ok());
  CHECK(e.error().code == errc::not_found);
  CHECK(e.error().message.find("triple") != std::string::npos);
  actors::stop_role(*f.gw, host, {});
}

TEST_CASE("a transport-thread host fires its role's timer with the transport's ticks", "[direct_host]") {
  Fixture f;
  auto host = f.host(std::make_unique<Worker>(20ms));
  auto r = Fixture::get(actors::call_role(host, "", "later"));
  REQUIRE(r.ok());
  CHECK(*r->as<std::string>() == "fired");
  actors::stop_role(*f.gw, host, {});
}

TEST_CASE("a Mux on the transport thread answers one role's Ask with another's", "[direct_host]") {
  Fixture f;
  auto host = f.host(testing::worker_mux());
  auto r = Fixture::get(actors::call_role(host, "a", "ask", Value::of(std::string("b"))));
  REQUIRE(r.ok());
  CHECK(*r->as<int>() == 42);
  auto e = Fixture::get(actors::call_role(host, "a", "ask", Value::of(std::string("c"))));
  REQUIRE(!e.ok());
  CHECK(e.error().message.find("'c'") != std::string::npos);
  actors::stop_role(*f.gw, host, {});
}

TEST_CASE("Asks cross between an actor host and a transport-thread host both ways", "[direct_host]") {
  Fixture f;
  auto direct = f.host(std::make_unique<Worker>());
  auto actor = actors::spawn_role(f.sys, f.gw, std::make_unique<Worker>(), actors::HostKind::actor,
                                  actors::RoleRoutes{{"dht", direct}});
  auto asker = f.host(std::make_unique<Worker>(), actors::RoleRoutes{{"averager", actor}});
  auto to_direct = Fixture::get(actors::call_role(actor, "", "ask", Value::of(std::string("dht"))));
  REQUIRE(to_direct.ok());
  CHECK(*to_direct->as<int>() == 42);
  auto to_actor = Fixture::get(actors::call_role(asker, "", "ask", Value::of(std::string("averager"))));
  REQUIRE(to_actor.ok());
  CHECK(*to_actor->as<int>() == 42);
  actors::stop_role(*f.gw, direct, {});
  auto gone = Fixture::get(actors::call_role(actor, "", "ask", Value::of(std::string("dht"))));
  REQUIRE(!gone.ok());
  CHECK(gone.error().code == errc::cancelled);
  actors::stop_role(*f.gw, actor, {});
  actors::stop_role(*f.gw, asker, {});
}

TEST_CASE("a transport-thread host that stops answers its waiting callers and later calls with cancelled",
          "[direct_host]") {
  Fixture f;
  auto host = f.host(std::make_unique<Worker>());
  auto waiting = actors::call_role(host, "", "never");
  CHECK(waiting.wait_for(50ms) == std::future_status::timeout);
  actors::stop_role(*f.gw, host, {});
  auto r = Fixture::get(std::move(waiting));
  REQUIRE(!r.ok());
  CHECK(r.error().code == errc::cancelled);
  auto late = Fixture::get(actors::call_role(host, "", "double", Value::of(1)));
  REQUIRE(!late.ok());
  CHECK(late.error().code == errc::cancelled);
}
