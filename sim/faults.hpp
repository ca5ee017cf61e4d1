#pragma once
/// Fault injectors: schedule failures into a World, each drawing only from the World's
/// Rng so a seed replays them.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
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

/// A crash on cue, for faults tied to progress rather than to a time (a replica killed
/// when it begins step k): `victim` crashes the first time `cue()` holds, checked after
/// every event; `what()` says what was killed, for the run's report.
struct CuedKill {
  core::PeerAddr victim;
  std::function<bool()> cue;
  std::function<std::string()> what;
  /// What follows the kill, given its time (e.g. a restart_at of a fresh host); optional.
  std::function<void(core::TimePoint)> then = nullptr;
};

/// How a run under cued kills ended.
struct CuedRun {
  bool done = false;                  ///< `done()` held (else the World stalled or passed max_time)
  std::vector<std::string> killed;    ///< what each fired kill said, in order
};

/// Runs `world` until `done()` holds, nothing is left to happen or its time passes
/// `max_time`, firing each of `kills` once on its cue; peers of a killed node see its
/// connections break after `detection` (the World's failure detector).
[[nodiscard]] CuedRun run_with_cued_kills(World& world, std::vector<CuedKill> kills, const std::function<bool()>& done,
                                          core::TimePoint max_time, core::Duration detection);

}  // namespace apiary::sim
