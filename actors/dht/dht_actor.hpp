#pragma once
/// The DHT node role as an actor: a thin shell around core::dht::Node that serves
/// DHTProtocol.rpc_ping / rpc_store / rpc_find over the gateway (unless the node is a
/// client), runs the node's calls and timers, and starts the operations it is sent
/// (dht_op_message), handing each OpResult back to its caller.
#include <future>
#include <memory>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/dht/dht_messages.hpp"
#include "actors/gateway.hpp"
#include "core/dht/node.hpp"
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
  /// Signs outbound and checks inbound requests and responses (null: off).
  std::shared_ptr<core::dht::Authorizer> authorizer;
  /// The node's PeerID.
  messages::PeerId peer_id;
  /// The gateway hosts other DHT nodes too: calls name this node as their caller, and
  /// only the handles addressed to this node (`<handle>@<PeerID>`) are served.
  bool shared_gateway = false;
};

/// The handle a node serves `base` under when callers address it by PeerID:
/// "DHTProtocol.rpc_find@12D3KooW...". Several nodes can then share one gateway.
std::string addressed_handle(const char* base, const messages::PeerId& peer);

/// Spawns the DHT actor on `gw` and, unless it is a client, registers it for the three
/// DHTProtocol handles. DHT time is Unix time: the node's epoch is the system clock
/// minus core_now() at spawn.
caf::actor spawn_dht_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, DhtActorConfig config);

/// Stops routing the DHTProtocol handles to the actor on `gw` and stops the actor.
void stop_dht_actor(Gateway& gw, const caf::actor& dht, const messages::PeerId& peer, bool shared);

/// Starts an operation on `dht`; the future receives its OpResult (status cancelled if
/// the actor stops first).
std::future<core::dht::OpResult> submit_dht_op(
    const caf::actor& dht, std::function<core::Effects(core::dht::Node&, core::TimePoint, core::dht::OpId)> start);

/// Starts an operation on `dht` whose OpResult goes to `deliver` (run on the actor's
/// thread; keep it short).
void submit_dht_op(const caf::actor& dht,
                   std::function<core::Effects(core::dht::Node&, core::TimePoint, core::dht::OpId)> start,
                   std::function<void(core::dht::OpResult)> deliver);

/// Runs `look` on the actor's node (on the actor's thread) and returns what it returns;
/// an error if the actor is gone or does not answer within `patience`.
template <class T>
Result<T> look_at_dht(const caf::actor& dht, std::function<T(core::dht::Node&, core::TimePoint)> look,
                      std::chrono::milliseconds patience = std::chrono::seconds(5));

/// The PeerAddr of a caller from what its connection told the transport: its listen
/// "host:port" ("" for unknown: an empty PeerAddr) and its PeerID bytes (appended as
/// /p2p/<base58> when valid).
core::PeerAddr peer_addr_of(const std::string& listen_host_port, const std::string& peer_id_bytes);

// ---- implementation of the template ----

/// Sends a look message (defined in dht_actor.cpp).
void send_dht_look(const caf::actor& dht, std::shared_ptr<DhtLook> look);

template <class T>
Result<T> look_at_dht(const caf::actor& dht, std::function<T(core::dht::Node&, core::TimePoint)> look,
                      std::chrono::milliseconds patience) {
  auto promise = std::make_shared<std::promise<Result<T>>>();
  auto future = promise->get_future();
  send_dht_look(dht, std::make_shared<DhtLook>([promise, look = std::move(look)](core::dht::Node* node,
                                                                                 core::TimePoint now) {
    if (node == nullptr) {
      promise->set_value(make_error(errc::cancelled, "the DHT node stopped before it could answer"));
    } else {
      promise->set_value(look(*node, now));
    }
  }));
  if (future.wait_for(patience) != std::future_status::ready) {
    return make_error(errc::deadline_exceeded, "the DHT actor did not answer within {} ms; is it overloaded?",
                      patience.count());
  }
  return future.get();
}

}  // namespace apiary::actors
