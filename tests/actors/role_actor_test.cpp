// The generic actor host (actors/role_actor.hpp) under CAF's deterministic test
// coordinator: local calls complete in order, a Mux answers Asks between its roles, a
// timer armed by the role fires when the test says so, and a host that stops first
// answers its callers with errc::cancelled.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <future>
#include <memory>

#include "actors/gateway.hpp"
#include "actors/role_actor.hpp"
#include "actors/type_ids.hpp"
#include "core/mux.hpp"
#include "tests/actors/worker_role.hpp"
#include "tests/support/test_system.hpp"

using namespace apiary;
using namespace apiary::core;
using namespace std::chrono_literals;
using apiary::testing::Worker;

namespace {

struct Fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::shared_ptr<actors::Gateway> gw;
  Fixture() {
    cfg.set("scheduler.policy", caf::atom("testing"));
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    gw = testing::start_local_gateway(*sys);
  }
  ~Fixture() { gw->stop(); }
  /// An actor host of `role` (a Worker by default) on the gateway.
  caf::actor spawn(std::unique_ptr<Role> role = std::make_unique<Worker>(), actors::RoleRoutes routes = {}) {
    return actors::spawn_role_actor(*sys, gw, std::move(role), std::move(routes));
  }
  /// Calls `method` of `role` on `host` and runs the coordinator until nothing is left to do.
  std::future<Result<Value>> call(const caf::actor& host, const std::string& role, const std::string& method,
                                  Value args = {}) {
    auto f = actors::call_role(host, role, method, std::move(args));
    sched->run();
    return f;
  }
  /// call() of one that must still be waiting for its answer then.
  std::future<Result<Value>> pending_call(const caf::actor& host, const std::string& role, const std::string& method) {
    auto f = call(host, role, method);
    CHECK(!ready(f));
    return f;
  }
  /// Stops `host` and runs the coordinator until it has gone.
  void stop(const caf::actor& host) {
    caf::anon_send_exit(host, caf::exit_reason::user_shutdown);
    sched->run();
  }
  template <class T>
  static bool ready(std::future<T>& f) {
    return f.wait_for(0s) == std::future_status::ready;
  }
  /// The result of `f`, which must be ready.
  static Result<Value> take(std::future<Result<Value>>& f) {
    REQUIRE(ready(f));
    return f.get();
  }
  /// The value of type T that call result `r` holds (fails the test if the call failed).
  template <class T>
  static T value_of(const Result<Value>& r) {
    REQUIRE(r.ok());
    REQUIRE(r->as<T>() != nullptr);
    return *r->as<T>();
  }
  /// The error that call result `r` holds (fails the test if the call succeeded).
  static Error error_of(const Result<Value>& r) {
    REQUIRE(!r.ok());
    return r.error();
  }
};

}  // namespace

TEST_CASE("a hosted role's local calls complete, an unknown method with not_found", "[role_actor]") {
  Fixture f;
  auto host = f.spawn();
  auto twice = actors::call_role(host, "", "double", Value::of(4));
  auto bad = actors::call_role(host, "", "triple", Value::of(4));
  CHECK(!Fixture::ready(twice));  // nothing runs until the coordinator says so
  f.sched->run();
  CHECK(Fixture::value_of<int>(Fixture::take(twice)) == 8);
  const Error e = Fixture::error_of(bad.get());
  CHECK(e.code == errc::not_found);
  CHECK(e.message.find("triple") != std::string::npos);
  f.stop(host);
}

TEST_CASE("a role's timer fires when the clock is advanced, and completes its call", "[role_actor]") {
  Fixture f;
  auto host = f.spawn();
  auto later = f.pending_call(host, "", "later");
  f.sched->trigger_timeouts();
  f.sched->run();
  CHECK(Fixture::value_of<std::string>(Fixture::take(later)) == "fired");
  f.stop(host);
}

TEST_CASE("a hosted Mux answers one role's Ask with another's, and an unknown role with an error", "[role_actor]") {
  Fixture f;
  auto host = f.spawn(testing::worker_mux());
  auto asked = actors::call_role(host, "a", "ask", Value::of(std::string("b")));
  auto nobody = f.call(host, "a", "ask", Value::of(std::string("c")));
  CHECK(Fixture::value_of<int>(asked.get()) == 42);
  CHECK(Fixture::error_of(nobody.get()).message.find("'c'") != std::string::npos);
  f.stop(host);
}

TEST_CASE("a host that stops answers its waiting callers, and calls sent after, with cancelled", "[role_actor]") {
  Fixture f;
  auto host = f.spawn();
  auto waiting = f.pending_call(host, "", "never");
  f.stop(host);
  CHECK(Fixture::error_of(Fixture::take(waiting)).code == errc::cancelled);
  auto late = f.call(host, "", "double", Value::of(1));
  CHECK(Fixture::take(late).error().code == errc::cancelled);
}

TEST_CASE("an Ask for a role of another host of the process goes there, and a stopped one answers cancelled",
          "[role_actor]") {
  Fixture f;
  auto other = f.spawn();
  auto host = f.spawn(std::make_unique<Worker>(), actors::RoleRoutes{{"dht", other}});
  auto asked = f.call(host, "", "ask", Value::of(std::string("dht")));
  CHECK(Fixture::value_of<int>(Fixture::take(asked)) == 42);
  auto unrouted = f.call(host, "", "ask", Value::of(std::string("averager")));
  CHECK(unrouted.get().error().code == errc::not_found);

  f.stop(other);
  auto gone = f.call(host, "", "ask", Value::of(std::string("dht")));
  CHECK(Fixture::take(gone).error().code == errc::cancelled);
  f.stop(host);
}
