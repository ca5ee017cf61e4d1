#pragma once
/// DHT nodes over UCX on one actor system: what the facades under test (averagers,
/// optimizers) run beside.
#include <chrono>
#include <memory>
#include <vector>

#include <catch2/catch.hpp>

#include "api/dht.hpp"
#include "tests/support/test_system.hpp"

namespace apiary::testing {

/// DHT nodes on one actor system, each bootstrapped from the first; stopped on destruction.
struct DhtPeers {
  TestSystem t;
  std::vector<std::unique_ptr<Dht>> dhts;

  /// Starts one more node (operations wait 1 s for answers); fails the test if it does not start.
  Dht& add() {
    DhtOptions d;
    d.system = &t.sys;
    d.node.wait_timeout = std::chrono::seconds(1);
    if (!dhts.empty()) d.initial_peers = dhts[0]->visible_addrs();
    auto dht = Dht::start(d);
    REQUIRE(dht.ok());
    dhts.push_back(std::move(*dht));
    return *dhts.back();
  }
  ~DhtPeers() {
    for (auto& d : dhts) d->stop();
  }
};

}  // namespace apiary::testing
