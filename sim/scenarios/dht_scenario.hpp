#pragma once
/// The DHT scenario: a DhtSwarm joins, then K stores and K gets of those keys run from
/// random live nodes while a fraction of the nodes crash (optionally replaced by fresh
/// joiners), over links with per-link latencies and message loss. Workload, fault
/// injector and checker figures in one run; the same config (seed included) gives the
/// same trace hash.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/dht/node.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"
#include "sim/world.hpp"

namespace apiary::sim::scenarios {

/// The steps of a run, in order; the scenario reports each as it begins.
enum class DhtPhase { bootstrap, stores, gets, done };

/// What to run.
struct DhtScenarioConfig {
  std::uint64_t seed = 1;        ///< seeds the World (ids, picks, kills, link latencies)
  std::size_t nodes = 1000;      ///< swarm size (>= 1)
  /// Fraction in [0, 1) of the initial nodes that crash: half (rounded up) at random
  /// times during the store phase, the rest during the get phase.
  double churn = 0.1;
  /// Each crashed node is replaced by a fresh node joining at the same moment.
  bool replace_killed = false;
  core::Duration min_latency = std::chrono::milliseconds(1);   ///< one-way, per link
  core::Duration max_latency = std::chrono::milliseconds(50);  ///< one-way, per link
  double loss = 0.0;             ///< probability in [0, 1] that a message is dropped
  std::size_t keys = 1000;       ///< keys stored (>= 1), one store operation each
  std::size_t gets = 1000;       ///< gets (>= 1); get i asks for key i mod keys
  /// Between two consecutive stores, and two consecutive gets, of the workload.
  core::Duration op_interval = std::chrono::milliseconds(10);
  /// Node i of the initial swarm starts at i * start_interval.
  core::Duration start_interval = std::chrono::milliseconds(5);
  std::size_t bootstrap_peers = 3;  ///< random earlier nodes each node bootstraps from
  /// After the last operation of a phase is issued: the longest wait for the phase's
  /// operations to finish before the next phase starts anyway.
  core::Duration phase_timeout = std::chrono::seconds(120);
  double ttl = 3600.0;           ///< seconds each stored value lives
  double dht_epoch = 1.7e9;      ///< DHT time (s) at virtual time 0
  core::dht::NodeConfig node{};  ///< every node's config (its seed is set per node)
  /// Called as each phase begins (outside the simulation: e.g. to read a wall clock).
  std::function<void(DhtPhase)> on_phase;
};

/// Checks a DhtScenarioConfig; the error names the bad field, its value and the range.
[[nodiscard]] Status validate(const DhtScenarioConfig& config);

/// Hop statistics of the gets that found their value through the network.
struct HopStats {
  std::size_t samples = 0;  ///< gets with hops >= 1
  double mean = 0.0;
  std::size_t p50 = 0;
  std::size_t p99 = 0;
  std::size_t max = 0;
};

/// What a run measured.
struct DhtScenarioReport {
  std::uint64_t seed = 0;
  std::uint64_t trace_hash = 0;
  std::size_t nodes = 0;               ///< initial swarm size
  std::size_t killed = 0;              ///< nodes crashed by the fault injector
  std::size_t joined = 0;              ///< fresh nodes that replaced crashed ones
  std::size_t bootstrap_failed = 0;    ///< nodes whose bootstrap reported an error
  std::size_t stores = 0;              ///< stores issued
  std::size_t stores_done = 0;         ///< stores that finished
  std::size_t stores_ok = 0;           ///< stores accepted by at least one replica
  std::size_t stores_aborted = 0;      ///< stores whose issuing node crashed first
  double replicas_per_store = 0.0;     ///< mean replicas that accepted a finished store
  std::size_t gets = 0;                ///< gets issued
  std::size_t gets_done = 0;           ///< gets that finished
  std::size_t gets_ok = 0;             ///< gets that returned the stored value
  std::size_t gets_aborted = 0;        ///< gets whose issuing node crashed first
  std::size_t gets_local = 0;          ///< gets served by the issuing node itself (0 hops)
  std::size_t gets_alive = 0;          ///< finished gets of keys with a live replica
  std::size_t gets_alive_ok = 0;       ///< ... that returned the stored value
  std::size_t keys_without_replica = 0;  ///< keys held after the stores whose every holder then crashed
  std::size_t keys_never_held = 0;       ///< keys no node held after the stores (their store's issuer crashed first)
  HopStats hops;                       ///< over the gets that found their value remotely
  double requests_per_store = 0.0;     ///< mean OpResult::requests of finished stores
  double requests_per_get = 0.0;       ///< mean OpResult::requests of finished gets
  double calls_per_store = 0.0;        ///< World calls in the store phase / stores issued
  double calls_per_get = 0.0;          ///< World calls in the get phase / gets issued
  core::TimePoint virtual_time{};      ///< virtual time at the end of the run
  core::Duration store_phase{};        ///< virtual time the store phase took
  core::Duration get_phase{};          ///< virtual time the get phase took
  WorldStats world;                    ///< the World's counters at the end
  std::size_t anomalies = 0;           ///< World::anomalies() at the end (0 in a correct run)

  /// stores_ok / stores_done (0 when none finished).
  [[nodiscard]] double store_success() const;
  /// gets_ok / gets_done (0 when none finished).
  [[nodiscard]] double get_success() const;
  /// gets_alive_ok / gets_alive (1 when there are none: nothing was expected).
  [[nodiscard]] double get_success_alive() const;
};

/// Runs the scenario to the end. Errors: a config that fails validate(), or a swarm that
/// could not be built.
[[nodiscard]] Result<DhtScenarioReport> run_dht_scenario(const DhtScenarioConfig& config);

/// The report as a readable block of "name: value" lines (seed and trace hash included).
[[nodiscard]] std::string format_report(const DhtScenarioReport& report);

}  // namespace apiary::sim::scenarios
