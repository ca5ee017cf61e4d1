#pragma once
/// The actor system of a test that runs real actors, and gateways on the in-process
/// transport.
#include <memory>

#include <catch2/catch.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/gateway.hpp"

namespace apiary::testing {

/// `cfg` with the scheduler's idle workers polling without the 50 µs sleeps of CAF's
/// moderate phase (work-stealing.moderate-poll-attempts 0), as the nodes run (api/startup.cpp).
inline caf::actor_system_config& no_poll_sleeps(caf::actor_system_config& cfg) {
  cfg.set("work-stealing.moderate-poll-attempts", 0);
  return cfg;
}

/// An actor system for one test, configured by no_poll_sleeps().
struct TestSystem {
  caf::actor_system_config cfg;
  caf::actor_system sys{no_poll_sleeps(cfg)};
};

/// A gateway of `sys` on the in-process transport (Backend::local), started; fails the
/// test when it does not start.
inline std::shared_ptr<actors::Gateway> start_local_gateway(caf::actor_system& sys, actors::GatewayConfig gc = {}) {
  gc.backend = actors::Backend::local;
  auto gw = actors::Gateway::start(sys, gc);
  REQUIRE(gw.ok());
  return *gw;
}

}  // namespace apiary::testing
