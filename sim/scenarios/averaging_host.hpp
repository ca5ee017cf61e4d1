#pragma once
/// One simulated averager: its own core::dht::Node (the swarm's DHT is made of these) and a
/// core::averaging::AveragerRole (matchmaking through that node, then the all-reduce)
/// averaging the peer's vector once per round. Inputs are routed by handle (the role's
/// handles to the role, the rest to the node) and by id (the role's ids start at
/// k_role_id_base). The role's DHT operations become node stores and gets:
/// key NodeId::of_str_key(group key), subkey msgpack bin of the peer id, value msgpack
/// bool. A peer's id is its World address.
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
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/host.hpp"
#include "sim/rng.hpp"

namespace apiary::sim::scenarios {

/// Call and timer ids below this are the DHT node's; the averager role's start here.
inline constexpr std::uint64_t k_role_id_base = std::uint64_t{1} << 48;
/// Timer ids of the modelled device's jobs (below the role's, above the DHT node's).
inline constexpr std::uint64_t k_device_timer_base = std::uint64_t{1} << 44;

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
  /// > 0: the part reductions run as device jobs (AveragerRoleConfig::deferred_reductions)
  /// on one modelled device per peer, one job at a time in arrival order, each taking
  /// inputs x values x this many ns of virtual time; 0: inline in the role, at once.
  double device_ns_per_value = 0;
};

/// One averager as a simulated node.
class AveragerHost : public Host {
 public:
  /// An averager at `self` (also its peer id) with DHT id `id`, averaging `values`,
  /// bootstrapping its DHT node from `bootstrap`; `seed` seeds its own generator.
  AveragerHost(core::dht::NodeId id, core::PeerAddr self, const AveragerSettings& settings,
               std::uint64_t seed, std::vector<float> values, std::vector<core::PeerAddr> bootstrap);

  [[nodiscard]] core::Effects on_start(core::TimePoint now) override;
  [[nodiscard]] core::Effects on_request(core::TimePoint now, core::RequestId id,
                                         const std::string& handle,
                                         const std::string& request) override;
  [[nodiscard]] core::Effects on_request_from(core::TimePoint now, core::RequestId id,
                                              const std::string& handle, const core::PeerAddr& from,
                                              const std::string& request) override;
  [[nodiscard]] core::Effects on_response(core::TimePoint now, core::CallId call,
                                          const Result<std::string>& response) override;
  [[nodiscard]] core::Effects on_timer(core::TimePoint now, core::TimerId id) override;
  [[nodiscard]] core::Effects on_message(core::TimePoint now, core::CallId call,
                                         const std::string& message) override;
  [[nodiscard]] core::Effects on_request_message(core::TimePoint now, core::RequestId id,
                                                 const Result<std::string>& message,
                                                 bool last) override;

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
  [[nodiscard]] const std::string& next_group_key() const { return role_.next_group_key(); }

 private:
  /// A matchmaking DHT operation in flight on the node.
  struct PendingDht {
    core::averaging::DhtOpId op = 0;
    bool declare = false;
  };

  core::Effects absorb(core::TimePoint now, core::averaging::AveragerEffects afx);
  void drain(core::TimePoint now, core::Effects& out);
  void on_outcome(Result<core::averaging::AveragerStepResult> outcome);
  [[nodiscard]] std::vector<core::averaging::Averager> averagers_of(
      core::TimePoint now, const std::optional<core::dht::FoundValue>& found) const;

  AveragerSettings settings_;
  Rng rng_;
  core::dht::Node node_;
  core::averaging::AveragerRole role_;
  std::vector<core::PeerAddr> bootstrap_;
  std::vector<float> values_;
  bool bootstrapped_ = false;

  std::size_t round_ = 0;
  std::map<core::dht::OpId, PendingDht> dht_ops_;
  core::dht::OpId next_op_ = 2;
  std::map<std::size_t, PeerRound> rounds_;
  std::map<core::TimerId, core::averaging::ReduceJob> device_jobs_;  ///< by the timer of their end
  core::TimerId next_device_timer_ = k_device_timer_base;
  core::TimePoint device_free_{};  ///< when the modelled device finishes its queue
};

}  // namespace apiary::sim::scenarios
