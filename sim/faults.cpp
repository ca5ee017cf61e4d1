#include "sim/faults.hpp"

#include <cstdint>
#include <utility>

namespace apiary::sim {

Status kill_at(World& world, const core::PeerAddr& addr, core::TimePoint at) {
  return world.kill_node(addr, at);
}

Result<std::vector<core::PeerAddr>> kill_random(World& world,
                                                std::vector<core::PeerAddr> candidates,
                                                std::size_t count, core::TimePoint from,
                                                core::TimePoint until) {
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
  std::vector<core::PeerAddr> chosen;
  const auto span = static_cast<std::uint64_t>((until - from).count()) + 1;
  for (std::size_t i = 0; i < count; ++i) {
    // Pick one of the remaining candidates, then its crash time.
    const auto pick = static_cast<std::size_t>(world.rng().uniform(candidates.size()));
    core::PeerAddr addr = std::move(candidates[pick]);
    candidates.erase(candidates.begin() + static_cast<std::ptrdiff_t>(pick));
    const core::TimePoint at =
        from + core::Duration(static_cast<core::Duration::rep>(world.rng().uniform(span)));
    if (auto st = world.kill_node(addr, at); !st) return st.error();
    chosen.push_back(std::move(addr));
  }
  return chosen;
}

}  // namespace apiary::sim
