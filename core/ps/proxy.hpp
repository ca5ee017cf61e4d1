#pragma once
/// A node's proxy cache of dense PS variables (`local_replication`, reference
/// autodist.md §3.3): the replicas of one node read a variable from a local copy,
/// and the copy is refreshed from the PS once per step, so a node pulls each variable
/// once per step however many local replicas it runs. In BSP the refresh for step s is
/// answered after the barrier of step s - 1, so every local read of step s sees the
/// PS value of version s.
///
/// Flow: a local replica calls read(); on a miss the first reader gets `pull` (the
/// owner sends one pull to the shard) and later readers get `wait`; on_refresh() stores
/// the shard's answer and releases every waiting reader.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "messages/result.hpp"

namespace apiary::core::ps {

/// A cached copy of a variable, shared by every read of it (never copied per reader).
using ProxyValues = std::shared_ptr<const std::vector<float>>;

/// What a read gets.
enum class ProxyOutcome {
  hit,   ///< served from the cache (values filled)
  pull,  ///< a miss: the caller must pull the variable for this step, then on_refresh
  wait,  ///< a miss with a pull already under way: on_refresh releases this reader
};

/// The answer to one read.
struct ProxyRead {
  ProxyOutcome outcome = ProxyOutcome::wait;  ///< see ProxyOutcome
  std::int64_t version = 0;                   ///< PS version of `values` (hit only)
  ProxyValues values;                         ///< the variable (hit only)
};

/// A waiting reader served by a refresh.
struct ProxyRelease {
  std::int32_t replica = 0;   ///< the local replica that read
  std::int64_t step = 0;      ///< the step it read for
  std::int64_t version = 0;   ///< PS version of `values`
  ProxyValues values;         ///< the variable
};

/// What a refresh does: readers it serves, and possibly the next pull to send (for
/// readers already waiting on a later step).
struct ProxyRefresh {
  std::vector<ProxyRelease> released;  ///< readers served, in the order they read
  std::int64_t pull_step = -1;         ///< >= 0: pull the variable for this step next
};

/// One node's cache over any number of variables.
class ProxyCache {
 public:
  /// Reads `variable` for `step` on behalf of local replica `replica`. While a pull is
  /// under way every miss waits, also one for a later step: the refresh then asks for
  /// the next pull.
  [[nodiscard]] ProxyRead read(std::int32_t replica, const std::string& variable, std::int64_t step);

  /// Stores the PS's answer to the pull for `step` and releases the readers it serves.
  /// Errors: protocol when no pull for `variable` is under way or the step differs.
  [[nodiscard]] Result<ProxyRefresh> on_refresh(const std::string& variable, std::int64_t step,
                                                             std::int64_t version, std::vector<float> values);

  /// The pull under way for `variable` failed: its readers are forgotten (their shell
  /// answers them with the error), and the next read pulls afresh.
  void on_failed(const std::string& variable);

  /// Pulls asked for so far (one per variable per step).
  [[nodiscard]] std::int64_t pulls() const { return pulls_; }

 private:
  struct Waiter {
    std::int32_t replica = 0;
    std::int64_t step = 0;
  };
  struct Entry {
    std::int64_t step = -1;     ///< the step the cached values were pulled for
    std::int64_t version = 0;   ///< their PS version
    ProxyValues values;         ///< the cached copy
    std::int64_t pending = -1;  ///< step of the pull under way, -1 when none
    std::vector<Waiter> waiters;
  };
  std::map<std::string, Entry> entries_;
  std::int64_t pulls_ = 0;
};

}  // namespace apiary::core::ps
