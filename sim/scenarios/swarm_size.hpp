#pragma once
/// What the simulated swarms (ping_swarm.hpp, dht_swarm.hpp) share about their size and
/// addresses: node i listens on 10.A.B.C (i's low 24 bits), so a swarm holds at most
/// 2^24 nodes.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/effects.hpp"
#include "messages/result.hpp"

namespace apiary::sim::scenarios {

/// The most nodes a swarm's addresses tell apart (the 10.0.0.0/8 hosts).
inline constexpr std::size_t k_max_swarm_nodes = std::size_t{1} << 24;

/// Swarm node `i`'s address: /ip4/10.A.B.C/tcp/`port`, naming `peer` when given
/// (i < k_max_swarm_nodes). Simulated addresses are never dialled.
[[nodiscard]] core::PeerAddr swarm_address(std::size_t i, std::uint16_t port,
                                           std::optional<messages::PeerId> peer = std::nullopt);

/// Ok when a swarm of `nodes` can be built: at least 1, at most k_max_swarm_nodes. The
/// error names the `options` field to set and the address function `addr` that limits it.
[[nodiscard]] Status check_swarm_size(std::size_t nodes, const char* options, const char* addr);

}  // namespace apiary::sim::scenarios
