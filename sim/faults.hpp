#pragma once
/// Fault injectors: schedule failures into a World, each drawing only from the World's
/// Rng so a seed replays them.
#include <cstddef>
#include <memory>
#include <vector>

#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/world.hpp"

namespace apiary::sim {

/// Crashes node `addr` at virtual time `at`. Error: unknown node.
[[nodiscard]] Status kill_at(World& world, const core::PeerAddr& addr, core::TimePoint at);

/// One crash a fault injector scheduled.
struct Kill {
  core::PeerAddr addr;
  core::TimePoint at{};
};

/// Crashes `count` distinct nodes chosen by the World's Rng from `candidates`, each at a
/// time drawn uniformly from [from, until] (attrition, as FoundationDB's Attrition
/// workload); returns the crashes in the order chosen. Error: count larger than the
/// candidates, or until < from.
[[nodiscard]] Result<std::vector<Kill>> kill_random(World& world, std::vector<core::PeerAddr> candidates,
                                                    std::size_t count, core::TimePoint from, core::TimePoint until);

/// Restarts node `addr` at `at` with host `fresh` (a crash, then a fresh start; see
/// World::restart_node). Error: unknown node, no host.
[[nodiscard]] Status restart_at(World& world, const core::PeerAddr& addr, core::TimePoint at,
                                std::unique_ptr<Host> fresh);

/// Clogs both directions between `a` and `b` from `at` for `span`: messages sent meanwhile
/// arrive when the clog ends (FoundationDB's RandomClogging, one link). Error: span < 0.
[[nodiscard]] Status clog_at(World& world, const core::PeerAddr& a, const core::PeerAddr& b, core::TimePoint at,
                             core::Duration span);

/// Partitions `side_a` from `side_b` from `at` for `span`: every message between them
/// sent meanwhile is lost (calls time out). Error: span < 0, an empty side.
[[nodiscard]] Status partition_at(World& world, std::vector<core::PeerAddr> side_a, std::vector<core::PeerAddr> side_b,
                                  core::TimePoint at, core::Duration span);

}  // namespace apiary::sim
