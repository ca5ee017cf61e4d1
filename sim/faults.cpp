#include "sim/faults.hpp"

#include <cstdint>
#include <utility>

namespace apiary::sim {

Status kill_at(World& world, const core::PeerAddr& addr, core::TimePoint at) {
  return world.kill_node(addr, at);
}

Result<std::vector<Kill>> kill_random(World& world, std::vector<core::PeerAddr> candidates, std::size_t count,
                                      core::TimePoint from, core::TimePoint until) {
  if (count > candidates.size()) {
    return make_error(errc::invalid_argument,
                      "expected at most {} nodes to kill (the candidates), got {}; lower "
                      "the count", candidates.size(), count);
  }
  if (until < from) {
    return make_error(errc::invalid_argument,
                      "expected a window with from <= until, got from={} ns until={} ns; "
                      "swap them", from.count(), until.count());
  }
  std::vector<Kill> chosen;
  const auto span = static_cast<std::uint64_t>((until - from).count()) + 1;
  for (std::size_t i = 0; i < count; ++i) {
    // Pick one of the remaining candidates, then its crash time.
    const auto pick = static_cast<std::size_t>(world.rng().uniform(candidates.size()));
    core::PeerAddr addr = std::move(candidates[pick]);
    candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(pick));
    const core::TimePoint at =
        from + core::Duration(static_cast<core::Duration::rep>(world.rng().uniform(span)));
    if (auto st = world.kill_node(addr, at); !st) return st.error();
    chosen.push_back(Kill{std::move(addr), at});
  }
  return chosen;
}

Status restart_at(World& world, const core::PeerAddr& addr, core::TimePoint at, std::unique_ptr<Host> fresh) {
  return world.restart_node(addr, at, std::move(fresh));
}

Status clog_at(World& world, const core::PeerAddr& a, const core::PeerAddr& b, core::TimePoint at,
               core::Duration span) {
  if (span < core::Duration::zero()) {
    return make_error(errc::invalid_argument, "expected a clog of >= 0 ns, got {} ns", span.count());
  }
  world.schedule(at, [a, b, until = at + span](World& w) {
    w.network().clog(a, b, until);
    w.network().clog(b, a, until);
  });
  return ok_status();
}

Status partition_at(World& world, std::vector<core::PeerAddr> side_a, std::vector<core::PeerAddr> side_b,
                    core::TimePoint at, core::Duration span) {
  if (span < core::Duration::zero()) {
    return make_error(errc::invalid_argument, "expected a partition of >= 0 ns, got {} ns", span.count());
  }
  if (side_a.empty() || side_b.empty()) {
    return make_error(errc::invalid_argument, "expected two non-empty sides to partition, got {} and {} nodes",
                      side_a.size(), side_b.size());
  }
  world.schedule(at, [a = std::move(side_a), b = std::move(side_b), until = at + span](World& w) {
    w.network().partition(a, b, until);
  });
  return ok_status();
}

CuedRun run_with_cued_kills(World& world, std::vector<CuedKill> kills, const std::function<bool()>& done,
                            core::TimePoint max_time, core::Duration detection) {
  CuedRun out;
  std::vector<bool> fired(kills.size(), false);
  while (!done()) {
    for (std::size_t i = 0; i < kills.size(); ++i) {
      if (fired[i] || !kills[i].cue()) continue;
      fired[i] = true;
      out.killed.push_back(kills[i].what());
      world.set_peer_down_detection(detection);
      (void)world.kill_node(kills[i].victim, world.now());
      if (kills[i].then) kills[i].then(world.now());
    }
    if (!world.step() || world.now() > max_time) return out;
  }
  out.done = true;
  return out;
}

}  // namespace apiary::sim
