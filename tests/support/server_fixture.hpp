#pragma once
/// A test server process (rpc_test_server) plus a client gateway in this process: the
/// shape of most integration tests.
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/gateway.hpp"
#include "tests/support/process.hpp"

namespace apiary::testing {

struct ServerFixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<actors::Gateway> gw;  ///< the client gateway
  std::unique_ptr<Process> server;
  std::string peer;  ///< the server's "host:port"

  /// Starts the server with `server_args` (its --mode and --insecure are taken from `client`), then the
  /// client gateway with `client`.
  explicit ServerFixture(std::vector<std::string> server_args = {}, actors::GatewayConfig client = {});
  ~ServerFixture();
};

}  // namespace apiary::testing
