#pragma once
/// The server side of hivemind's DHTProtocol (reference §2.3): answers rpc_ping,
/// rpc_store and rpc_find from a node's routing table, storage and cache. Pure: DHT time
/// comes in as `now`; the network work the upstream servicer does on its own (calling a
/// pinger back, pinging eviction candidates, replicating keys to newcomers) is left to
/// the caller, which learns what to do from take_routing_events().
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/dht/node_id.hpp"
#include "core/dht/routing_table.hpp"
#include "core/dht/storage.hpp"
#include "core/dht/timed_storage.hpp"
#include "dht.pb.h"
#include "messages/result.hpp"

namespace apiary::core::dht {

/// Handle of the ping RPC (request PingRequest, response PingResponse).
inline constexpr const char* k_ping_handle = "DHTProtocol.rpc_ping";
/// Handle of the store RPC (request StoreRequest, response StoreResponse).
inline constexpr const char* k_store_handle = "DHTProtocol.rpc_store";
/// Handle of the find RPC (request FindRequest, response FindResponse).
inline constexpr const char* k_find_handle = "DHTProtocol.rpc_find";

/// Tuning of the protocol (hivemind's DHTProtocol.create arguments).
struct ProtocolConfig {
  /// Nodes per k-bucket (>= 1); also how many nearest nodes a find returns per key.
  std::size_t bucket_size = 20;
  /// Bucket split relaxation (>= 1), see RoutingConfig::depth_modulo.
  std::size_t depth_modulo = 5;
  /// Nearest nodes a value is replicated to (>= 1); used by the node when a newcomer
  /// joins (see RoutingEvents::joined), not by the server itself.
  std::size_t num_replicas = 5;
  /// Most keys the cache holds (the earliest-expiring is evicted past it); unbounded if
  /// not given. The main storage is always unbounded.
  std::optional<std::size_t> cache_size;
  /// A client-only node: its NodeInfo is empty in every response, so callers never add
  /// it to their routing tables.
  bool client_mode = false;
};

/// Checks a ProtocolConfig; the error names the bad field and its accepted range.
[[nodiscard]] Status validate(const ProtocolConfig& config);

/// Routing-table work the servicer leaves to its caller, gathered while serving.
struct RoutingEvents {
  /// Nodes seen for the first time, in the order seen: hivemind pushes them the stored
  /// keys they are now among the `num_replicas` nearest to.
  std::vector<Contact> joined;
  /// Least-recently-seen nodes of full buckets that the table asked to ping: on an answer
  /// call routing_table().add_or_update, on silence routing_table().remove.
  std::vector<Contact> to_ping;
};

/// One node's DHTProtocol servicer.
///
/// Every request that carries the sender's NodeInfo (a 20-byte node_id) registers the
/// sender in the routing table under `from_peer`, as hivemind does for all three RPCs.
/// Differences from hivemind's servicer: `PingRequest.validate` is not acted on (the
/// call back to the sender is network work: a caller that wants it pings the sender and,
/// if the sender does not answer with the same id, removes it from the routing table);
/// `available` is always false; records are not passed through a record validator; a
/// sender whose `from_peer` is empty is not registered (it could not be reached); a
/// whole-dictionary item with no live entries reports false (upstream: true); every item
/// is decoded before any is stored, so one malformed item fails the whole request.
class Protocol {
 public:
  /// A servicer for node `self`, reachable at `self_peer_id` (its address);
  /// `config` must pass validate().
  Protocol(NodeId self, PeerId self_peer_id, ProtocolConfig config);

  /// Serves one request: `handle` names the RPC, `request` is its serialized message,
  /// `from_peer` the caller's address (may be empty), `now` the DHT time in
  /// seconds. Returns the serialized response; errc::not_found for an unknown handle,
  /// errc::malformed (naming the message type) for a request that does not parse or is
  /// inconsistent. A malformed request changes nothing.
  [[nodiscard]] Result<std::string> handle(double now, const std::string& handle,
                                           const PeerId& from_peer,
                                           const std::string& request);

  /// rpc_ping: {peer = own NodeInfo, dht_time = now (seconds), available = false}.
  [[nodiscard]] Result<pb::PingResponse> ping(double now, const PeerId& from_peer,
                                              const pb::PingRequest& request);
  /// rpc_store: one store_ok per item, in request order.
  [[nodiscard]] Result<pb::StoreResponse> store(double now, const PeerId& from_peer,
                                                const pb::StoreRequest& request);
  /// rpc_find: one FindResult per key, in request order.
  [[nodiscard]] Result<pb::FindResponse> find(double now, const PeerId& from_peer,
                                              const pb::FindRequest& request);

  /// The routing table requests are registered in.
  [[nodiscard]] RoutingTable& routing_table() { return routing_table_; }
  /// The main storage (StoreRequest items with in_cache = false); unbounded.
  [[nodiscard]] LocalStorage& storage() { return storage_; }
  /// The cache (items with in_cache = true); bounded by ProtocolConfig::cache_size.
  [[nodiscard]] LocalStorage& cache() { return cache_; }
  /// This node's NodeInfo as sent in responses (empty node_id in client mode).
  [[nodiscard]] const pb::NodeInfo& node_info() const { return node_info_; }
  /// This node's DHT id.
  [[nodiscard]] const NodeId& self() const { return self_; }
  /// This node's PeerID bytes.
  [[nodiscard]] const PeerId& self_peer_id() const { return self_peer_id_; }
  /// The tuning given at construction.
  [[nodiscard]] const ProtocolConfig& config() const { return config_; }

  /// The routing-table work gathered since the last call, then cleared.
  [[nodiscard]] RoutingEvents take_routing_events();

 private:
  /// The sender's id from `peer` (nullopt if absent), or an error naming `message_type`
  /// when it is set but not 20 bytes.
  [[nodiscard]] static Result<std::optional<NodeId>> sender_id(const pb::NodeInfo& peer,
                                                               const char* message_type);
  /// Registers `sender` (reached through `from_peer`) as seen at `now`, recording a
  /// newcomer and the eviction candidate, if any.
  void register_sender(double now, const std::optional<NodeId>& sender,
                       const PeerId& from_peer);
  /// The FindResult of one key: its value (storage or cache, later expiration wins) and
  /// the nearest nodes, leaving out `requester`.
  void find_one(double now, const NodeId& key, const std::optional<NodeId>& requester,
                pb::FindResult& result);
  /// find() into `response` (empty, or cleared: its storage is reused).
  [[nodiscard]] Status find_into(double now, const PeerId& from_peer, const pb::FindRequest& request,
                                 pb::FindResponse& response);

  NodeId self_;
  PeerId self_peer_id_;
  ProtocolConfig config_;
  pb::NodeInfo node_info_;
  RoutingTable routing_table_;
  LocalStorage storage_;
  LocalStorage cache_;
  RoutingEvents events_;
};

}  // namespace apiary::core::dht
