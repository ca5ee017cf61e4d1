#include "core/collective/ar_plan.hpp"

#include <algorithm>
#include <map>

#include "core/ps/partition.hpp"

namespace apiary::core::collective {
namespace {

using pb::autodist::AllReduceSynchronizer;
using pb::autodist::Strategy;

/// The transport a requested spec runs as; `notes` gets the decision when it differs.
Result<Transport> resolve_spec(AllReduceSynchronizer::Spec spec, const std::string& where, const ArOptions& o,
                               bool& nccl_noted, std::vector<std::string>& notes) {
  if (spec == AllReduceSynchronizer::RING) return Transport::ring;
  if (spec == AllReduceSynchronizer::AUTO && !o.have_gpus) return Transport::ring;
  if (o.have_gpus) {
    return make_error(errc::unsupported,
                      "{}: expected a RING all-reduce, got {} on a cluster with GPUs; NCCL collectives over device "
                      "actors are not available to this runtime yet: rebuild the strategy with --spec RING",
                      where, AllReduceSynchronizer::Spec_Name(spec));
  }
  if (o.strict_nccl) {
    return make_error(errc::unsupported,
                      "{}: expected RING or AUTO on a cluster without GPUs, got NCCL (needs GPUs); rebuild the "
                      "strategy with --spec RING or AUTO, or allow the fallback",
                      where);
  }
  // NCCL is a hint (TensorFlow's communication_hint): without GPUs the ring runs it.
  if (!nccl_noted) notes.push_back("spec NCCL runs as RING: the cluster has no GPUs");
  nccl_noted = true;
  return Transport::ring;
}

CompressorKind compressor_of(AllReduceSynchronizer::Compressor c) {
  switch (c) {
    case AllReduceSynchronizer::HorovodCompressor:
      return CompressorKind::horovod;
    case AllReduceSynchronizer::HorovodCompressorEF:
      return CompressorKind::horovod_ef;
    default:
      return CompressorKind::none;
  }
}

}  // namespace

const char* to_string(Transport t) { return t == Transport::nccl ? "NCCL" : "RING"; }

const char* to_string(CompressorKind c) {
  switch (c) {
    case CompressorKind::horovod:
      return "HorovodCompressor";
    case CompressorKind::horovod_ef:
      return "HorovodCompressorEF";
    default:
      return "NoneCompressor";
  }
}

bool uses_allreduce(const Strategy& strategy) {
  for (const auto& node : strategy.node_config()) {
    if (node.has_allreducesynchronizer()) return true;
    for (const auto& part : node.part_config()) {
      if (part.has_allreducesynchronizer()) return true;
    }
  }
  return false;
}

Result<ArPlan> plan_allreduce(const Strategy& strategy, const strategy::GraphItem& item, const ArOptions& options) {
  ArPlan plan;
  plan.replicas.assign(strategy.graph_config().replicas().begin(), strategy.graph_config().replicas().end());
  if (plan.replicas.empty()) {
    return make_error(errc::invalid_argument,
                      "graph_config.replicas: expected at least one replica device, got none; rebuild the strategy");
  }
  bool nccl_noted = false;
  for (const auto& node : strategy.node_config()) {
    const std::string where = "node_config \"" + node.var_name() + "\"";
    const auto* var = item.find(node.var_name());
    if (var == nullptr) {
      return make_error(errc::invalid_argument,
                        "{}: expected a variable of the model, got an unknown name; was the strategy built for "
                        "another model?",
                        where);
    }
    if (var->sparse) {
      return make_error(errc::invalid_argument,
                        "{}: expected a dense variable, got a sparse one; sparse all-reduce (an averaging "
                        "all-gather) is not implemented: use Parallax or a PS builder for sparse variables",
                        where);
    }
    auto layouts = ps::shard_layouts(var->shape, node.partitioner());
    if (!layouts) return make_error(errc::invalid_argument, "{}: {}", where, layouts.error().message);
    const bool partitioned = !node.partitioner().empty();
    if (partitioned && static_cast<std::size_t>(node.part_config_size()) != layouts->size()) {
      return make_error(errc::invalid_argument, "{}: expected {} part_config entries for partitioner \"{}\", got {}",
                        where, layouts->size(), node.partitioner(), node.part_config_size());
    }
    ps::VariablePlan vp{var->name, var->shape, node.partitioner(), false, {}};
    for (std::size_t i = 0; i < layouts->size(); ++i) {
      const auto& part = partitioned ? node.part_config(static_cast<int>(i)) : node;
      const std::string part_where = partitioned ? where + " part " + std::to_string(i) : where;
      if (!part.has_allreducesynchronizer()) {
        return make_error(errc::invalid_argument,
                          "{}: expected an AllReduceSynchronizer, got {}; an all-reduce job runs AllReduce, "
                          "PartitionedAR and RandomAxisPartitionAR strategies (mixed PS and all-reduce strategies "
                          "such as Parallax are not supported by it yet)",
                          part_where, part.has_pssynchronizer() ? "a PSSynchronizer" : "no synchronizer");
      }
      const auto& ar = part.allreducesynchronizer();
      auto transport = resolve_spec(ar.spec(), part_where, options, nccl_noted, plan.notes);
      if (!transport) return transport.error();
      ArTensor t;
      t.name = part.var_name().empty() ? var->name : part.var_name();
      t.variable = plan.variables.size();
      t.piece = i;
      t.size = (*layouts)[i].size();
      t.group = ar.group();
      t.compressor = compressor_of(ar.compressor());
      t.transport = *transport;
      vp.shards.push_back(plan.tensors.size());
      plan.tensors.push_back(std::move(t));
    }
    plan.variables.push_back(std::move(vp));
  }
  if (plan.tensors.empty()) {
    return make_error(errc::invalid_argument, "strategy {}: expected at least one variable node, got none",
                      strategy.id());
  }
  // Fusion: one collective per group, groups in ascending order, tensors in node order.
  std::map<std::int32_t, ArGroup> groups;
  for (std::size_t i = 0; i < plan.tensors.size(); ++i) {
    auto& g = groups[plan.tensors[i].group];
    g.group = plan.tensors[i].group;
    g.transport = plan.tensors[i].transport;
    g.tensors.push_back(i);
  }
  for (auto& [index, g] : groups) plan.groups.push_back(std::move(g));
  return plan;
}

}  // namespace apiary::core::collective
