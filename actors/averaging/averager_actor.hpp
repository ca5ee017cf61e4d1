#pragma once
/// The averager as an actor: a thin shell around core::averaging::AveragerRole that serves
/// the join stream and the part stream over the gateway, runs the role's calls and
/// timers, its DHT declarations and reads on a DHT actor (actors/dht/), and its part
/// reductions on a device actor (actors/device/) when it has one. Steps,
/// triggers, weight changes and cancels come as messages built by the functions below;
/// each step's outcome goes back through its own callback, exactly once (cancelled if the
/// actor stops first).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/device/device_actor.hpp"
#include "actors/gateway.hpp"
#include "core/averaging/averager_role.hpp"
#include "core/averaging/state_sharing.hpp"

namespace apiary::actors {

/// What an averager actor is made of.
struct AveragerActorConfig {
  /// The role's settings; role.peer_id is the averager's multiaddr with /p2p/<PeerID>
  /// (groupmates call it there), role.dht_epoch is the DHT epoch of the runtime (apiary::Runtime::dht_epoch).
  core::averaging::AveragerRoleConfig role;
  /// The DHT actor that stores declarations and reads group keys.
  caf::actor dht;
  /// Seeds the generator of group ids and member orders.
  std::uint64_t seed = 0;
  /// The averager's PeerID bytes, named as the caller of its calls (the callee then knows
  /// it as role.peer_id).
  std::string caller;
  /// Builds this peer's state stream (rpc_download_state messages) when a peer asks;
  /// null: the peer does not share its state (it answers with an empty stream). Runs on
  /// the actor's thread.
  std::function<Result<std::vector<std::string>>()> state_stream;
  /// Declares this peer as a state donor under `<prefix>.all_averagers` with this
  /// priority, every declare_period seconds (nullopt: no declaration).
  std::optional<double> sharing_priority;
  std::string prefix;            ///< the experiment's prefix (for the declaration key)
  double declare_period = 30.0;  ///< seconds between declarations
  /// Serve the join stream (false for a client: it only joins others' groups).
  bool serve_join = true;
  /// Where the all-reduce's part reductions run: this device actor (CPU or GPU; the
  /// actor sets role.deferred_reductions), or inline in the role when null.
  std::optional<device_actor> device;
};

/// A step's outcome, delivered once on the actor's thread (keep it short).
using StepDone = std::function<void(Result<core::averaging::AveragerStepResult>)>;

/// Spawns the actor and registers its handles on `gw`.
caf::actor spawn_averager_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, AveragerActorConfig config);
/// Unregisters the handles and stops the actor (a running step ends cancelled).
void stop_averager_actor(Gateway& gw, const caf::actor& averager, const AveragerActorConfig& config);

/// Starts a step; `done` gets its outcome.
void submit_step(const caf::actor& averager, core::averaging::AveragerStep step, StepDone done);
/// Downloads the state from the donors of `config` (best first); `done` gets the state
/// or why every donor failed.
void submit_load_state(const caf::actor& averager, core::averaging::StateLoaderConfig config,
                       std::function<void(Result<core::averaging::DownloadedState>)> done);
/// Runs `control` on the role (trigger, cancel, set_weight...) on the actor's thread and
/// executes the effects it returns.
void submit_control(const caf::actor& averager,
                    std::function<core::averaging::AveragerEffects(core::averaging::AveragerRole&, core::TimePoint)> control);

}  // namespace apiary::actors
