// plan_allreduce: golden fusion groups from the AllReduce builders, spec resolution
// (AUTO and NCCL with and without GPUs, one transport per group), partitioned AR pieces,
// sparse variables, mixed (Parallax) strategies split into their all-reduce and PS parts,
// and the strategies it refuses.
#include <catch2/catch.hpp>

#include "core/collective/ar_plan.hpp"
#include "core/ps/plan.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/resource_spec.hpp"

using namespace apiary;
namespace cc = core::collective;
namespace cs = core::strategy;
using Sync = pb::autodist::AllReduceSynchronizer;

namespace {

/// Five dense variables: a[6], b[4], c[3, 2], d[1], e[8].
cs::GraphItem five_variables() {
  cs::GraphItem item;
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> vars = {
      {"a:0", {6}}, {"b:0", {4}}, {"c:0", {3, 2}}, {"d:0", {1}}, {"e:0", {8}}};
  for (const auto& [name, shape] : vars) {
    cs::Variable v;
    v.name = name;
    v.shape = shape;
    item.variables.push_back(v);
  }
  return item;
}

cs::ResourceSpec cpu_spec() {
  auto spec = cs::parse_resource_spec("nodes:\n  - address: localhost\n    cpus: [0, 1, 2, 3]\n", "spec");
  REQUIRE(spec.ok());
  return *spec;
}

pb::autodist::Strategy build(cs::BuilderKind kind, cs::BuilderOptions o, const cs::GraphItem& item) {
  auto s = cs::build_strategy(kind, o, item, cpu_spec(), "20260101T000000M000000");
  REQUIRE(s.ok());
  return *s;
}

}  // namespace

TEST_CASE("AllReduce with chunk_size 2 fuses variables two by two, in node order", "[collective][unit]") {
  cs::BuilderOptions o;
  o.chunk_size = 2;
  o.all_reduce_spec = Sync::RING;
  o.compressor = Sync::HorovodCompressorEF;
  const auto item = five_variables();
  auto plan = cc::plan_allreduce(build(cs::BuilderKind::all_reduce, o, item), item);
  REQUIRE(plan.ok());
  REQUIRE(plan->groups.size() == 3);
  std::vector<std::vector<std::string>> names;
  for (const auto& g : plan->groups) {
    names.emplace_back();
    for (auto t : g.tensors) names.back().push_back(plan->tensors[t].name);
  }
  CHECK(names == std::vector<std::vector<std::string>>{{"a:0", "b:0"}, {"c:0", "d:0"}, {"e:0"}});
  CHECK(plan->groups[0].group == 0);
  CHECK(plan->groups[2].group == 2);
  CHECK(plan->tensors[2].size == 6);
  for (const auto& t : plan->tensors) CHECK(t.compressor == cc::CompressorKind::horovod_ef);
  CHECK(plan->replicas.size() == 4);
  CHECK(plan->notes.empty());
}

TEST_CASE("one fusion group when chunk_size covers every variable", "[collective][unit]") {
  cs::BuilderOptions o;
  o.chunk_size = 128;
  o.all_reduce_spec = Sync::AUTO;
  const auto item = five_variables();
  auto plan = cc::plan_allreduce(build(cs::BuilderKind::all_reduce, o, item), item);
  REQUIRE(plan.ok());
  REQUIRE(plan->groups.size() == 1);
  CHECK(plan->groups[0].tensors == std::vector<std::size_t>{0, 1, 2, 3, 4});
  CHECK(plan->groups[0].transport == cc::Transport::ring);  // AUTO without GPUs
  CHECK(plan->notes.empty());
}

TEST_CASE("NCCL without GPUs runs as RING with a note, or is refused when strict", "[collective][unit]") {
  const auto item = five_variables();
  const auto strategy = build(cs::BuilderKind::all_reduce, {}, item);  // the default spec is NCCL
  auto plan = cc::plan_allreduce(strategy, item);
  REQUIRE(plan.ok());
  for (const auto& t : plan->tensors) CHECK(t.transport == cc::Transport::ring);
  REQUIRE(plan->notes.size() == 1);
  CHECK(plan->notes[0].find("NCCL runs as RING") != std::string::npos);

  cc::ArOptions strict;
  strict.strict_nccl = true;
  auto refused = cc::plan_allreduce(strategy, item, strict);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == errc::unsupported);
  CHECK(refused.error().message.find("--spec RING") != std::string::npos);

  // A GPU on every replica: NCCL runs over NCCL, strict or not, with no fallback note.
  for (bool strict_nccl : {false, true}) {
    cc::ArOptions gpus;
    gpus.have_gpus = true;
    gpus.strict_nccl = strict_nccl;
    auto nccl = cc::plan_allreduce(strategy, item, gpus);
    REQUIRE(nccl.ok());
    for (const auto& t : nccl->tensors) CHECK(t.transport == cc::Transport::nccl);
    REQUIRE_FALSE(nccl->groups.empty());
    for (const auto& g : nccl->groups) CHECK(g.transport == cc::Transport::nccl);
    CHECK(nccl->notes.empty());
  }
}

TEST_CASE("AUTO picks NCCL with a GPU on every replica and RING without, RING stays RING", "[collective][unit]") {
  const auto item = five_variables();
  for (auto spec : {Sync::AUTO, Sync::RING, Sync::NCCL}) {
    cs::BuilderOptions o;
    o.chunk_size = 2;
    o.all_reduce_spec = spec;
    const auto strategy = build(cs::BuilderKind::all_reduce, o, item);
    for (bool gpus : {false, true}) {
      INFO(Sync::Spec_Name(spec) << (gpus ? " with GPUs" : " without GPUs"));
      cc::ArOptions options;
      options.have_gpus = gpus;
      auto plan = cc::plan_allreduce(strategy, item, options);
      REQUIRE(plan.ok());
      const auto expected = gpus && spec != Sync::RING ? cc::Transport::nccl : cc::Transport::ring;
      REQUIRE(plan->groups.size() == 3);  // five variables, two per group
      for (const auto& g : plan->groups) CHECK(g.transport == expected);
      for (const auto& t : plan->tensors) CHECK(t.transport == expected);
      CHECK(cc::to_string(expected) == std::string(expected == cc::Transport::nccl ? "NCCL" : "RING"));
    }
  }
}

TEST_CASE("one fusion group over two transports is refused, naming the group and both tensors",
          "[collective][unit]") {
  const auto item = five_variables();
  cs::BuilderOptions o;
  o.chunk_size = 128;  // every variable in group 0
  o.all_reduce_spec = Sync::NCCL;
  auto strategy = build(cs::BuilderKind::all_reduce, o, item);
  // Variable c asks for RING while the rest of its group asks for NCCL.
  auto* c = strategy.mutable_node_config(2)->mutable_allreducesynchronizer();
  c->set_spec(Sync::RING);
  cc::ArOptions gpus;
  gpus.have_gpus = true;
  auto mixed = cc::plan_allreduce(strategy, item, gpus);
  REQUIRE_FALSE(mixed.ok());
  CHECK(mixed.error().code == errc::invalid_argument);
  CHECK_THAT(mixed.error().message, Catch::Contains("fusion group 0"));
  CHECK_THAT(mixed.error().message, Catch::Contains("a:0"));
  CHECK_THAT(mixed.error().message, Catch::Contains("c:0"));
  // Without GPUs both run as RING: the same strategy is fine.
  auto ring = cc::plan_allreduce(strategy, item);
  REQUIRE(ring.ok());
  REQUIRE(ring->groups.size() == 1);
  CHECK(ring->groups[0].transport == cc::Transport::ring);
}

TEST_CASE("PartitionedAR all-reduces each piece as its own tensor of its group", "[collective][unit]") {
  cs::BuilderOptions o;
  o.chunk_size = 1;
  const auto item = five_variables();
  const auto strategy = build(cs::BuilderKind::partitioned_ar, o, item);
  auto plan = cc::plan_allreduce(strategy, item);
  REQUIRE(plan.ok());
  // Every planned piece sums to its variable, and every tensor sits in exactly one group.
  std::size_t in_groups = 0;
  for (const auto& g : plan->groups) in_groups += g.tensors.size();
  CHECK(in_groups == plan->tensors.size());
  REQUIRE(plan->variables.size() == 5);
  for (std::size_t v = 0; v < plan->variables.size(); ++v) {
    std::size_t total = 0;
    for (auto t : plan->variables[v].shards) total += plan->tensors[t].size;
    CHECK(static_cast<std::int64_t>(total) == item.variables[v].num_elements());
  }
  CHECK(plan->tensors.size() > plan->variables.size());  // a[6] at least is split
}

TEST_CASE("PS strategies and unknown names are refused with the node named, sparse variables are gathered",
          "[collective][unit]") {
  const auto item = five_variables();
  auto ps = cc::plan_allreduce(build(cs::BuilderKind::ps, {}, item), item);
  REQUIRE_FALSE(ps.ok());
  CHECK(ps.error().code == errc::invalid_argument);
  CHECK(ps.error().message.find("node_config \"a:0\"") != std::string::npos);
  CHECK(ps.error().message.find("PSSynchronizer") != std::string::npos);

  auto sparse_item = item;
  sparse_item.variables[1].sparse = true;
  cs::BuilderOptions o;
  o.all_reduce_spec = Sync::RING;
  auto sparse = cc::plan_allreduce(build(cs::BuilderKind::all_reduce, o, item), sparse_item);
  REQUIRE(sparse.ok());  // the sparse variable is all-gathered, the dense ones reduced
  REQUIRE(sparse->sparse.size() == 1);
  CHECK(sparse->sparse[0].name == "b:0");
  CHECK(sparse->sparse[0].rows == 4);
  CHECK(sparse->sparse[0].row_width == 1);
  CHECK(sparse->variables.size() == 4);
  for (const auto& t : sparse->tensors) CHECK(t.name != "b:0");
  CHECK(sparse->notes.back().find("sparse") != std::string::npos);

  auto other = five_variables();
  other.variables[0].name = "z:0";
  auto unknown = cc::plan_allreduce(build(cs::BuilderKind::all_reduce, o, item), other);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().message.find("unknown name") != std::string::npos);
  CHECK(cc::uses_allreduce(build(cs::BuilderKind::all_reduce, o, item)));
  CHECK_FALSE(cc::uses_allreduce(build(cs::BuilderKind::ps, {}, item)));
}

TEST_CASE("a Parallax strategy splits into its all-reduce plan and a PS part the PS planner takes",
          "[collective][unit]") {
  auto item = five_variables();
  item.variables[1].sparse = true;  // b:0 [4]
  item.variables[4].sparse = true;  // e:0 [8]
  const auto strategy = build(cs::BuilderKind::parallax, {}, item);
  auto refused = cc::plan_allreduce(strategy, item);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("PSSynchronizer") != std::string::npos);

  cc::ArOptions options;
  options.allow_ps = true;
  auto plan = cc::plan_allreduce(strategy, item, options);
  REQUIRE(plan.ok());
  CHECK(plan->ps_variables == std::vector<std::string>{"b:0", "e:0"});
  CHECK(plan->sparse.empty());
  std::vector<std::string> reduced;
  for (const auto& v : plan->variables) reduced.push_back(v.name);
  CHECK(reduced == std::vector<std::string>{"a:0", "c:0", "d:0"});
  CHECK(plan->notes.front().find("NCCL runs as RING") != std::string::npos);

  // The PS side: only the PS nodes, which core/ps plans unchanged.
  const auto ps = cc::ps_part(strategy);
  REQUIRE(ps.node_config_size() == 2);
  CHECK(ps.node_config(0).var_name() == "b:0");
  CHECK(ps.graph_config().replicas_size() == strategy.graph_config().replicas_size());
  auto training = core::ps::plan_training(ps, item, {});
  REQUIRE(training.ok());
  CHECK(training->variables.size() == 2);
  CHECK_FALSE(core::ps::plan_training(strategy, item, {}).ok());  // the whole strategy is not a PS one
}
