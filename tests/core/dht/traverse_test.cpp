// Tests of Traverse: a hand-checked trace of the selection rules, then searches over a
// simulated swarm of 1,000 nodes compared with brute force. Each node knows its 20
// nearest plus 10 random nodes: under XOR, "my k nearest" lists form tight clusters, and
// with too few random links a beam can settle in the wrong cluster (5 links: 4 misses in
// 640 searches; 10 links: none in 1,280), so exactness is a property of the graph here.
#include "core/dht/traverse.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "tests/core/dht/traverse_network.hpp"

namespace {

using namespace apiary::core::dht;
using namespace apiary::core::dht::testing;

/// The id whose last byte is `low` (all others 0).
NodeId small_id(std::uint8_t low) {
  NodeId::Bytes bytes{};
  bytes.back() = low;
  return NodeId(bytes);
}

TraverseConfig config_of(std::size_t beam, std::size_t workers, std::size_t per_call) {
  TraverseConfig config;
  config.beam_size = beam;
  config.num_workers = workers;
  config.queries_per_call = per_call;
  return config;
}

/// The finished reports by query; fails the test if a query is reported twice.
std::map<NodeId, FinishedQuery> by_query(const std::vector<FinishedQuery>& finished) {
  std::map<NodeId, FinishedQuery> out;
  for (const FinishedQuery& f : finished) {
    const bool first_report = out.emplace(f.query, f).second;
    CHECK(first_report);
  }
  return out;
}

/// A seeded swarm of 1,000 nodes (20 nearest and 10 random contacts each), searched for
/// `num_queries` random ids from the nodes at `initial_at`, by a random self; drawn from
/// `rng` in that order.
struct Search {
  std::mt19937_64 rng;
  const Network net;
  const std::vector<NodeId> queries;
  const std::vector<NodeId> initial;
  const NodeId self;

  Search(std::uint64_t seed, std::size_t num_queries, const std::vector<std::size_t>& initial_at)
      : rng(seed),
        net(1000, 20, 10, rng),
        queries(random_ids(num_queries, rng)),
        initial(nodes_at(net, initial_at)),
        self(NodeId::random(rng)) {}

  static std::vector<NodeId> nodes_at(const Network& net, const std::vector<std::size_t>& at) {
    std::vector<NodeId> out;
    for (std::size_t i : at) out.push_back(net.ids[i]);
    return out;
  }
};

}  // namespace

TEST_CASE("traverse config is validated", "[traverse]") {
  CHECK(validate(TraverseConfig{}).ok());
  const auto bad_beam = validate(config_of(0, 4, 1));
  REQUIRE_FALSE(bad_beam.ok());
  CHECK(bad_beam.error().message.find("beam_size") != std::string::npos);
  CHECK_FALSE(validate(config_of(20, 0, 1)).ok());
  CHECK_FALSE(validate(config_of(20, 4, 0)).ok());
}

TEST_CASE("a search without initial nodes ends at once, empty", "[traverse]") {
  Traverse traverse({small_id(1), small_id(2)}, {}, {small_id(0)}, config_of(20, 4, 2));
  CHECK(traverse.next_requests().empty());
  CHECK(traverse.done());
  const auto finished = by_query(traverse.take_finished());
  REQUIRE(finished.size() == 2);
  CHECK(finished.at(small_id(1)).nearest.empty());
  CHECK(finished.at(small_id(1)).visited == std::set<NodeId>{small_id(0)});
  CHECK(traverse.take_finished().empty());
}

TEST_CASE("least explored query first, nearest candidate, packing, stop, failure",
          "[traverse]") {
  const NodeId self = small_id(0x00), q1 = small_id(0x10), q2 = small_id(0x80);
  const NodeId a = small_id(0x11), b = small_id(0x84), c = small_id(0x13), d = small_id(0x12);
  Traverse traverse({q2, q1}, {a, b, c, self}, {self}, config_of(2, 2, 2));

  // q1's nearest candidate, a, is at distance 1, q2's, b, at 4: q1 goes first, packing
  // q2; then q2 (no request for it yet) goes before q1 (whose next, c, is at 3).
  const auto first = traverse.next_requests();
  REQUIRE(first.size() == 2);
  CHECK(first[0].peer == a);
  CHECK(first[0].queries == std::vector<NodeId>{q1, q2});
  CHECK(first[1].peer == b);
  CHECK(first[1].queries == std::vector<NodeId>{q2, q1});
  CHECK(traverse.next_requests().empty());  // both workers busy

  // b says q2 is satisfied and tells q1 about d (distance 2, nearer than c).
  NeighborAnswers from_b;
  from_b[q2].should_stop = true;
  from_b[q1].neighbors = {d, self, q2};
  traverse.on_response(first[1].id, from_b);
  auto finished = traverse.take_finished();
  REQUIRE(finished.size() == 1);
  CHECK(finished[0].query == q2);
  CHECK(finished[0].stopped);
  CHECK(finished[0].nearest == std::vector<NodeId>{b, a});
  CHECK(finished[0].visited == std::set<NodeId>{self, a, b});

  // One worker free: q1's nearest unvisited candidate is d; q2 has ended, so no packing.
  const auto second = traverse.next_requests();
  REQUIRE(second.size() == 1);
  CHECK(second[0].peer == d);
  CHECK(second[0].queries == std::vector<NodeId>{q1});

  // a answers nothing new; d fails, so it leaves q1's beam and c is worth asking again.
  traverse.on_response(first[0].id, NeighborAnswers{});
  traverse.on_failure(second[0].id);
  const auto third = traverse.next_requests();
  REQUIRE(third.size() == 1);
  CHECK(third[0].peer == c);
  NeighborAnswers from_c;
  from_c[q1].neighbors = {d};  // a failed peer is never accepted again
  traverse.on_response(third[0].id, from_c);
  traverse.on_response(third[0].id, from_c);  // a repeated answer is ignored

  CHECK(traverse.done());
  finished = traverse.take_finished();
  REQUIRE(finished.size() == 1);
  CHECK(finished[0].query == q1);
  CHECK_FALSE(finished[0].stopped);
  CHECK(finished[0].nearest == std::vector<NodeId>{a, c});
  CHECK(finished[0].visited == std::set<NodeId>{self, a, b, c, d});
}

TEST_CASE("beam search over 1000 nodes finds the exact k nearest", "[traverse]") {
  std::mt19937_64 rng(20261130);
  const Network net(1000, 20, 10, rng);
  const NodeId self = NodeId::random(rng);
  const std::vector<NodeId> queries = random_ids(32, rng);
  const std::vector<NodeId> initial{net.ids[1], net.ids[2], net.ids[3]};
  Traverse traverse(queries, initial, {self}, config_of(20, 4, 5));
  const Run run = drive(traverse, graph_answerer(net), rng);

  CHECK(run.done);
  const auto finished = by_query(run.finished);
  REQUIRE(finished.size() == queries.size());
  for (const NodeId& q : queries) {
    const FinishedQuery& f = finished.at(q);
    CHECK_FALSE(f.stopped);
    CHECK(f.nearest == brute_nearest(q, net.ids, 20));
    CHECK(f.visited.count(self) == 1);
  }
  for (const NeighborRequest& r : run.requests) CHECK(r.peer != self);
}

TEST_CASE("queries share the workers and pack into calls", "[traverse]") {
  Search search(77, 16, {10, 11});
  auto& [rng, net, queries, initial, self] = search;

  Traverse packed(queries, initial, {self}, config_of(20, 3, 4));
  const Run run = drive(packed, graph_answerer(net), rng);
  CHECK(run.done);
  CHECK(run.max_in_flight == 3);
  CHECK(by_query(run.finished).size() == queries.size());
  std::set<std::pair<NodeId, NodeId>> asked;  // (query, peer)
  std::size_t multi = 0;
  for (const NeighborRequest& r : run.requests) {
    REQUIRE(!r.queries.empty());
    CHECK(r.queries.size() <= 4);
    if (r.queries.size() > 1) ++multi;
    for (const NodeId& q : r.queries) CHECK(asked.emplace(q, r.peer).second);
  }
  CHECK(multi > 0);

  // Packing answers several queries per call: fewer calls than one query per call.
  Traverse single(queries, initial, {self}, config_of(20, 3, 1));
  const Run unpacked = drive(single, graph_answerer(net), rng);
  CHECK(run.requests.size() < unpacked.requests.size());
  for (const NodeId& q : queries) {
    CHECK(by_query(run.finished).at(q).nearest == brute_nearest(q, net.ids, 20));
  }
}

TEST_CASE("a search survives failing peers", "[traverse]") {
  std::mt19937_64 rng(4242);
  Network net(1000, 20, 10, rng);
  for (std::size_t i = 0; i < 100; ++i) net.down.insert(net.ids[rng() % net.ids.size()]);
  std::vector<NodeId> alive;
  for (const NodeId& id : net.ids) {
    if (net.down.count(id) == 0) alive.push_back(id);
  }
  const std::vector<NodeId> queries = random_ids(16, rng);
  const std::vector<NodeId> initial{net.ids[0], net.ids[1], net.ids[2], net.ids[3]};
  Traverse traverse(queries, initial, {NodeId::random(rng)}, config_of(20, 4, 4));
  const Run run = drive(traverse, graph_answerer(net), rng);

  CHECK(run.done);
  const auto finished = by_query(run.finished);
  REQUIRE(finished.size() == queries.size());
  std::size_t found = 0;
  for (const NodeId& q : queries) {
    const std::vector<NodeId>& nearest = finished.at(q).nearest;
    CHECK(nearest.size() == 20);
    for (const NodeId& n : nearest) CHECK(net.down.count(n) == 0);
    const std::vector<NodeId> truth = brute_nearest(q, alive, 20);
    const std::set<NodeId> truth_set(truth.begin(), truth.end());
    for (const NodeId& n : nearest) found += truth_set.count(n);
  }
  // Nearly all of the alive k nearest are found (dead nodes hide a few paths).
  CHECK(found * 100 >= queries.size() * 20 * 95);
  std::set<NodeId> failed_asked;
  for (const NeighborRequest& r : run.requests) {
    if (net.down.count(r.peer) != 0) CHECK(failed_asked.insert(r.peer).second);
  }
  CHECK(!failed_asked.empty());
}

TEST_CASE("should_stop and stop() end a query early, reported once", "[traverse]") {
  Search search(99, 8, {5, 6});
  auto& [rng, net, queries, initial, self] = search;

  Traverse full(queries, initial, {self}, config_of(20, 4, 3));
  const Run full_run = drive(full, graph_answerer(net), rng);

  // A value lives on each query's 3 nearest nodes; finding it stops the query.
  const auto plain = graph_answerer(net);
  auto with_values = [&](const NeighborRequest& r) {
    auto answers = plain(r);
    for (auto& [q, answer] : *answers) {
      const auto holders = brute_nearest(q, search.net.ids, 3);
      answer.should_stop = std::find(holders.begin(), holders.end(), r.peer) != holders.end();
    }
    return answers;
  };
  Traverse early(queries, initial, {self}, config_of(20, 4, 3));
  const Run early_run = drive(early, with_values, rng);
  CHECK(early_run.done);
  const auto finished = by_query(early_run.finished);
  REQUIRE(finished.size() == queries.size());
  for (const NodeId& q : queries) {
    CHECK(finished.at(q).stopped);
    const auto holders = brute_nearest(q, net.ids, 3);
    std::size_t holders_visited = 0;
    for (const NodeId& h : holders) holders_visited += finished.at(q).visited.count(h);
    CHECK(holders_visited >= 1);
  }
  CHECK(early_run.requests.size() < full_run.requests.size());

  // stop() ends a query before any answer; later answers for it change nothing.
  Traverse cancelled(queries, initial, {self}, config_of(20, 4, 3));
  cancelled.stop(queries[0]);
  cancelled.stop(queries[0]);
  const Run cancelled_run = drive(cancelled, graph_answerer(net), rng);
  const auto reports = by_query(cancelled_run.finished);
  REQUIRE(reports.size() == queries.size());
  CHECK(reports.at(queries[0]).stopped);
  CHECK(reports.at(queries[0]).nearest.size() == 2);
}

TEST_CASE("with one worker the request order is deterministic", "[traverse]") {
  Search search(5, 6, {7, 8, 9});
  auto& [rng, net, queries, initial, self] = search;
  std::vector<std::vector<std::pair<NodeId, std::vector<NodeId>>>> orders;
  for (std::uint64_t seed : {1u, 2u}) {
    std::mt19937_64 order_rng(seed);
    // Duplicated queries are searched (and reported) once.
    std::vector<NodeId> doubled = queries;
    doubled.insert(doubled.end(), queries.begin(), queries.end());
    Traverse traverse(doubled, initial, {self}, config_of(20, 1, 2));
    const Run run = drive(traverse, graph_answerer(net), order_rng);
    CHECK(run.done);
    CHECK(run.max_in_flight == 1);
    CHECK(by_query(run.finished).size() == queries.size());
    orders.emplace_back();
    for (const NeighborRequest& r : run.requests) orders.back().emplace_back(r.peer, r.queries);
  }
  CHECK(orders[0].size() > queries.size());
  CHECK(orders[0] == orders[1]);
}
