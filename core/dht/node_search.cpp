// The Node's search driver: one Traverse per search, fed by rpc_find answers, shared by
// bootstrap, find_nearest, store and get.
#include <algorithm>
#include <cmath>

#include "core/dht/node.hpp"
#include "core/dht/node_internal.hpp"

namespace apiary::core::dht {

std::size_t queries_per_call_for(std::size_t queries, std::size_t cap) {
  const auto root = static_cast<std::size_t>(std::sqrt(static_cast<double>(queries)));
  return std::max<std::size_t>(1, std::min(root, cap));
}

std::uint64_t Node::start_search(TimePoint now, const std::vector<NodeId>& queries, std::size_t beam,
                                 std::size_t queries_per_call, OpId op, int purpose) {
  const DhtTime t = dht_time(now);
  absl::flat_hash_map<NodeId, Search::Met, NodeIdHash> book;
  std::vector<NodeId> initial;
  for (const NodeId& q : queries) {
    for (const Contact& c : routing_table().nearest(q, beam)) {
      if (blacklist_.is_banned(t, c.peer) || !book.emplace(c.id, Search::Met{c.peer, 1}).second) continue;
      initial.push_back(c.id);
    }
  }
  TraverseConfig tc;
  tc.beam_size = std::max<std::size_t>(1, beam);
  // A store's narrow beam is asked all at once: one round fewer, no more calls.
  // A store needs its whole beam visited anyway: twice the workers take fewer rounds.
  tc.num_workers = static_cast<Purpose>(purpose) == Purpose::store ? 2 * config_.num_workers : config_.num_workers;
  tc.queries_per_call = std::max<std::size_t>(1, queries_per_call);
  auto s = std::make_unique<Search>(queries, initial, std::vector<NodeId>{id_self()}, tc);
  s->id = next_search_++;
  s->purpose = static_cast<Purpose>(purpose);
  s->op = op;
  s->book = std::move(book);
  const std::uint64_t id = s->id;
  searches_by_id_[id] = std::move(s);
  return id;
}

void Node::pump(TimePoint now, std::uint64_t search) {
  auto it = searches_by_id_.find(search);
  if (it == searches_by_id_.end()) return;
  Search& s = *it->second;
  for (const FinishedQuery& q : s.traverse.take_finished()) finish_query(now, s, q);
  for (const NeighborRequest& r : s.traverse.next_requests()) {
    pb::FindRequest req;
    *req.mutable_peer() = own_info();
    for (const NodeId& q : r.queries) req.add_keys(q.to_bytes());
    const OpId op = s.purpose == Purpose::get ? 0 : s.op;
    const CallId c = call(s.book[r.peer].peer, k_find_handle, req.SerializeAsString(), op, static_cast<int>(CallKind::find));
    PendingCall& pc = *calls_[c];
    pc.node = r.peer;
    pc.search = s.id;
    pc.traverse_request = r.id;
    if (s.purpose == Purpose::get) {
      // A get's requests count for every op waiting on the keys they carry.
      std::set<OpId> counted;
      for (const NodeId& q : r.queries) {
        auto k = s.keys.find(q);
        if (k == s.keys.end()) continue;
        for (auto& [waiter, pos] : k->second.waiters) {
          auto op_it = ops_.find(waiter);
          if (op_it != ops_.end() && counted.insert(waiter).second) ++op_it->second->result.requests;
        }
      }
    }
  }
  for (const FinishedQuery& q : s.traverse.take_finished()) finish_query(now, s, q);
  if (s.traverse.done()) {
    for (auto k = searches_.begin(); k != searches_.end();) {
      k = k->second == s.id ? searches_.erase(k) : std::next(k);
    }
    searches_by_id_.erase(it);
  }
}

void Node::on_find_response(TimePoint now, PendingCall& pc, const Result<std::string>& response) {
  auto it = searches_by_id_.find(pc.search);
  if (it == searches_by_id_.end()) return;
  Search& s = *it->second;
  const DhtTime t = dht_time(now);
  // Reused by every answer this thread parses: its strings keep their capacity. Nothing
  // called from here parses another answer, so it is never in use twice.
  static thread_local pb::FindResponse r;
  if (!response || !r.ParseFromString(*response)) {
    ++stats_.bans;
    blacklist_.ban(t, pc.peer);
    s.traverse.on_failure(pc.traverse_request);
    pump(now, s.id);
    return;
  }
  note_sender(now, r.peer(), pc.peer);
  const auto asked = s.book.find(*pc.node);
  const std::size_t depth = asked != s.book.end() ? asked->second.depth : 1;
  // FindResponse.results are aligned with the keys the request carried.
  NeighborAnswers answers;
  const std::vector<NodeId> queries = s.traverse.queries_of(pc.traverse_request);
  for (int i = 0; i < r.results_size() && static_cast<std::size_t>(i) < queries.size(); ++i) {
    const pb::FindResult& fr = r.results(i);
    const NodeId& q = queries[static_cast<std::size_t>(i)];
    QueryAnswer& a = answers[q];
    const int n = std::min(fr.nearest_node_ids_size(), fr.nearest_peer_ids_size());
    for (int j = 0; j < n; ++j) {
      auto nid = NodeId::from_bytes(fr.nearest_node_ids(j));
      if (!nid || *nid == id_self()) continue;
      // A node the traverse would drop needs neither a place in the book nor a depth: once
      // a query's beam is full, most answers are farther than all of it.
      if (!s.traverse.may_accept(q, *nid)) continue;
      // A node the search met before keeps the address it was met at (most answers
      // repeat nodes already in the book): only a new one's address text is looked up.
      auto met = s.book.find(*nid);
      if (met == s.book.end()) {
        const PeerAddr& peer = address_book_->parse(fr.nearest_peer_ids(j));
        if (peer.empty() || blacklist_.is_banned(t, peer)) continue;
        met = s.book.emplace(*nid, Search::Met{peer, depth + 1}).first;
      } else if (blacklist_.is_banned(t, met->second.peer)) {
        continue;
      } else {
        met->second.depth = std::min(met->second.depth, depth + 1);
      }
      a.neighbors.push_back(*nid);
    }
    if (s.purpose == Purpose::get) {
      auto k = s.keys.find(q);
      if (k != s.keys.end()) {
        offer_found(now, s, q, fr, Contact{*pc.node, pc.peer});
        a.should_stop = !s.latest && k->second.best && k->second.best->expiration >= k->second.sufficient;
      }
    }
  }
  s.traverse.on_response(pc.traverse_request, answers);
  pump(now, s.id);
}

std::vector<Contact> Node::contacts_of(const Search& s, const std::vector<NodeId>& ids) const {
  std::vector<Contact> out;
  for (const NodeId& id : ids) {
    auto it = s.book.find(id);
    if (it != s.book.end()) out.push_back(Contact{id, it->second.peer});
  }
  return out;
}

void Node::finish_query(TimePoint now, Search& s, const FinishedQuery& q) {
  switch (s.purpose) {
    case Purpose::bootstrap: {
      auto it = ops_.find(s.op);
      if (it == ops_.end()) return;
      Op& op = *it->second;
      if (!op.refreshing) {
        // Kademlia's join: after the self-lookup, look up an id in every bucket that does not
        // hold our own id, so far parts of the id space are known before the first store.
        op.refreshing = true;
        std::vector<NodeId> queries;
        for (const Bucket& b : routing_table().buckets()) {
          if (!b.contains(id_self())) queries.push_back(b.random_id([this] { return next_random(); }));
        }
        if (!queries.empty()) {
          op.remaining = queries.size();
          pump(now, start_search(now, queries, config_.protocol.bucket_size,
                                 queries_per_call_for(queries.size(), config_.chunk_size), op.id,
                                 static_cast<int>(Purpose::bootstrap)));
          return;
        }
        op.remaining = 1;
      }
      if (--op.remaining > 0) return;
      end_op(op);
      return;
    }
    case Purpose::find_nearest: {
      auto it = ops_.find(s.op);
      if (it == ops_.end()) return;
      Op& op = *it->second;
      std::vector<Contact> nearest = contacts_of(s, q.nearest);
      if (!op.exclude_self) {
        nearest.push_back(Contact{id_self(), self_addr()});
        std::sort(nearest.begin(), nearest.end(), [&](const Contact& a, const Contact& b) {
          return a.id.distance(q.query) < b.id.distance(q.query);
        });
      }
      if (nearest.size() > op.k) nearest.resize(op.k);
      for (std::size_t pos : op.positions[q.query]) op.result.nearest[pos] = nearest;
      if (--op.remaining == 0) end_op(op);
      return;
    }
    case Purpose::store: {
      auto it = ops_.find(s.op);
      if (it == ops_.end()) return;
      on_store_found(now, *it->second, q.query, contacts_of(s, q.nearest));
      return;
    }
    case Purpose::get:
      on_get_found(now, s, q);
      return;
  }
}

Effects Node::find_nearest(TimePoint now, OpId op, const std::vector<NodeId>& queries, std::size_t k,
                           bool exclude_self) {
  last_now_ = now;
  start_find(now, op, queries, k, exclude_self, false);
  return finish_input(now);
}

void Node::start_find(TimePoint now, OpId op_id, const std::vector<NodeId>& queries, std::size_t k,
                      bool exclude_self, bool internal) {
  Op& o = add_op(op_id);
  o.kind = OpKind::find_nearest;
  o.result.nearest.resize(queries.size());
  o.k = k;
  o.exclude_self = exclude_self;
  o.internal = internal;
  std::vector<NodeId> distinct;
  for (std::size_t i = 0; i < queries.size(); ++i) {
    auto& pos = o.positions[queries[i]];
    if (pos.empty()) distinct.push_back(queries[i]);
    pos.push_back(i);
  }
  o.remaining = distinct.size();
  if (distinct.empty()) {
    end_op(o);
    return;
  }
  const std::size_t beam = std::max(k, config_.protocol.bucket_size);
  const std::uint64_t s = start_search(now, distinct, beam, queries_per_call_for(distinct.size(), distinct.size()),
                                       op_id, static_cast<int>(Purpose::find_nearest));
  pump(now, s);
}

}  // namespace apiary::core::dht
