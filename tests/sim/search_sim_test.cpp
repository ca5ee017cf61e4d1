// Strategy search (sim/scenarios/strategy_search.hpp): the candidates of every builder
// without repeats, each simulated and ranked by the chief's predicted step time, with the
// bytes per step and model bytes per host the simulation and the placement give.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "core/ps/logistic_regression.hpp"
#include "core/strategy/resource_spec.hpp"
#include "sim/scenarios/strategy_search.hpp"

using namespace apiary;
namespace cs = apiary::core::strategy;
namespace ss = apiary::sim::scenarios;

namespace {

/// Two nodes of two CPU devices: two replicas on each, a PS device on each.
constexpr const char* k_two_nodes =
    "nodes:\n  - address: 10.0.0.1\n    cpus: [0, 1]\n    chief: true\n"
    "  - address: 10.0.0.2\n    cpus: [0, 1]\n    ssh_config: c\nssh:\n  c: {username: u}\n";

ss::SearchConfig config(std::size_t features = 64) {
  ss::SearchConfig c;
  c.item = core::ps::logistic_graph_item(features);
  auto spec = cs::parse_resource_spec(k_two_nodes, "spec");
  REQUIRE(spec.ok());
  c.spec = *spec;
  c.steps = 4;
  c.samples = 64;
  c.batch = 4;
  return c;
}

const ss::SearchRow& row(const std::vector<ss::SearchRow>& rows, const std::string& label) {
  for (const auto& r : rows) {
    if (r.candidate.label == label) return r;
  }
  FAIL("no candidate " << label);
  return rows.front();
}

}  // namespace

TEST_CASE("the candidates: every builder's defaults first then the variants and no strategy twice", "[sim][search]") {
  auto c = config();
  auto candidates = ss::search_candidates(c.item, c.spec, false);
  REQUIRE(candidates.ok());
  REQUIRE(candidates->size() > 8);
  std::set<std::string> strategies, labels;
  bool variants = false;
  for (const auto& k : *candidates) {
    CHECK(strategies.insert(k.strategy.SerializeAsString()).second);
    CHECK(labels.insert(k.label).second);
    const bool variant = k.label != std::string(cs::to_string(k.kind));
    CHECK((variant || !variants));  // the defaults come first
    variants |= variant;
  }
  // Dense w: RandomAxisPartitionAR splits the only axis as PartitionedAR does, and
  // Parallax all-reduces every dense variable as AllReduce does.
  for (const char* name : {"PS", "PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS", "AllReduce",
                           "PartitionedAR"}) {
    CHECK(labels.count(name) == 1);
  }
  CHECK(labels.count("RandomAxisPartitionAR") == 0);
  CHECK(labels.count("Parallax") == 0);
  CHECK(labels.count("PSLoadBalancing proxy") == 1);
  CHECK(labels.count("AllReduce HorovodCompressor") == 1);
  CHECK(labels.count("PSLoadBalancing SSP 2") == 0);
  // On two variables AllReduce's chunk size 1 makes two fusion groups: another strategy.
  CHECK(labels.count("AllReduce chunk 1") == 1);
  auto stale = ss::search_candidates(c.item, c.spec, true);
  REQUIRE(stale.ok());
  CHECK(stale->size() > candidates->size());
}

TEST_CASE("a search ranks every candidate by its simulated step time", "[sim][search]") {
  auto c = config();
  auto rows = ss::search_strategies(c);
  REQUIRE(rows.ok());
  INFO(ss::format_search_table(*rows));
  REQUIRE(rows->size() == ss::search_candidates(c.item, c.spec, false)->size());
  for (std::size_t i = 0; i < rows->size(); ++i) {
    const auto& r = (*rows)[i];
    INFO(r.candidate.label);
    CHECK(r.error.empty());
    CHECK(r.step_ms > 0.0);
    CHECK(r.bytes_per_step > 0.0);
    CHECK(r.peak_memory > 0.0);
    if (i > 0) CHECK((*rows)[i - 1].step_ms <= r.step_ms);
  }
  // float16 on the wire: fewer bytes per step than float32 for the same placement.
  CHECK(row(*rows, "AllReduce HorovodCompressor").bytes_per_step < row(*rows, "AllReduce").bytes_per_step);
  // PS puts everything on the first CPU device: its host holds the shards besides its
  // replicas' copies; the other host only its replicas'.
  const auto& ps = row(*rows, "PS");
  const double model = 4.0 * 65;
  CHECK(ps.memory.at("10.0.0.1") == Approx(2 * 2 * model + model));
  CHECK(ps.memory.at("10.0.0.2") == Approx(2 * 2 * model));
  // A proxy on every node holds one more copy of the dense shards.
  CHECK(row(*rows, "PS proxy").memory.at("10.0.0.2") == Approx(2 * 2 * model + model));
  // The same search replays.
  auto again = ss::search_strategies(c);
  REQUIRE(again.ok());
  CHECK(ss::format_search_table(*again) == ss::format_search_table(*rows));
}

TEST_CASE("a search budget simulates the builders' defaults first", "[sim][search]") {
  auto c = config();
  c.budget = 3;
  auto rows = ss::search_strategies(c);
  REQUIRE(rows.ok());
  REQUIRE(rows->size() == 3);
  std::set<std::string> labels;
  for (const auto& r : *rows) labels.insert(r.candidate.label);
  CHECK(labels == std::set<std::string>{"PS", "PSLoadBalancing", "PartitionedPS"});
}

TEST_CASE("a search refuses another model and fewer than two steps", "[sim][search]") {
  auto c = config();
  c.item.variables.push_back(c.item.variables.front());
  c.item.variables.back().name = "dense/kernel:0";
  auto other = ss::search_strategies(c);
  REQUIRE_FALSE(other.ok());
  CHECK(other.error().code == errc::invalid_argument);
  CHECK_THAT(other.error().message, Catch::Contains("logreg/w:0") && Catch::Contains("dense/kernel:0"));
  auto few = config();
  few.steps = 1;
  auto short_run = ss::search_strategies(few);
  REQUIRE_FALSE(short_run.ok());
  CHECK_THAT(short_run.error().message, Catch::Contains("at least 2"));
}
