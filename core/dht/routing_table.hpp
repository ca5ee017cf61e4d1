#pragma once
/// The Kademlia routing table: k-buckets over the 160-bit id space, each a range of ids
/// sharing a prefix, holding up to `bucket_size` nodes in least-recently-seen order plus
/// a replacement cache. Buckets split by the rule of Kademlia §4.2 with hivemind's
/// `depth_modulo` relaxation. Pure: time comes in as `now`, pings go out as values.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/dht/node_id.hpp"
#include "core/time.hpp"
#include "messages/identity/peer_address.hpp"
#include "messages/result.hpp"

namespace apiary::core::dht {

/// How a node is reached: its peer's address (with its PeerID where known).
using PeerId = messages::PeerAddress;

/// A node the table knows: its DHT id and the peer that answers for it.
struct Contact {
  NodeId id;    ///< the node's DHT id
  PeerId peer;  ///< the peer to call to reach it

  friend bool operator==(const Contact& a, const Contact& b) {
    return a.id == b.id && a.peer == b.peer;
  }
};

/// Tuning of a routing table.
struct RoutingConfig {
  /// Nodes per bucket, Kademlia's k (>= 1). Also the default answer size of a find.
  std::size_t bucket_size = 20;
  /// A full bucket away from our own id still splits unless its depth (prefix bits) is
  /// a multiple of this (>= 1); 1 gives plain Kademlia, larger keeps more distant nodes.
  std::size_t depth_modulo = 5;
  /// Replacement candidates remembered per full bucket (>= 0); the oldest is dropped
  /// past it.
  std::size_t replacement_size = 20;
};

/// Checks a RoutingConfig; the error names the bad field and its accepted range.
[[nodiscard]] Status validate(const RoutingConfig& config);

/// One k-bucket: every id whose first `depth()` bits equal those of `lower()`.
class Bucket {
 public:
  /// The bucket of ids sharing the first `depth` bits of `lower` (whose other bits are 0).
  Bucket(NodeId lower, std::size_t depth, TimePoint last_updated);

  /// The smallest id in range.
  [[nodiscard]] const NodeId& lower() const { return lower_; }
  /// The largest id in range (inclusive).
  [[nodiscard]] NodeId upper() const;
  /// Prefix bits every id in range shares (0 for the whole space).
  [[nodiscard]] std::size_t depth() const { return depth_; }
  /// True when `id` is in range.
  [[nodiscard]] bool contains(const NodeId& id) const {
    return depth_ == 0 || lower_.common_prefix_length(id) >= depth_;
  }
  /// Active nodes, least recently seen first.
  [[nodiscard]] const std::vector<Contact>& nodes() const { return nodes_; }
  /// Replacement candidates, least recently added first.
  [[nodiscard]] const std::vector<Contact>& replacements() const { return replacements_; }
  /// When a node of this bucket was last added or seen (the caller's clock).
  [[nodiscard]] TimePoint last_updated() const { return last_updated_; }

  /// A uniformly random id in range, for refreshing the bucket; `next_u64` as in
  /// NodeId::random.
  template <class NextU64>
  [[nodiscard]] NodeId random_id(NextU64&& next_u64) const {
    const NodeId r = NodeId::random(next_u64);
    return lower_ ^ (r ^ r.prefix(depth_));
  }

 private:
  friend class RoutingTable;

  NodeId lower_;
  std::size_t depth_ = 0;
  std::vector<Contact> nodes_;
  std::vector<Contact> replacements_;
  std::set<NodeId> requested_for_ping_;
  TimePoint last_updated_{};
};

/// The routing table of one node. Its own id is never stored, so no search returns it.
class RoutingTable {
 public:
  /// An empty table (one bucket covering every id) for the node `self`.
  RoutingTable(NodeId self, RoutingConfig config);

  /// Records that node `id` (reached through `peer`) was seen at `now`. A known node
  /// moves to the most-recently-seen end (and its peer is updated); a new one is added,
  /// splitting full buckets while the split rule allows. When its bucket is full and
  /// may not split, the node goes to the replacement cache and the least-recently-seen
  /// node not already being pinged is returned: the caller should ping it and call
  /// `add_or_update` if it answers or `remove` if not. A peer seen under a new id loses
  /// its old one. Our own id is ignored.
  [[nodiscard]] std::optional<Contact> add_or_update(TimePoint now, const NodeId& id,
                                                     const PeerId& peer);

  /// Forgets node `id` (active or replacement). Removing an active node promotes the
  /// most recently added replacement of its bucket. Returns false if it was unknown.
  bool remove(const NodeId& id);

  /// The peer of active node `id`, if known.
  [[nodiscard]] std::optional<PeerId> peer_of(const NodeId& id) const;
  /// The id of the active node reached through `peer`, if known.
  [[nodiscard]] std::optional<NodeId> node_of(const PeerId& peer) const;
  /// True when `id` is an active node.
  [[nodiscard]] bool contains(const NodeId& id) const { return active(id) != nullptr; }
  /// Number of active nodes.
  [[nodiscard]] std::size_t size() const { return active_; }

  /// The up-to-`k` active nodes nearest to `query` by XOR distance, nearest first,
  /// leaving out `exclude` if given. Exact, not approximate.
  [[nodiscard]] std::vector<Contact> nearest(const NodeId& query, std::size_t k,
                                             const std::optional<NodeId>& exclude =
                                                 std::nullopt) const;
  /// nearest() without copying: pointers into the table, valid until it next changes.
  [[nodiscard]] std::vector<const Contact*> nearest_refs(const NodeId& query, std::size_t k,
                                                         const std::optional<NodeId>& exclude =
                                                             std::nullopt) const;

  /// Index in `buckets()` of the bucket whose range holds `id`.
  [[nodiscard]] std::size_t bucket_index(const NodeId& id) const;
  /// Every bucket, in increasing id order; together they cover the whole id space.
  [[nodiscard]] const std::vector<Bucket>& buckets() const { return buckets_; }
  /// Indices of buckets last updated strictly before `t` (candidates for a refresh).
  [[nodiscard]] std::vector<std::size_t> buckets_updated_before(TimePoint t) const;

  /// This node's own id.
  [[nodiscard]] const NodeId& self() const { return self_; }
  /// The table's tuning.
  [[nodiscard]] const RoutingConfig& config() const { return config_; }

 private:
  /// True when the full bucket `b` may split: it holds our own id, or its depth is not
  /// a multiple of depth_modulo (and it is not a single id yet).
  [[nodiscard]] bool may_split(const Bucket& b) const;
  /// Replaces bucket `index` by its two halves.
  void split(std::size_t index);
  /// Puts `c` into bucket `b` (main list if room, else replacements); no splitting.
  static void place(Bucket& b, const Contact& c, std::size_t bucket_size,
                    std::size_t replacement_size);
  /// Drops `id` from the replacement cache of `b`; true if it was there.
  static bool drop_replacement(Bucket& b, const NodeId& id);

  /// What finding a bucket reads, packed apart from the buckets (a query reads every
  /// bucket's, and few buckets' nodes): the lower bound's first 64 bits and the depth.
  struct BucketKey {
    std::uint64_t lower_top;
    std::size_t depth;
  };
  /// The active contact of node `id` (in its bucket's main list), or null.
  [[nodiscard]] const Contact* active(const NodeId& id) const;
  /// Keys of buckets_, same order.
  [[nodiscard]] static BucketKey key_of(const Bucket& b) { return {b.lower_.top64(), b.depth_}; }

  NodeId self_;
  RoutingConfig config_;
  std::vector<Bucket> buckets_;
  std::vector<BucketKey> keys_;
  std::size_t active_ = 0;  ///< nodes in the buckets' main lists
  absl::flat_hash_map<PeerId, NodeId, std::hash<PeerId>> nodes_;
};

}  // namespace apiary::core::dht
