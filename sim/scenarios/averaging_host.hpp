#pragma once
/// One simulated averager: the generic RoleHost running a Mux of its own
/// core::dht::NodeRole ("dht": the swarm's DHT is made of these), a
/// core::averaging::AveragerRole ("averager": matchmaking through that node, then the
/// all-reduce) averaging the peer's vector once per round, and, when the settings model
/// one, a ModelledDevice ("device") that runs the part reductions. A peer's id is its
/// World address.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/averaging/averager_role.hpp"
#include "core/dht/node.hpp"
#include "core/effects.hpp"
#include "core/mux.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/role_host.hpp"

namespace apiary::sim::scenarios {

/// What one round did for one peer.
struct PeerRound {
  bool started = false;      ///< the peer began the round's step
  bool grouped = false;      ///< matchmaking found a group
  bool completed = false;    ///< the all-reduce finished and its delta was applied
  std::string group_id;      ///< the group's id (when grouped)
  std::size_t group_size = 0;  ///< members of the group (when grouped)
  std::size_t failed_peers = 0;  ///< failed senders + failed reducers seen by this peer
  std::string error;         ///< why the round did not complete, if it did not
};

/// Fixed settings of every averager of a run.
struct AveragerSettings {
  /// The DHT node's config (its seed is set per peer): hivemind's defaults, but calls
  /// wait 1 s instead of 3 s (round trips here take at most 200 ms), so a dead replica
  /// delays a declaration less than the matchmaking time.
  core::dht::NodeConfig node = [] {
    core::dht::NodeConfig config;
    config.wait_timeout = std::chrono::seconds(1);
    return config;
  }();
  double dht_epoch = 1.7e9;      ///< DHT time (s) at virtual time 0
  std::int64_t part_size_bytes = 1024;  ///< all-reduce part size (bytes)
  core::Duration sender_timeout = std::chrono::seconds(5);    ///< all-reduce
  core::Duration reducer_timeout = std::chrono::seconds(10);  ///< all-reduce
  core::Duration call_timeout = std::chrono::seconds(12);     ///< all-reduce part streams
  /// > 0: the part reductions run on one modelled device per peer (ModelledDevice), one
  /// job at a time in arrival order, each taking inputs x values x this many ns of
  /// virtual time; 0: inline in the role, at once.
  double device_ns_per_value = 0;
  /// Average the values by PowerSGD (one tensor, its matrix the config's first).
  std::optional<core::averaging::PowerSgdConfig> powersgd;
};

/// One averager as a simulated node.
class AveragerHost final : public RoleHost<core::Mux> {
 public:
  /// An averager at `self` (also its peer id) with DHT id `id`, averaging `values`,
  /// bootstrapping its DHT node from `bootstrap`; `seed` seeds its own generator.
  AveragerHost(core::dht::NodeId id, core::PeerAddr self, const AveragerSettings& settings,
               std::uint64_t seed, std::vector<float> values, std::vector<core::PeerAddr> bootstrap);

  /// Starts the roles, then bootstraps the DHT node (a local operation, as a process's Dht does).
  [[nodiscard]] core::Effects on_start(core::TimePoint now) override;

  /// Begins round `round` (numbered from 0, increasing): abandons what is left of the
  /// previous one and starts a matchmaking step with `params`. Returns the effects for
  /// World::submit.
  [[nodiscard]] core::Effects begin_round(core::TimePoint now, std::size_t round,
                                          core::averaging::StepParams params);

  /// The peer's vector now.
  [[nodiscard]] const std::vector<float>& values() const { return values_; }
  /// What round `round` did (a default PeerRound if the peer never began it).
  [[nodiscard]] PeerRound round(std::size_t round) const;
  /// True once the DHT node's bootstrap finished (ok or not).
  [[nodiscard]] bool bootstrapped() const { return bootstrapped_; }
  /// The group key to use next (Moshpit: the last group's next key, else "").
  [[nodiscard]] const std::string& next_group_key() const { return averager_->next_group_key(); }

 private:
  void on_outcome(std::size_t round, Result<core::Value> outcome);

  AveragerSettings settings_;
  const core::averaging::AveragerRole* averager_ = nullptr;
  std::vector<core::PeerAddr> bootstrap_;
  std::vector<float> values_;
  bool bootstrapped_ = false;
  std::map<std::size_t, PeerRound> rounds_;
};

}  // namespace apiary::sim::scenarios
