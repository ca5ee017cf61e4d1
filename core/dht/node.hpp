#pragma once
/// The DHT node role (hivemind's DHTNode, reference §2.6): bootstrap, find_nearest_nodes,
/// store_many and get_many over the network, on top of the Protocol servicer, the
/// routing table and the Traverse search. Pure: time comes in as `now`, calls and timers
/// go out as core::Effects, finished operations come out of take_completed(). The same
/// Node runs under the simulator and inside the DHT actor.
///
/// Peers are named by a PeerAddr: the multiaddr a node listens on, with its PeerID
/// ("/ip4/127.0.0.1/tcp/4100/p2p/12D3KooW..."). That string is what this node puts in
/// FindResult.nearest_peer_ids and what it keeps in its routing table (apiary has no
/// libp2p peer routing, so a bare PeerID could not be dialled).
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "core/dht/blacklist.hpp"
#include "core/dht/node_id.hpp"
#include "core/dht/protocol.hpp"
#include "core/dht/storage.hpp"
#include "core/dht/traverse.hpp"
#include "core/dht/validation.hpp"
#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core::dht {

struct Candidate;

/// Tuning of a node; the defaults are hivemind's (reference §2.7).
struct NodeConfig {
  /// bucket_size, depth_modulo, num_replicas, cache_size, client_mode.
  ProtocolConfig protocol;
  /// Find requests in flight at once per search (>= 1).
  std::size_t num_workers = 4;
  /// Beam of a store's search: its nearest max(num_replicas, store_beam_size) nodes are
  /// visited, with twice num_workers requests in flight (hivemind: bucket_size and
  /// num_workers). The beam must exceed num_replicas, so that dead replicas are replaced;
  /// 10 does that at half the calls of 20. 0 = bucket_size.
  std::size_t store_beam_size = 10;
  /// Most keys packed into one find request of a get (>= 1).
  std::size_t chunk_size = 16;
  /// Deadline of every call this node makes.
  Duration wait_timeout = std::chrono::seconds(3);
  /// A peer that fails a find is skipped for blacklist_time * backoff_rate^(failures-1)
  /// seconds; a success clears it.
  double blacklist_time = 5.0;
  double backoff_rate = 2.0;
  /// After a get found a value newer than the local copies: keep it in the own cache.
  bool cache_locally = true;
  /// ... and push it (in_cache) to this many nodes of the final beam other than the source.
  std::size_t cache_nearest = 1;
  /// After a store: keep accepted regular values in the own cache.
  bool cache_on_store = true;
  /// A get served from the own cache re-fetches the key this many seconds before it
  /// expires (<= 0 turns refreshing off).
  double cache_refresh_before_expiry = 5.0;
  /// Concurrent gets of one key share one search.
  bool reuse_get_requests = true;
  /// Look up a random id in every bucket not updated for this long (off if not given).
  std::optional<Duration> refresh_timeout;
  /// Fail start() when none of the initial peers answers.
  bool ensure_bootstrap_success = true;
  /// Seeds the node's own generator (random bucket-refresh ids).
  std::uint64_t seed = 1;
  /// Where the address texts of find results are parsed. Nodes run by one thread (the
  /// simulator's) may share one, so that each distinct address is parsed and held once;
  /// not thread-safe. Empty: the node keeps its own.
  std::shared_ptr<messages::AddressBook> address_book;
};

/// Checks a NodeConfig; the error names the bad field, its value and the accepted range.
[[nodiscard]] Status validate(const NodeConfig& config);

/// Names one operation a caller starts; chosen by the caller, echoed in its OpResult.
using OpId = std::uint64_t;

/// One record to store: the key's id, the subkey (its msgpack bytes, or
/// k_subkey_regular for a regular value), the value's bytes, the absolute expiration.
struct StoreItem {
  NodeId key;
  std::string subkey;
  std::string value;
  DhtTime expiration = 0;
};

/// A value found by a get, validator markers stripped: regular bytes or a dictionary
/// (subkey msgpack bytes -> value and expiration), under its expiration (a dictionary's:
/// the latest of its entries).
struct FoundValue {
  using Dictionary = std::map<std::string, ValueWithExpiration<std::string>>;
  std::variant<std::string, Dictionary> value;
  DhtTime expiration = 0;
};

/// What one operation produced.
struct OpResult {
  OpId op = 0;
  /// bootstrap: failed when no initial peer answered; others: ok unless cancelled.
  Status status = ok_status();
  /// store: per item, in request order: accepted by at least one replica.
  std::vector<bool> stored;
  /// store: per item, replicas that accepted it.
  std::vector<std::size_t> replicas;
  /// get: per key, in request order.
  std::vector<std::optional<FoundValue>> found;
  /// find_nearest: per query, nearest first.
  std::vector<std::vector<Contact>> nearest;
  /// Calls this operation issued (finds and stores).
  std::size_t requests = 0;
  /// get: the longest chain of find requests that led to a found value (1 = asked a
  /// node of the own table); 0 when served locally or not found.
  std::size_t hops = 0;
  /// bootstrap: initial peers that answered but could not call this node back (its
  /// listen address is not reachable from them: behind NAT, a relay is the way in).
  std::size_t not_called_back = 0;
};

/// Counters over the node's life, for tests, the simulator and benchmarks.
struct NodeStats {
  std::uint64_t calls = 0;            ///< calls issued
  std::uint64_t failed_calls = 0;     ///< calls that failed (timeout, peer down, error)
  std::uint64_t requests_served = 0;  ///< inbound requests answered
  std::uint64_t replications = 0;     ///< stores pushed to newly joined nodes
  std::uint64_t cache_refreshes = 0;  ///< background re-gets of cached keys
  std::uint64_t bans = 0;             ///< peers put on the blacklist
};

/// One DHT node.
class Node {
 public:
  /// A node with id `id`, reachable as `self_addr` (empty in client mode), validating
  /// records with `validator` (may be null: everything is valid). `dht_epoch` (seconds)
  /// is added to `now` to get DHT time (absolute Unix seconds, shared by all nodes).
  Node(NodeId id, PeerAddr self_addr, NodeConfig config, std::shared_ptr<RecordValidator> validator,
       double dht_epoch);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// Bootstraps from `initial_peers` (multiaddrs with /p2p/): pings them all (with
  /// validate), then looks up the own id to fill the routing table. Completes `op`
  /// (status: error naming the peers when none answered and ensure_bootstrap_success).
  /// With no initial peers, completes at once (a first node).
  [[nodiscard]] Effects start(TimePoint now, OpId op, const std::vector<PeerAddr>& initial_peers);

  /// Serves one inbound request for `handle` from `from` (the caller's PeerAddr, empty if
  /// unknown or a client): rpc_ping / rpc_store / rpc_find.
  [[nodiscard]] Effects on_request(TimePoint now, RequestId id, const std::string& handle,
                                   const PeerAddr& from, const std::string& body);
  /// Adds `validator` to the node's (hivemind's DHT.add_validators): merged into the
  /// node's CompositeValidator where it merges; a node without a composite gets one.
  void add_validator(std::unique_ptr<RecordValidator> validator);
  /// Whether the validator accepts `record` (no validator: yes); a whole dictionary
  /// (subkey k_subkey_dictionary) when every entry does, each as its own record.
  [[nodiscard]] bool valid_record(DhtTime t, const DhtRecord& record) const;

  /// The outcome of call `call`.
  [[nodiscard]] Effects on_response(TimePoint now, CallId call, const Result<std::string>& response);
  /// Timer `id` fired.
  [[nodiscard]] Effects on_timer(TimePoint now, TimerId id);

  /// store_many: stores `items` on the num_replicas nodes nearest to each key (this node
  /// among them unless `exclude_self` or client mode), replacing replicas that do not
  /// answer with the next nearest. Values are signed by the validator first.
  [[nodiscard]] Effects store(TimePoint now, OpId op, std::vector<StoreItem> items,
                              bool exclude_self = false);
  /// get_many: per key the freshest value; `latest` visits the whole beam and merges
  /// dictionary subkeys from every replica, otherwise any unexpired value will do.
  [[nodiscard]] Effects get(TimePoint now, OpId op, const std::vector<NodeId>& keys, bool latest = false);
  /// find_nearest_nodes: the `k` nodes nearest to each query (this node included unless
  /// `exclude_self`).
  [[nodiscard]] Effects find_nearest(TimePoint now, OpId op, const std::vector<NodeId>& queries, std::size_t k,
                                     bool exclude_self = false);

  /// Operations finished since the last call, in the order they finished.
  [[nodiscard]] std::vector<OpResult> take_completed();

  /// DHT time (absolute seconds) at `now`.
  [[nodiscard]] DhtTime dht_time(TimePoint now) const { return to_seconds(now) + dht_epoch_; }
  [[nodiscard]] const NodeId& id() const { return protocol_.self(); }
  [[nodiscard]] const PeerAddr& self_addr() const { return protocol_.self_peer_id(); }
  [[nodiscard]] Protocol& protocol() { return protocol_; }
  [[nodiscard]] RoutingTable& routing_table() { return protocol_.routing_table(); }
  [[nodiscard]] const Blacklist& blacklist() const { return blacklist_; }
  [[nodiscard]] const NodeStats& stats() const { return stats_; }
  [[nodiscard]] const NodeConfig& config() const { return config_; }
  /// Operations not finished yet.
  [[nodiscard]] std::size_t pending_ops() const { return ops_.size(); }
  /// Keys waiting for a background cache refresh.
  [[nodiscard]] std::size_t refresh_queue_size() const { return refresh_queue_.size(); }
  /// Searches in flight that gets of one key share.
  [[nodiscard]] std::size_t shared_searches() const { return searches_.size(); }

 private:
  struct Search;
  struct Op;
  struct PendingCall;

  // node.cpp: plumbing shared by every operation.
  Effects flush();
  CallId call(const PeerAddr& peer, const char* handle, const std::string& request, OpId op, int kind);
  void complete(OpResult result);
  /// A new operation `id` (its result names it), kept in ops_ until end_op.
  Op& add_op(OpId id);
  /// Reports `op`'s result, unless the node started it itself, and forgets `op`.
  void end_op(Op& op);
  [[nodiscard]] pb::NodeInfo own_info() const;
  [[nodiscard]] const NodeId& id_self() const { return protocol_.self(); }
  std::uint64_t next_random();
  void note_sender(TimePoint now, const pb::NodeInfo& info, const PeerAddr& peer);
  void handle_routing_events(TimePoint now);
  void replicate_to(TimePoint now, const Contact& newcomer);
  Result<std::string> serve_store(DhtTime t, const PeerAddr& from, const std::string& body);
  Result<std::string> serve(DhtTime t, const std::string& handle, const PeerAddr& from, const std::string& body);
  Effects finish_input(TimePoint now);
  void on_ping_response(TimePoint now, PendingCall& pc, const Result<std::string>& response);
  void bootstrap_pinged(TimePoint now, Op& op);
  void refresh_buckets(TimePoint now);

  // node_search.cpp: the traverse driver shared by bootstrap, find_nearest, store and get.
  std::uint64_t start_search(TimePoint now, const std::vector<NodeId>& queries, std::size_t beam,
                             std::size_t queries_per_call, OpId op, int purpose);
  void pump(TimePoint now, std::uint64_t search);
  void on_find_response(TimePoint now, PendingCall& pc, const Result<std::string>& response);
  void finish_query(TimePoint now, Search& s, const FinishedQuery& q);
  [[nodiscard]] std::vector<Contact> contacts_of(const Search& s, const std::vector<NodeId>& ids) const;
  void start_find(TimePoint now, OpId op, const std::vector<NodeId>& queries, std::size_t k, bool exclude_self,
                  bool internal);

  // node_store.cpp
  void on_store_found(TimePoint now, Op& op, const NodeId& key, std::vector<Contact> nearest);
  void store_next(TimePoint now, Op& op, const NodeId& key);
  void on_store_response(TimePoint now, PendingCall& pc, const Result<std::string>& response);
  void maybe_finish_store(Op& op);

  // node_get.cpp
  void start_get(TimePoint now, OpId op, const std::vector<NodeId>& keys, bool latest,
                 std::optional<DhtTime> sufficient, bool internal);
  void offer_found(TimePoint now, Search& s, const NodeId& key, const pb::FindResult& r, const Contact& from);
  void on_get_found(TimePoint now, Search& s, const FinishedQuery& q);
  std::optional<FoundValue> local_lookup(TimePoint now, const NodeId& key, bool* from_cache);
  std::optional<FoundValue> to_found(DhtTime t, const NodeId& key, Candidate& c) const;
  void schedule_refresh(TimePoint now, const NodeId& key, DhtTime expiration);
  void run_refresh(TimePoint now);
  void maybe_finish_get(Op& op);

  NodeConfig config_;
  std::shared_ptr<RecordValidator> validator_;
  double dht_epoch_;
  Protocol protocol_;
  Blacklist blacklist_;
  NodeStats stats_;
  std::uint64_t rng_state_;

  Effects fx_;
  std::vector<OpResult> completed_;
  std::map<OpId, std::unique_ptr<Op>> ops_;
  std::map<std::uint64_t, std::unique_ptr<Search>> searches_by_id_;
  std::map<NodeId, std::uint64_t> searches_;  ///< key -> the search a get of it can join
  std::map<CallId, std::unique_ptr<PendingCall>> calls_;
  std::map<NodeId, DhtTime> refresh_queue_;   ///< cached key -> DHT time to refresh it
  TimePoint last_now_{};                      ///< `now` of the input being handled
  std::map<RequestId, std::pair<PeerAddr, std::string>> held_pings_;  ///< caller, request bytes
  std::shared_ptr<messages::AddressBook> address_book_;  ///< peer addresses met in find results
  CallId next_call_ = 1;
  std::uint64_t next_search_ = 1;
  OpId next_internal_op_ = OpId{1} << 63;     ///< ops the node starts itself (refreshes)
};

}  // namespace apiary::core::dht
