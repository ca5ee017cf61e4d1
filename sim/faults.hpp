#pragma once
/// Fault injectors: schedule failures into a World, each drawing only from the World's
/// Rng so a seed replays them.
#include <cstddef>
#include <vector>

#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/world.hpp"

namespace apiary::sim {

/// Crashes node `addr` at virtual time `at`. Error: unknown node.
[[nodiscard]] Status kill_at(World& world, const core::PeerAddr& addr, core::TimePoint at);

/// Crashes `count` distinct nodes chosen by the World's Rng from `candidates`, each at a
/// time drawn uniformly from [from, until]; returns the chosen addresses (in
/// the order chosen). Error: count larger than the candidates, or until < from.
[[nodiscard]] Result<std::vector<core::PeerAddr>> kill_random(
    World& world, std::vector<core::PeerAddr> candidates, std::size_t count,
    core::TimePoint from, core::TimePoint until);

}  // namespace apiary::sim
