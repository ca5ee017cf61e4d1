#include "tests/support/server_fixture.hpp"

#include <stdexcept>

namespace apiary::testing {

ServerFixture::ServerFixture(std::vector<std::string> server_args, actors::GatewayConfig client) {
  cfg.set("work-stealing.moderate-poll-attempts", 0);
  sys = std::make_unique<caf::actor_system>(cfg);
  server_args.push_back("--mode");
  server_args.push_back(client.transport.mode == transport::Mode::shm ? "shm" : "tcp");
  if (client.transport.insecure) {
    server_args.push_back("--insecure");
    server_args.push_back("1");
  }
  auto started = start_test_server(server_args);
  server = std::move(started.first);
  peer = started.second;
  auto g = actors::Gateway::start(*sys, client);
  if (!g) throw std::runtime_error("client gateway did not start: " + g.error().what());
  gw = *g;
}

ServerFixture::~ServerFixture() {
  if (gw) gw->stop();
}

}  // namespace apiary::testing
