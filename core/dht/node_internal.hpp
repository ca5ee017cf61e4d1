#pragma once
/// The Node's bookkeeping types, shared by its source files (node*.cpp) only.
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/dht/node.hpp"

namespace apiary::core::dht {

/// What a call was for.
enum class CallKind {
  bootstrap_ping,  ///< a ping of an initial peer (with validate)
  evict_ping,      ///< a ping of a full bucket's least-recently-seen node
  validate_ping,   ///< a call back to a peer that asked us to validate it
  find,            ///< a find request of a search
  store,           ///< a store of one key's items on one replica
  push,            ///< a fire-and-forget store: cache_nearest or replication to a newcomer
};

/// What a search serves.
enum class Purpose { bootstrap, find_nearest, store, get };

/// What an operation is.
enum class OpKind { bootstrap, find_nearest, store, get };

struct Node::PendingCall {
  CallKind kind = CallKind::find;
  PeerAddr peer;
  std::optional<NodeId> node;        ///< the callee's id, when known
  OpId op = 0;
  std::uint64_t search = 0;
  TraverseRequestId traverse_request = 0;
  NodeId key;                        ///< store: the key whose items go to this replica
  RequestId held_request = 0;        ///< validate_ping: the ping request waiting for us
  NodeId sender;                     ///< validate_ping: the id the caller claimed
  DhtTime sent_at = 0;               ///< bootstrap_ping: DHT time the ping left
  const char* handle = "";           ///< the RPC called
};

/// The best value a get has seen for one key.
struct Candidate {
  std::variant<std::string, DictionaryValue> value;
  DhtTime expiration = 0;
  std::optional<NodeId> source;      ///< nullopt: found locally
  std::size_t hops = 0;
};

/// One key of a get search.
struct GetKey {
  DhtTime sufficient = 0;            ///< a value expiring at or after this ends the search
  std::optional<Candidate> best;
  std::vector<std::pair<OpId, std::size_t>> waiters;  ///< (get op, position in its request)
};

struct Node::Search {
  std::uint64_t id = 0;
  Purpose purpose = Purpose::find_nearest;
  OpId op = 0;                       ///< the owning op (unused for get: see GetKey::waiters)
  bool latest = false;
  Traverse traverse;
  /// Every node the search met: how to reach it, and the length of the shortest request
  /// chain that revealed it (1: known before the search).
  struct Met {
    PeerAddr peer;
    std::size_t depth = 1;
  };
  absl::flat_hash_map<NodeId, Met, NodeIdHash> book;
  std::map<NodeId, GetKey> keys;     ///< get searches: per key

  Search(const std::vector<NodeId>& queries, const std::vector<NodeId>& initial,
         const std::vector<NodeId>& visited, TraverseConfig config)
      : traverse(queries, initial, visited, config) {}
};

/// One key of a store: its items and the replicas tried so far.
struct StoreKey {
  std::vector<std::size_t> items;    ///< positions in the op's request
  std::vector<std::string> values;   ///< signed values, aligned with items
  std::vector<Contact> candidates;   ///< nearest first (this node possibly among them)
  std::size_t next = 0;              ///< next candidate to try
  std::size_t in_flight = 0;
  std::size_t successes = 0;         ///< replicas that answered
  bool found = false;                ///< candidates known
  bool done = false;
};

struct Node::Op {
  OpId id = 0;
  OpKind kind = OpKind::get;
  OpResult result;
  std::size_t remaining = 0;         ///< keys / queries / pings still outstanding
  bool internal = false;             ///< started by the node itself: never reported
  // store
  std::vector<StoreItem> items;
  std::map<NodeId, StoreKey> store_keys;
  bool exclude_self = false;
  // find_nearest
  std::size_t k = 0;
  std::map<NodeId, std::vector<std::size_t>> positions;  ///< query -> positions in the request
  // bootstrap
  std::vector<PeerAddr> initial;
  std::size_t answered = 0;
  std::string failures;
  bool refreshing = false;           ///< the self-lookup is done; far buckets are being filled
};

/// Timer of the cache refresher.
inline constexpr TimerId k_cache_refresh_timer = 1;
/// Timer of the bucket refresher.
inline constexpr TimerId k_bucket_refresh_timer = 2;

}  // namespace apiary::core::dht
