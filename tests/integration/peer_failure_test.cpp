// Peers dying or freezing mid-call, over UCX between real processes, in both
// transport modes. A killed process closes its sockets, which UCX reports (PEER error
// mode on tcp; the connection manager's socket on shm): for tcp the keepalive timeout
// is set past every wait here, so only UCX can end the call. A frozen process
// (SIGSTOP) keeps its sockets open and UCX reports nothing: only apiary's keepalives,
// short in those cases, can end the call. Nothing is timed: calls carry long deadlines
// and the tests assert which error ended them, so a deadline firing instead of a
// peer_down fails the test.
#include <catch2/catch.hpp>

#include <csignal>

#include "actors/rpc.hpp"
#include "test.pb.h"
#include "tests/support/test_messages.hpp"
#include "tests/support/process.hpp"
#include "tests/support/test_services.hpp"
#include "tests/support/test_system.hpp"

using namespace apiary;
using namespace std::chrono_literals;
using testing::response_number;
using testing::test_request;

namespace {

/// Short keepalives wherever UCX may not notice the fault (see the top of this file).
/// A 2 s timeout, not less: a loaded machine must not make a live peer look dead.
bool short_keepalives(const std::string& mode, const std::string& fault) { return mode == "shm" || fault == "freeze"; }

/// Transport settings for a test in `mode` facing `fault` ("kill" or "freeze").
transport::Config transport_for(const std::string& mode, const std::string& fault) {
  transport::Config t;
  t.mode = mode == "shm" ? transport::Mode::shm : transport::Mode::tcp;
  t.keepalive_interval = short_keepalives(mode, fault) ? 250ms : 30s;
  t.keepalive_timeout = short_keepalives(mode, fault) ? 2s : 120s;
  return t;
}

/// rpc_test_server options for the same settings (it times out at 4 intervals).
std::vector<std::string> server_args(const std::string& mode, const std::string& fault) {
  return {"--mode", mode, "--keepalive-ms", short_keepalives(mode, fault) ? "500" : "30000"};
}

/// Kills (SIGKILL) or freezes (SIGSTOP) `p`.
void inflict(testing::Process& p, const std::string& fault) {
  if (fault == "kill") {
    p.kill(SIGKILL);
    REQUIRE(p.wait(10s) == 128 + SIGKILL);
  } else {
    p.kill(SIGSTOP);
  }
}

/// Waits until `n` messages of call `id` arrived (or `patience` passed); returns how many did.
int await_messages(caf::scoped_actor& self, actors::CallId id, int n, std::chrono::milliseconds patience) {
  int seen = 0;
  bool over = false;
  const auto give_up = std::chrono::steady_clock::now() + patience;
  while (seen < n && !over && std::chrono::steady_clock::now() < give_up) {
    self->receive(
        [&](actors::Delivery& d) {
          if (d.call != id) return;
          if (d.has_message) ++seen;
          over = d.final;
        },
        caf::after(100ms) >> [] {});
  }
  return seen;
}

/// Calls test.rpc_cancelled at `peer`: how many calls that server saw end early.
int cancelled_count(caf::scoped_actor& self, actors::Gateway& gw, const std::string& peer) {
  auto r = actors::call_unary(self, gw, peer, "test.rpc_cancelled", test_request(0), 20s);
  REQUIRE(r.ok());
  return response_number(*r);
}

/// Stops gateways when a test ends, passed or not: services hold their gateway, and
/// the actor system waits for them on shutdown.
struct StopAll {
  std::vector<std::shared_ptr<actors::Gateway>> gateways;
  std::shared_ptr<actors::Gateway> add(Result<std::shared_ptr<actors::Gateway>> started) {
    REQUIRE(started.ok());
    gateways.push_back(*started);
    return *started;
  }
  ~StopAll() {
    for (auto& g : gateways) g->stop();
  }
};

}  // namespace

TEST_CASE("a server killed or frozen mid-stream ends the call with peer_down", "[integration]") {
  const std::string mode = GENERATE(as<std::string>{}, "tcp", "shm");
  const std::string fault = GENERATE(as<std::string>{}, "kill", "freeze");
  INFO("mode " << mode << ", fault " << fault);
  testing::TestSystem t;
  auto& sys = t.sys;
  auto [server, peer] = testing::start_test_server(server_args(mode, fault));
  actors::GatewayConfig gc;
  gc.transport = transport_for(mode, fault);
  StopAll stop_all;
  auto gw = stop_all.add(actors::Gateway::start(sys, gc));
  caf::scoped_actor self{sys};

  auto id = gw->open(self, peer, "test.rpc_forever", pb::SERVER_STREAM, 30s, test_request(0), true);
  REQUIRE(await_messages(self, id, 3, 20s) == 3);
  inflict(*server, fault);

  auto out = actors::await_calls(self, *gw, {id}, 40s)[id];
  server->kill(SIGKILL);  // a frozen one too
  REQUIRE(out.error);
  INFO(out.error->what());
  CHECK(out.error->code == errc::peer_down);
  if (fault == "freeze") CHECK_THAT(out.error->message, Catch::Contains("keepalive"));
}

TEST_CASE("a caller killed or frozen mid-stream is noticed, and the server keeps serving", "[integration]") {
  const std::string mode = GENERATE(as<std::string>{}, "tcp", "shm");
  const std::string fault = GENERATE(as<std::string>{}, "kill", "freeze");
  INFO("mode " << mode << ", fault " << fault);
  testing::TestSystem t;
  auto& sys = t.sys;
  actors::GatewayConfig gc;
  gc.transport = transport_for(mode, fault);
  StopAll stop_all;
  auto server = stop_all.add(actors::Gateway::start(sys, gc));
  testing::install_test_services(sys, server);
  const std::string address = server->address();
  auto probe = stop_all.add(actors::Gateway::start(sys, gc));
  caf::scoped_actor self{sys};
  const int before = cancelled_count(self, *probe, address);

  // A client process streams from this process's server, then dies or freezes.
  std::vector<std::string> argv{testing::sibling_executable("rpc_test_server")};
  for (auto& a : server_args(mode, fault)) argv.push_back(a);
  argv.insert(argv.end(), {"--call-forever", address});
  testing::Process caller(argv);
  REQUIRE(caller.read_line(30s).value_or("<no output>") == "streaming");
  inflict(caller, fault);

  // The server ends the orphaned stream (peer_down counts as cancelled). Only noticing
  // the death ends it: its deadline is minutes away.
  int after = before;
  for (int i = 0; i < 300 && after == before; ++i) {
    std::this_thread::sleep_for(100ms);
    after = cancelled_count(self, *probe, address);
  }
  caller.kill(SIGKILL);  // a frozen one too
  CHECK(after == before + 1);

  // A new client is served, and so is the one that was there all along.
  auto fresh = stop_all.add(actors::Gateway::start(sys, gc));
  auto sq = actors::call_unary(self, *fresh, address, "test.rpc_square", test_request(11), 20s);
  REQUIRE(sq.ok());
  CHECK(response_number(*sq) == 121);
  auto sq2 = actors::call_unary(self, *probe, address, "test.rpc_square", test_request(13), 20s);
  REQUIRE(sq2.ok());
  CHECK(response_number(*sq2) == 169);
}
