#include "core/dht/traverse.hpp"

#include <algorithm>
#include <functional>
#include <tuple>
#include <utility>

#include "core/dht/rules.hpp"

namespace apiary::core::dht {

Status validate(const TraverseConfig& config) {
  return require_all({
      {config.beam_size > 0,
       "traverse beam_size must be >= 1 node, got 0; set TraverseConfig::beam_size (usually the bucket size, 20)"},
      {config.num_workers > 0, "traverse num_workers must be >= 1 request, got 0; set TraverseConfig::num_workers"},
      {config.queries_per_call > 0,
       "traverse queries_per_call must be >= 1 query, got 0; set TraverseConfig::queries_per_call"},
  });
}

Traverse::Traverse(const std::vector<NodeId>& queries, const std::vector<NodeId>& initial_nodes,
                   const std::vector<NodeId>& visited, TraverseConfig config)
    : config_(config) {
  config_.beam_size = std::max<std::size_t>(config_.beam_size, 1);
  config_.num_workers = std::max<std::size_t>(config_.num_workers, 1);
  config_.queries_per_call = std::max<std::size_t>(config_.queries_per_call, 1);
  for (const NodeId& query : queries) {
    auto [it, inserted] = queries_.try_emplace(query);
    if (!inserted) continue;
    QueryState& state = it->second;
    // The visited set starts as the caller's (its own id): never asked, never returned.
    state.visited.insert(visited.begin(), visited.end());
    for (const NodeId& node : initial_nodes) offer(query, state, node, false);
  }
  unfinished_ = queries_.size();
  // A query with no initial candidate has nothing to search: it ends at once.
  settle();
}

void Traverse::offer(const NodeId& query, QueryState& state, const NodeId& node,
                     bool responded) {
  const Entry entry{query ^ node, node};
  // Keep only nodes that would enter the beam: nearer than its farthest, or it is not full
  // (tested first: it is the cheapest, and drops most answers once the beam is full).
  if (!within_beam(state, entry.first)) return;
  if (state.known.count(node) != 0 || failed_.count(node) != 0) return;
  // A visited node enters only as the peer that just answered (a packed query may visit
  // a peer it never knew); the caller's own id never does.
  if (!responded && state.visited.count(node) != 0) return;
  state.known.insert(node);
  if (!responded) state.candidates.insert(entry);
  state.beam.insert(entry);
  if (state.beam.size() > config_.beam_size) {
    // The farthest leaves the beam but is kept aside in case a failed peer frees a place.
    state.spill.push_back(state.beam.farthest());
    state.beam.pop_farthest();
  }
}

void Traverse::Ranked::insert(const Entry& e) {
  auto it = std::lower_bound(v_.begin(), v_.end(), e, std::greater<>());
  if (it == v_.end() || *it != e) v_.insert(it, e);
}

bool Traverse::Ranked::erase(const Entry& e) {
  auto it = std::lower_bound(v_.begin(), v_.end(), e, std::greater<>());
  if (it == v_.end() || *it != e) return false;
  v_.erase(it);
  return true;
}

bool Traverse::within_beam(const QueryState& state, const NodeId& distance) const {
  return state.beam.size() < config_.beam_size || distance < state.beam.farthest().first;
}

bool Traverse::may_accept(const NodeId& query, const NodeId& node) const {
  auto it = queries_.find(query);
  return it != queries_.end() && !it->second.finished && within_beam(it->second, query ^ node);
}

void Traverse::settle() {
  for (auto& [query, state] : queries_) settle(query, state);
}

void Traverse::settle(std::vector<NodeId> queries) {
  std::sort(queries.begin(), queries.end());  // queries_'s order
  for (const NodeId& query : queries) {
    auto it = queries_.find(query);
    if (it != queries_.end()) settle(query, it->second);
  }
}

void Traverse::settle(const NodeId& query, QueryState& state) {
  if (state.finished) return;
  while (!state.candidates.empty()) {
    const Entry& front = state.candidates.nearest();
    if (state.visited.count(front.second) != 0 || failed_.count(front.second) != 0) {
      state.candidates.pop_nearest();
      continue;
    }
    break;
  }
  // Candidates exhausted within the bound and no answer pending for it: the query ends.
  if (!has_candidate(state) && state.carried_in_flight == 0) finish(query, state, false);
}

bool Traverse::has_candidate(const QueryState& state) const {
  if (state.candidates.empty()) return false;
  // Farther candidates stay: a failed peer leaving the beam can bring them back in bound.
  return state.beam.size() < config_.beam_size ||
         !(state.beam.farthest().first < state.candidates.nearest().first);
}

void Traverse::finish(const NodeId& query, QueryState& state, bool stopped) {
  state.finished = true;
  --unfinished_;
  FinishedQuery report;
  report.query = query;
  report.stopped = stopped;
  report.nearest.reserve(state.beam.size());
  const std::vector<Entry>& beam = state.beam.entries();
  for (auto it = beam.rbegin(); it != beam.rend(); ++it) report.nearest.push_back(it->second);
  report.visited.insert(state.visited.begin(), state.visited.end());
  finished_.push_back(std::move(report));
  state.candidates.clear();
  state.spill.clear();
  state.known.clear();
}

std::vector<NeighborRequest> Traverse::next_requests() {
  std::vector<NeighborRequest> out;
  // Every change settled the queries it touched, so all are settled here.
  while (in_flight_.size() < config_.num_workers) {
    // Least-explored query first: fewest requests in flight for it, then the nearest
    // best candidate, then the smallest id.
    auto chosen = queries_.end();
    std::tuple<std::size_t, NodeId, NodeId> chosen_key{};
    for (auto it = queries_.begin(); it != queries_.end(); ++it) {
      const QueryState& state = it->second;
      if (state.finished || !has_candidate(state)) continue;
      std::tuple<std::size_t, NodeId, NodeId> key{state.primary_in_flight,
                                                  state.candidates.nearest().first, it->first};
      if (chosen == queries_.end() || key < chosen_key) {
        chosen = it;
        chosen_key = key;
      }
    }
    if (chosen == queries_.end()) break;
    // Its nearest candidate (settle() left only unvisited ones in front).
    const NodeId peer = chosen->second.candidates.nearest().second;

    // Pack the unfinished queries nearest to the peer that have not visited it yet.
    std::vector<std::pair<NodeId, NodeId>> others;  // (distance to peer, query)
    for (const auto& [query, state] : queries_) {
      if (query == chosen->first || state.finished || state.visited.count(peer) != 0) continue;
      others.emplace_back(query ^ peer, query);
    }
    std::sort(others.begin(), others.end());
    if (others.size() > config_.queries_per_call - 1) others.resize(config_.queries_per_call - 1);

    NeighborRequest request;
    request.id = next_id_++;
    request.peer = peer;
    request.queries.push_back(chosen->first);
    for (const auto& other : others) request.queries.push_back(other.second);

    // Mark the peer visited for every carried query and occupy one worker.
    for (const NodeId& query : request.queries) {
      QueryState& state = queries_[query];
      state.visited.insert(peer);
      state.candidates.erase(Entry{query ^ peer, peer});
      ++state.carried_in_flight;
    }
    ++chosen->second.primary_in_flight;
    in_flight_.emplace(request.id, Pending{peer, request.queries});
    settle(request.queries);
    out.push_back(std::move(request));
  }
  return out;
}

bool Traverse::release(TraverseRequestId id, Pending& out) {
  auto it = in_flight_.find(id);
  if (it == in_flight_.end()) return false;
  out = std::move(it->second);
  in_flight_.erase(it);
  --queries_[out.queries.front()].primary_in_flight;
  for (const NodeId& query : out.queries) --queries_[query].carried_in_flight;
  return true;
}

void Traverse::on_response(TraverseRequestId id, const NeighborAnswers& answers) {
  Pending pending;
  if (!release(id, pending)) return;
  for (const auto& [query, answer] : answers) {
    if (std::find(pending.queries.begin(), pending.queries.end(), query) ==
        pending.queries.end()) {
      continue;  // not carried by this request
    }
    QueryState& state = queries_[query];
    if (state.finished) continue;  // ended meanwhile (stopped, or by another answer)
    if (answer.should_stop) {
      finish(query, state, true);
      continue;
    }
    for (const NodeId& neighbor : answer.neighbors) offer(query, state, neighbor, false);
  }
  // The peer is alive: every carried query may keep it among its nearest.
  for (const NodeId& query : pending.queries) {
    QueryState& state = queries_[query];
    if (!state.finished) offer(query, state, pending.peer, true);
  }
  settle(std::move(pending.queries));
}

void Traverse::on_failure(TraverseRequestId id) {
  Pending pending;
  if (!release(id, pending)) return;
  // The peer is down: it is neither a candidate nor a result of any query any more.
  failed_.insert(pending.peer);
  for (auto& [query, state] : queries_) {
    if (state.finished) continue;
    const Entry entry{query ^ pending.peer, pending.peer};
    state.candidates.erase(entry);
    std::vector<Entry>& spill = state.spill;
    if (auto at = std::find(spill.begin(), spill.end(), entry); at != spill.end()) {
      *at = spill.back();
      spill.pop_back();
    }
    if (state.beam.erase(entry) && !spill.empty()) {
      // The nearest node pushed out earlier takes the freed place in the beam.
      auto nearest = std::min_element(spill.begin(), spill.end(),
                                      [](const Entry& a, const Entry& b) { return a.first < b.first; });
      state.beam.insert(*nearest);
      *nearest = spill.back();
      spill.pop_back();
    }
  }
  settle();
}

void Traverse::stop(const NodeId& query) {
  auto it = queries_.find(query);
  if (it == queries_.end() || it->second.finished) return;
  finish(query, it->second, true);
}

std::vector<FinishedQuery> Traverse::take_finished() {
  std::vector<FinishedQuery> out;
  out.swap(finished_);
  return out;
}

}  // namespace apiary::core::dht
