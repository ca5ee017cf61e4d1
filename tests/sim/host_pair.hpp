#pragma once
/// Two hosts of a test, "a" and "b", added to a world of their own over one link model.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>

#include "sim/world.hpp"

namespace apiary::testing {

/// A world holding two nodes, "a" and "b", each a `Host` the test reaches through `a`
/// and `b`; every link is `link`. The nodes are added, not started.
template <class Host>
struct HostPair {
  sim::World world;
  Host* a = nullptr;
  Host* b = nullptr;
  HostPair(std::uint64_t seed, sim::LinkModel link) : world(seed) {
    REQUIRE(world.network().set_default(link).ok());
    auto ha = std::make_unique<Host>();
    auto hb = std::make_unique<Host>();
    a = ha.get();
    b = hb.get();
    REQUIRE(world.add_node("a", std::move(ha)).ok());
    REQUIRE(world.add_node("b", std::move(hb)).ok());
  }
};

}  // namespace apiary::testing
