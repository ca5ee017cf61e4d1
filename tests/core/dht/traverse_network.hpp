#pragma once
/// A simulated DHT for the traverse tests: random node ids, each knowing its k nearest
/// (brute force) plus a few random others, answering find requests from that graph, and
/// a driver that runs a Traverse against it with answers delivered in a seeded order.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "core/dht/traverse.hpp"

namespace apiary::core::dht::testing {

/// The `k` ids of `pool` nearest to `query` by XOR, nearest first, skipping `skip`.
inline std::vector<NodeId> brute_nearest(const NodeId& query, const std::vector<NodeId>& pool,
                                         std::size_t k, const std::set<NodeId>& skip = {}) {
  std::vector<std::pair<NodeId, NodeId>> by_distance;
  for (const NodeId& id : pool) {
    if (skip.count(id) == 0) by_distance.emplace_back(query ^ id, id);
  }
  const std::size_t n = std::min(k, by_distance.size());
  std::partial_sort(by_distance.begin(), by_distance.begin() + static_cast<std::ptrdiff_t>(n),
                    by_distance.end());
  std::vector<NodeId> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(by_distance[i].second);
  return out;
}

/// The simulated swarm: who knows whom, and which nodes are down.
struct Network {
  std::vector<NodeId> ids;                          ///< every node, in creation order
  std::map<NodeId, std::vector<NodeId>> contacts;   ///< per node: the nodes it knows
  std::set<NodeId> down;                            ///< nodes whose requests fail
  std::size_t k = 20;                               ///< neighbors returned per query

  /// `size` random nodes, each knowing its `k` nearest plus `extra` random others.
  Network(std::size_t size, std::size_t k_nearest, std::size_t extra, std::mt19937_64& rng)
      : k(k_nearest) {
    std::set<NodeId> seen;
    while (ids.size() < size) {
      const NodeId id = NodeId::random(rng);
      if (seen.insert(id).second) ids.push_back(id);
    }
    for (const NodeId& id : ids) {
      std::vector<NodeId> known = brute_nearest(id, ids, k + 1, {id});
      for (std::size_t i = 0; i < extra; ++i) known.push_back(ids[rng() % ids.size()]);
      contacts[id] = known;
    }
  }

  /// What `peer` answers about `query`: the k nodes it knows nearest to it.
  [[nodiscard]] std::vector<NodeId> neighbors(const NodeId& peer, const NodeId& query) const {
    return brute_nearest(query, contacts.at(peer), k, {peer});
  }
};

/// Everything observed while driving one search to its end.
struct Run {
  std::vector<NeighborRequest> requests;  ///< in issue order
  std::vector<FinishedQuery> finished;    ///< in report order
  std::size_t max_in_flight = 0;          ///< most requests outstanding at once
  bool done = false;                      ///< Traverse::done() at the end
};

/// Answers one request: the answers, or nullopt for a failed call.
using Answerer = std::function<std::optional<NeighborAnswers>(const NeighborRequest&)>;

/// The plain answerer over `net`: down nodes fail, others answer every carried query.
inline Answerer graph_answerer(const Network& net) {
  return [&net](const NeighborRequest& r) -> std::optional<NeighborAnswers> {
    if (net.down.count(r.peer) != 0) return std::nullopt;
    NeighborAnswers answers;
    for (const NodeId& q : r.queries) answers[q].neighbors = net.neighbors(r.peer, q);
    return answers;
  };
}

/// Drives `traverse` until nothing is in flight and nothing new is requested, answering
/// a pending request chosen by `rng` each step (so answers arrive out of order).
inline Run drive(Traverse& traverse, const Answerer& answer, std::mt19937_64& rng) {
  Run run;
  std::vector<NeighborRequest> pending;
  for (std::size_t step = 0; step < 1000000; ++step) {
    for (NeighborRequest& r : traverse.next_requests()) {
      run.requests.push_back(r);
      pending.push_back(std::move(r));
    }
    run.max_in_flight = std::max(run.max_in_flight, traverse.in_flight());
    for (FinishedQuery& f : traverse.take_finished()) run.finished.push_back(std::move(f));
    if (pending.empty()) break;
    const std::size_t at = static_cast<std::size_t>(rng() % pending.size());
    const NeighborRequest request = pending[at];
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(at));
    if (auto answers = answer(request)) {
      traverse.on_response(request.id, *answers);
    } else {
      traverse.on_failure(request.id);
    }
  }
  for (FinishedQuery& f : traverse.take_finished()) run.finished.push_back(std::move(f));
  run.done = traverse.done();
  return run;
}

/// `count` random ids (queries, or an outsider's own id).
inline std::vector<NodeId> random_ids(std::size_t count, std::mt19937_64& rng) {
  std::vector<NodeId> out;
  for (std::size_t i = 0; i < count; ++i) out.push_back(NodeId::random(rng));
  return out;
}

}  // namespace apiary::core::dht::testing
