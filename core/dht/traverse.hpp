#pragma once
/// The DHT's search: a Kademlia beam search for many queries at once, sharing a fixed
/// number of workers (hivemind's `traverse_dht`, reference §2.5). Pure and event-driven:
/// the caller asks `next_requests()` what to send, sends each request (a find call to one
/// peer for some queries), and feeds each outcome back through `on_response` or
/// `on_failure`; finished queries come out of `take_finished()`. No clock, no threads, no
/// randomness: equal inputs give equal requests (ties broken by id).
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "core/dht/node_id.hpp"
#include "messages/result.hpp"

namespace apiary::core::dht {

/// Tuning of one search.
struct TraverseConfig {
  /// Nearest nodes kept per query; the search for a query ends once no unvisited node
  /// nearer than its beam_size-th nearest known node remains (must be >= 1).
  std::size_t beam_size = 20;
  /// Requests in flight at once, over all queries (must be >= 1).
  std::size_t num_workers = 4;
  /// Most queries packed into one request: the query the request is for plus up to
  /// `queries_per_call - 1` others (must be >= 1; hivemind uses sqrt(#queries)).
  std::size_t queries_per_call = 1;
};

/// Checks a TraverseConfig; the error names the bad field, its value and the accepted range.
[[nodiscard]] Status validate(const TraverseConfig& config);

/// Identifies one request issued by a Traverse; chosen by the Traverse, unique per search.
using TraverseRequestId = std::uint64_t;

/// One request a free worker should send now: ask `peer` for its nearest neighbors of
/// each of `queries` (the first one is the query the peer was chosen for).
struct NeighborRequest {
  TraverseRequestId id = 0;     ///< pass back to on_response / on_failure
  NodeId peer;                  ///< the node to ask
  std::vector<NodeId> queries;  ///< 1 .. queries_per_call distinct queries, primary first
};

/// A peer's answer for one query.
struct QueryAnswer {
  std::vector<NodeId> neighbors;  ///< the nodes the peer knows nearest to the query
  bool should_stop = false;       ///< true: the query is satisfied (e.g. value found); end it
};

/// A peer's answers, by query. Queries the request did not carry are ignored; carried
/// queries left out simply learn nothing from this peer.
using NeighborAnswers = std::map<NodeId, QueryAnswer>;

/// The outcome of one query, reported once when it ends.
struct FinishedQuery {
  NodeId query;                ///< the searched id
  std::vector<NodeId> nearest; ///< up to beam_size nodes found nearest to it, nearest first
  std::set<NodeId> visited;    ///< nodes asked about it (plus the initial visited set)
  bool stopped = false;        ///< true if it ended through should_stop
};

/// One multi-query beam search. Per query it keeps the unvisited candidates (nearest
/// first), the beam (the beam_size nearest nodes known) and the visited nodes. A failed
/// peer is dropped from every beam and never asked or accepted again (as the DHT
/// blacklists it), which hivemind's traverse leaves to its caller.
class Traverse {
 public:
  /// Searches the distinct `queries`, starting from `initial_nodes`. Nodes in `visited`
  /// (the caller's own id, typically) are never asked nor returned as nearest. A config
  /// that fails validate() has its zero fields treated as 1.
  Traverse(const std::vector<NodeId>& queries, const std::vector<NodeId>& initial_nodes,
           const std::vector<NodeId>& visited, TraverseConfig config);

  /// The requests the free workers should issue now, in order: for each free worker the
  /// least-explored unfinished query (fewest requests in flight for it, then nearest best
  /// candidate, then smallest id) picks its nearest candidate not yet visited and within
  /// its beam, and packs up to queries_per_call - 1 other unfinished queries that have
  /// not visited that peer, nearest to the peer first. Empty when no worker is free or no
  /// candidate is left.
  [[nodiscard]] std::vector<NeighborRequest> next_requests();

  /// Feeds back request `id`'s answers: should_stop ends its query; neighbors enter the
  /// query's candidates and beam when nearer than its beam's farthest node (or the beam
  /// is not full), and so does the peer itself for every query it answered. Unknown or
  /// already answered ids are ignored.
  void on_response(TraverseRequestId id, const NeighborAnswers& answers);

  /// False when `node`, answered for `query`, could not enter the query's beam now: the
  /// query is unknown or ended, or its beam is full of nodes nearer to it. A cheap test
  /// (no lookup of `node`) that lets a caller skip what on_response would drop anyway.
  [[nodiscard]] bool may_accept(const NodeId& query, const NodeId& node) const;

  /// Request `id` failed (timeout, peer down): its peer is dropped from every query's
  /// candidates and beam and is never asked again. Unknown ids are ignored.
  void on_failure(TraverseRequestId id);

  /// The queries request `id` carries, primary first; empty once its outcome is in.
  [[nodiscard]] std::vector<NodeId> queries_of(TraverseRequestId id) const {
    auto it = in_flight_.find(id);
    return it == in_flight_.end() ? std::vector<NodeId>{} : it->second.queries;
  }

  /// Ends `query` now (cancelled by the caller); no effect if unknown or already ended.
  void stop(const NodeId& query);

  /// The queries that ended since the last call, each reported exactly once, in the
  /// order they ended.
  [[nodiscard]] std::vector<FinishedQuery> take_finished();

  /// True once every query has ended (requests may still be in flight; their answers
  /// no longer matter and the caller may drop them).
  [[nodiscard]] bool all_finished() const { return unfinished_ == 0; }
  /// True once every query has ended and no request is in flight.
  [[nodiscard]] bool done() const { return all_finished() && in_flight_.empty(); }
  /// Requests issued whose outcome has not come back yet (busy workers).
  [[nodiscard]] std::size_t in_flight() const { return in_flight_.size(); }
  /// Requests issued so far.
  [[nodiscard]] std::size_t requests_issued() const { return next_id_ - 1; }

 private:
  /// (distance to the query, node): ordered nearest first; distances to one query are
  /// unique, so the node never decides.
  using Entry = std::pair<NodeId, NodeId>;

  /// A set of entries in one sorted vector, nearest last: small (a beam, the candidates
  /// of one query), so contiguous beats a tree, and the nearest leaves at no cost.
  class Ranked {
   public:
    [[nodiscard]] bool empty() const { return v_.empty(); }
    [[nodiscard]] std::size_t size() const { return v_.size(); }
    [[nodiscard]] const Entry& nearest() const { return v_.back(); }
    [[nodiscard]] const Entry& farthest() const { return v_.front(); }
    /// Adds `e` unless present.
    void insert(const Entry& e);
    /// Removes `e`; false if absent.
    bool erase(const Entry& e);
    void pop_nearest() { v_.pop_back(); }
    void pop_farthest() { v_.erase(v_.begin()); }
    void clear() { v_.clear(); }
    /// Farthest first.
    [[nodiscard]] const std::vector<Entry>& entries() const { return v_; }

   private:
    std::vector<Entry> v_;  ///< farthest first
  };

  /// Everything known about one query.
  struct QueryState {
    Ranked candidates;                    ///< unvisited nodes worth asking
    Ranked beam;                          ///< the beam_size nearest known nodes
    std::vector<Entry> spill;             ///< known nodes pushed out of the beam, unordered
                                          ///< (read only when a failed peer frees a place)
    absl::flat_hash_set<NodeId, NodeIdHash> known;  ///< every node ever put in the beam
    absl::flat_hash_set<NodeId, NodeIdHash> visited;  ///< nodes asked about this query
    std::size_t primary_in_flight = 0;    ///< requests in flight chosen for this query
    std::size_t carried_in_flight = 0;    ///< requests in flight carrying this query
    bool finished = false;
  };

  /// A request waiting for its outcome.
  struct Pending {
    NodeId peer;
    std::vector<NodeId> queries;
  };

  /// Adds `node` to `query`'s beam, and to its candidates unless it is the peer that just
  /// `responded`, if it is new, not failed and within the bound.
  void offer(const NodeId& query, QueryState& state, const NodeId& node, bool responded);
  /// True if `state`'s nearest candidate lies within its bound (the beam's farthest).
  [[nodiscard]] bool has_candidate(const QueryState& state) const;
  /// True when a node at `distance` from the query would be among its beam_size nearest.
  [[nodiscard]] bool within_beam(const QueryState& state, const NodeId& distance) const;
  /// Drops visited and failed candidates of every unfinished query and ends those with
  /// none left within the bound and no request in flight carrying them.
  void settle();
  /// The same for `queries` only (those a request or its answer changed; the others
  /// stay settled), in the order settle() visits them.
  void settle(std::vector<NodeId> queries);
  /// settle() for one query.
  void settle(const NodeId& query, QueryState& state);
  /// Ends `query` and queues its report.
  void finish(const NodeId& query, QueryState& state, bool stopped);
  /// Releases request `id`'s worker; false if `id` is not in flight.
  bool release(TraverseRequestId id, Pending& out);

  TraverseConfig config_;
  std::map<NodeId, QueryState> queries_;
  absl::flat_hash_set<NodeId, NodeIdHash> failed_;
  std::map<TraverseRequestId, Pending> in_flight_;
  std::vector<FinishedQuery> finished_;
  std::size_t unfinished_ = 0;
  TraverseRequestId next_id_ = 1;
};

}  // namespace apiary::core::dht
