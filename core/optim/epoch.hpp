#pragma once
/// The collaborative optimizer's decisions at each step (hivemind's Optimizer, reference
/// §7.2), pure: whether a peer must load the swarm's state, which epoch comes next, when
/// to begin matchmaking before the epoch ends, and whether an epoch averages the state.
/// apiary::Optimizer (api/optimizer.hpp) drives its averagers and tracker by them.
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace apiary::core::optim {

/// Whether a peer at `local_epoch` loads the state of peers before its next step. Once
/// per epoch, after a fresh read of the swarm's records (`check_sync` and
/// `fetched_this_epoch`), any epoch other than the swarm's; otherwise only a peer more
/// than one epoch behind (one that just missed the swarm's last step catches up by
/// taking part in the next).
[[nodiscard]] inline bool should_load_state(std::int64_t local_epoch, std::int64_t global_epoch, bool check_sync,
                                            bool fetched_this_epoch) {
  if (check_sync && fetched_this_epoch) return local_epoch != global_epoch;
  return local_epoch < global_epoch - 1;
}

/// The epoch a step at the boundary moves to: the next one, or the swarm's if it is
/// ahead.
[[nodiscard]] inline std::int64_t next_epoch(std::int64_t local_epoch, std::int64_t global_epoch) {
  return std::max(local_epoch + 1, global_epoch);
}

/// Whether the epoch `next` averages parameters and optimizer state: every `every`
/// epochs (>= 1), when some other peer is there to average with.
[[nodiscard]] inline bool should_average_state(std::int64_t next, std::int64_t every, std::size_t num_peers) {
  return num_peers > 1 && every >= 1 && next % every == 0;
}

/// Whether to begin matchmaking for the epoch's gradients now: the swarm's epoch is due
/// within `matchmaking_time` seconds (`eta_seconds` from now; it may be negative), some
/// other peer is there, and no round is scheduled yet.
[[nodiscard]] inline bool should_schedule(double eta_seconds, double matchmaking_time, std::size_t num_peers,
                                          bool scheduled) {
  return !scheduled && num_peers > 1 && eta_seconds <= matchmaking_time;
}

}  // namespace apiary::core::optim
