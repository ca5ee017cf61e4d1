#include "core/dht/routing_table.hpp"

#include <algorithm>
#include <utility>

#include "core/dht/rules.hpp"

namespace apiary::core::dht {
namespace {

/// Position of node `id` in `list`, or list.end().
std::vector<Contact>::iterator find_in(std::vector<Contact>& list, const NodeId& id) {
  return std::find_if(list.begin(), list.end(), [&](const Contact& c) { return c.id == id; });
}

}  // namespace

Status validate(const RoutingConfig& config) {
  return require_all({
      {config.bucket_size > 0, "routing bucket_size must be >= 1, got 0; use 20 (Kademlia's k)"},
      {config.depth_modulo > 0,
       "routing depth_modulo must be >= 1, got 0; use 5 (hivemind's default) or 1 for plain Kademlia"},
  });
}

Bucket::Bucket(NodeId lower, std::size_t depth, TimePoint last_updated)
    : lower_(lower.prefix(depth)), depth_(depth), last_updated_(last_updated) {}

NodeId Bucket::upper() const {
  // The lowest id with every bit past the prefix set.
  return lower_ ^ (NodeId::max() ^ NodeId::max().prefix(depth_));
}

RoutingTable::RoutingTable(NodeId self, RoutingConfig config)
    : self_(self), config_(config) {
  buckets_.emplace_back(NodeId::min(), 0, TimePoint{});
  keys_.push_back(key_of(buckets_.back()));
}

std::optional<Contact> RoutingTable::add_or_update(TimePoint now, const NodeId& id,
                                                   const PeerId& peer) {
  if (id == self_) return std::nullopt;
  // A peer that comes back under a new id: its old id is stale.
  if (auto old = node_of(peer); old && *old != id) remove(*old);
  for (;;) {
    Bucket& b = buckets_[bucket_index(id)];
    b.last_updated_ = now;
    // Known node: it answered, so it is the most recently seen.
    if (auto it = find_in(b.nodes_, id); it != b.nodes_.end()) {
      if (it->peer != peer) nodes_.erase(it->peer);
      b.nodes_.erase(it);
      b.nodes_.push_back(Contact{id, peer});
      b.requested_for_ping_.erase(id);
      nodes_[peer] = id;
      return std::nullopt;
    }
    // Room left: a new active node.
    if (b.nodes_.size() < config_.bucket_size) {
      drop_replacement(b, id);
      b.nodes_.push_back(Contact{id, peer});
      ++active_;
      nodes_[peer] = id;
      return std::nullopt;
    }
    // Full but splittable: split and try the half that holds the node.
    if (may_split(b)) {
      split(bucket_index(id));
      continue;
    }
    // Full for good: remember it as a replacement, ask to ping the stalest node.
    place(b, Contact{id, peer}, config_.bucket_size, config_.replacement_size);
    for (const Contact& c : b.nodes_) {
      if (b.requested_for_ping_.insert(c.id).second) return c;
    }
    return std::nullopt;
  }
}

bool RoutingTable::remove(const NodeId& id) {
  Bucket& b = buckets_[bucket_index(id)];
  auto it = find_in(b.nodes_, id);
  if (it == b.nodes_.end()) return drop_replacement(b, id);
  nodes_.erase(it->peer);
  --active_;
  b.requested_for_ping_.erase(id);
  b.nodes_.erase(it);
  // Promote the most recently added replacement: the freshest evidence of a live node.
  if (!b.replacements_.empty()) {
    Contact promoted = b.replacements_.back();
    b.replacements_.pop_back();
    ++active_;
    nodes_[promoted.peer] = promoted.id;
    b.nodes_.push_back(std::move(promoted));
  }
  return true;
}

const Contact* RoutingTable::active(const NodeId& id) const {
  const std::vector<Contact>& list = buckets_[bucket_index(id)].nodes_;
  auto it = std::find_if(list.begin(), list.end(), [&](const Contact& c) { return c.id == id; });
  return it == list.end() ? nullptr : &*it;
}

std::optional<PeerId> RoutingTable::peer_of(const NodeId& id) const {
  const Contact* c = active(id);
  if (c == nullptr) return std::nullopt;
  return c->peer;
}

std::optional<NodeId> RoutingTable::node_of(const PeerId& peer) const {
  auto it = nodes_.find(peer);
  if (it == nodes_.end()) return std::nullopt;
  return it->second;
}

std::vector<Contact> RoutingTable::nearest(const NodeId& query, std::size_t k,
                                           const std::optional<NodeId>& exclude) const {
  const std::vector<const Contact*> refs = nearest_refs(query, k, exclude);
  std::vector<Contact> out;
  out.reserve(refs.size());
  for (const Contact* c : refs) out.push_back(*c);
  return out;
}

std::vector<const Contact*> RoutingTable::nearest_refs(const NodeId& query, std::size_t k,
                                                       const std::optional<NodeId>& exclude) const {
  // XOR maps each bucket onto one prefix range of distances, and those ranges partition
  // the distance space, so visiting buckets by the prefix of their distance visits
  // nodes in non-decreasing distance, one bucket at a time.
  // Buckets come off a min-heap of their distance prefixes: a query usually needs the
  // nearest two or three of them, so the rest are never sorted. Distances compare by
  // their first 64 bits, and in full only when those are equal (buckets deeper than 64
  // bits, or nodes sharing 64 bits of distance: not met in a swarm of random ids).
  const std::uint64_t query_top = query.top64();
  struct Ranked {
    std::uint64_t top;  ///< the distance prefix's first 64 bits
    std::size_t index;  ///< the bucket
  };
  std::vector<Ranked> order;
  order.reserve(buckets_.size());
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    const BucketKey& b = keys_[i];
    const std::uint64_t mask = b.depth == 0 ? 0 : b.depth >= 64 ? ~std::uint64_t{0} : ~std::uint64_t{0} << (64 - b.depth);
    order.push_back({(b.lower_top ^ query_top) & mask, i});
  }
  const auto farther = [&](const Ranked& a, const Ranked& b) {
    if (a.top != b.top) return a.top > b.top;
    const Bucket& x = buckets_[a.index];
    const Bucket& y = buckets_[b.index];
    return (y.lower_ ^ query).prefix(y.depth_) < (x.lower_ ^ query).prefix(x.depth_);
  };
  std::make_heap(order.begin(), order.end(), farther);
  struct Found {
    std::uint64_t top;  ///< the distance's first 64 bits
    const Contact* contact;
  };
  std::vector<Found> found;
  // Every node of a later bucket is farther than every node found so far.
  for (auto end = order.end(); found.size() < k && end != order.begin(); --end) {
    std::pop_heap(order.begin(), end, farther);
    for (const Contact& c : buckets_[std::prev(end)->index].nodes_) {
      if (exclude && c.id == *exclude) continue;
      found.push_back({c.id.top64() ^ query_top, &c});
    }
  }
  // Distances are distinct (ids are): the k nearest sorted, the rest dropped.
  const auto nearer = [&](const Found& a, const Found& b) {
    if (a.top != b.top) return a.top < b.top;
    return (a.contact->id ^ query) < (b.contact->id ^ query);
  };
  if (found.size() > k) {
    const auto kth = found.begin() + static_cast<std::ptrdiff_t>(k);
    std::nth_element(found.begin(), kth, found.end(), nearer);
    found.erase(kth, found.end());
  }
  std::sort(found.begin(), found.end(), nearer);
  std::vector<const Contact*> out;
  out.reserve(found.size());
  for (const Found& f : found) out.push_back(f.contact);
  return out;
}

std::size_t RoutingTable::bucket_index(const NodeId& id) const {
  // Buckets are sorted by lower bound and cover the space: take the last lower <= id.
  // Compared by their first 64 bits, in full only on a tie.
  const std::uint64_t top = id.top64();
  auto it = std::upper_bound(keys_.begin(), keys_.end(), id, [&](const NodeId& x, const BucketKey& b) {
    if (top != b.lower_top) return top < b.lower_top;
    return x < buckets_[static_cast<std::size_t>(&b - keys_.data())].lower_;
  });
  return static_cast<std::size_t>(it - keys_.begin()) - 1;
}

std::vector<std::size_t> RoutingTable::buckets_updated_before(TimePoint t) const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    if (buckets_[i].last_updated_ < t) out.push_back(i);
  }
  return out;
}

bool RoutingTable::may_split(const Bucket& b) const {
  if (b.depth_ >= k_id_bits) return false;
  return b.contains(self_) || b.depth_ % config_.depth_modulo != 0;
}

void RoutingTable::split(std::size_t index) {
  Bucket parent = std::move(buckets_[index]);
  const std::size_t depth = parent.depth_ + 1;
  Bucket left(parent.lower_, depth, parent.last_updated_);
  Bucket right(parent.lower_.with_bit(parent.depth_, true), depth, parent.last_updated_);
  // Active nodes first, then replacements, each in its order: the halves keep LRU order
  // and refill their main lists from the replacements (the active ones all stay active:
  // each half has room for them).
  for (const auto* list : {&parent.nodes_, &parent.replacements_}) {
    const bool was_active = list == &parent.nodes_;
    for (const Contact& c : *list) {
      Bucket& half = c.id.bit(parent.depth_) ? right : left;
      place(half, c, config_.bucket_size, config_.replacement_size);
      const bool active = find_in(half.nodes_, c.id) != half.nodes_.end();
      if (active && !was_active) {
        ++active_;
        nodes_[c.peer] = c.id;
      }
      if (active && parent.requested_for_ping_.count(c.id) != 0) {
        half.requested_for_ping_.insert(c.id);
      }
    }
  }
  buckets_[index] = std::move(left);
  buckets_.insert(buckets_.begin() + static_cast<std::ptrdiff_t>(index) + 1, std::move(right));
  keys_[index] = key_of(buckets_[index]);
  keys_.insert(keys_.begin() + static_cast<std::ptrdiff_t>(index) + 1, key_of(buckets_[index + 1]));
}

void RoutingTable::place(Bucket& b, const Contact& c, std::size_t bucket_size,
                         std::size_t replacement_size) {
  if (b.nodes_.size() < bucket_size) {
    b.nodes_.push_back(c);
    return;
  }
  // Re-adding a replacement moves it to the most-recent end.
  drop_replacement(b, c.id);
  b.replacements_.push_back(c);
  if (b.replacements_.size() > replacement_size) b.replacements_.erase(b.replacements_.begin());
}

bool RoutingTable::drop_replacement(Bucket& b, const NodeId& id) {
  auto it = find_in(b.replacements_, id);
  if (it == b.replacements_.end()) return false;
  b.replacements_.erase(it);
  return true;
}

}  // namespace apiary::core::dht
