#pragma once
/// Two hosts of a test, addr_a and addr_b, added to a world of their own over one link model.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>

#include "sim/world.hpp"
#include "tests/support/peer_addr.hpp"

namespace apiary::testing {

/// The addresses of the pair's nodes "a" and "b".
inline const messages::PeerAddress addr_a = test::test_addr(1);
inline const messages::PeerAddress addr_b = test::test_addr(2);

/// A world holding two nodes, addr_a and addr_b, each a `Host` the test reaches through `a`
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
    REQUIRE(world.add_node(addr_a, std::move(ha)).ok());
    REQUIRE(world.add_node(addr_b, std::move(hb)).ok());
  }
};

}  // namespace apiary::testing
