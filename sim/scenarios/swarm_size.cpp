#include "sim/scenarios/swarm_size.hpp"

#include <fmt/format.h>

namespace apiary::sim::scenarios {

std::string swarm_ip(std::size_t i) {
  return fmt::format("/ip4/10.{}.{}.{}", (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
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
