#include "sim/scenarios/swarm_size.hpp"

#include <fmt/format.h>

namespace apiary::sim::scenarios {

core::PeerAddr swarm_address(std::size_t i, std::uint16_t port, std::optional<messages::PeerId> peer) {
  return core::PeerAddr(messages::Multiaddr{fmt::format("10.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff),
                                            false, port, std::move(peer), {}});
}

Status check_swarm_size(std::size_t nodes, const char* options, const char* addr) {
  if (nodes == 0) {
    return make_error(errc::invalid_argument,
                      "expected a swarm of at least 1 node, got 0; set {}::nodes", options);
  }
  if (nodes > k_max_swarm_nodes) {
    return make_error(errc::invalid_argument,
                      "expected at most 2^24 nodes (the address space of {}), got {}; "
                      "use fewer nodes", addr, nodes);
  }
  return ok_status();
}

}  // namespace apiary::sim::scenarios
