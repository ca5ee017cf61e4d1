#pragma once
/// The DHT node role (core::dht::NodeRole) in the generic actor host: it serves
/// DHTProtocol.rpc_ping / rpc_store / rpc_find over the gateway (unless the node is a
/// client), runs the node's calls and timers, and starts the operations it is asked
/// for, handing each OpResult back to its caller.
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/gateway.hpp"
#include "actors/role_actor.hpp"
#include "core/dht/node.hpp"
#include "core/dht/node_role.hpp"
#include "messages/identity/peer_id.hpp"

namespace apiary::actors {

/// What a DHT actor is made of.
struct DhtActorConfig {
  /// The node's DHT id.
  core::dht::NodeId id;
  /// The node's listen multiaddr with /p2p/<PeerID>; empty for a client.
  core::PeerAddr self_addr;
  /// Tuning; config.protocol.client_mode makes the actor serve nothing.
  core::dht::NodeConfig node;
  /// Record validator (null: every record is valid).
  std::shared_ptr<core::dht::RecordValidator> validator;
  /// The node's PeerID.
  messages::PeerId peer_id;
  /// The gateway hosts other DHT nodes too: calls name this node as their caller, and
  /// only the handles addressed to this node (`<handle>@<PeerID>`) are served.
  bool shared_gateway = false;
  /// DHT time (Unix seconds) at core_now() == 0 (apiary::Runtime::dht_epoch).
  double dht_epoch = 0;
  /// Which host runs the node.
  HostKind host = HostKind::actor;
};

using core::dht::addressed_handle;

/// Spawns the DHT node's host on `gw` and, unless it is a client, registers it for the
/// three DHTProtocol handles. DHT time is Unix time: core_now() + config.dht_epoch.
RoleHost spawn_dht_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, DhtActorConfig config);

/// Stops routing the DHTProtocol handles to the actor on `gw` and stops the actor.
void stop_dht_actor(Gateway& gw, const RoleHost& dht, const messages::PeerId& peer, bool shared);

/// Starts an operation on `dht`; the future receives its OpResult (status cancelled if
/// the actor stops first).
std::future<core::dht::OpResult> submit_dht_op(const RoleHost& dht, core::dht::NodeOp start);

/// Starts an operation on `dht` whose OpResult goes to `deliver` (run on the actor's
/// thread; keep it short); status cancelled if the actor stops first.
void submit_dht_op(const RoleHost& dht, core::dht::NodeOp start, std::function<void(core::dht::OpResult)> deliver);

/// Runs `look` on the actor's node (on the actor's thread) and returns what it returns;
/// an error if the actor is gone or does not answer within `patience`.
template <class T>
Result<T> look_at_dht(const RoleHost& dht, std::function<T(core::dht::Node&, core::TimePoint)> look,
                      std::chrono::milliseconds patience = std::chrono::seconds(5)) {
  auto out = std::make_shared<std::optional<T>>();
  auto done = call_role(dht, "", core::dht::k_look_method,
                        core::Value::of(core::dht::NodeLook([out, look = std::move(look)](core::dht::Node& node,
                                                                                         core::TimePoint now) {
                          out->emplace(look(node, now));
                        })));
  if (done.wait_for(patience) != std::future_status::ready) {
    return make_error(errc::deadline_exceeded, "the DHT actor did not answer within {} ms; is it overloaded?",
                      patience.count());
  }
  auto r = done.get();
  if (!r) return make_error(errc::cancelled, "the DHT node stopped before it could answer");
  return std::move(**out);
}

}  // namespace apiary::actors
