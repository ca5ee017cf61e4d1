#include "core/collective/ar_plan.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "core/ps/partition.hpp"
#include "core/ps/plan.hpp"

namespace apiary::core::collective {
namespace {

using pb::autodist::AllReduceSynchronizer;
using pb::autodist::Strategy;

/// The transport a requested spec runs as; `notes` gets the decision when it differs.
/// RING is RING; with a GPU on every replica AUTO and NCCL run over NCCL; without, AUTO
/// is RING and NCCL (a hint, as TensorFlow's communication_hint) falls back to RING
/// unless strict_nccl refuses it.
Result<Transport> resolve_spec(AllReduceSynchronizer::Spec spec, const std::string& where, const ArOptions& o,
                               bool& nccl_noted, std::vector<std::string>& notes) {
  if (spec == AllReduceSynchronizer::RING) return Transport::ring;
  if (o.have_gpus) return Transport::nccl;
  if (spec == AllReduceSynchronizer::AUTO) return Transport::ring;
  if (o.strict_nccl) {
    return make_error(errc::unsupported,
                      "{}: expected RING or AUTO on a cluster without a GPU on every replica, got NCCL (needs one GPU "
                      "per replica); rebuild the strategy with --spec RING or AUTO, or allow the fallback",
                      where);
  }
  if (!nccl_noted) notes.push_back("spec NCCL runs as RING: not every replica has a GPU");
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

/// Whether the node, or any of its parts, uses a PSSynchronizer.
bool uses_ps(const pb::autodist::Strategy::Node& node) {
  if (node.has_pssynchronizer()) return true;
  for (const auto& part : node.part_config()) {
    if (part.has_pssynchronizer()) return true;
  }
  return false;
}

/// Whether the node (every part, if partitioned) uses a PSSynchronizer only.
bool only_ps(const pb::autodist::Strategy::Node& node) {
  if (node.part_config_size() == 0) return node.has_pssynchronizer();
  for (const auto& part : node.part_config()) {
    if (!part.has_pssynchronizer()) return false;
  }
  return true;
}

}  // namespace

Strategy ps_part(const Strategy& strategy) {
  Strategy out = strategy;
  out.clear_node_config();
  for (const auto& node : strategy.node_config()) {
    if (only_ps(node)) *out.add_node_config() = node;
  }
  return out;
}

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
    auto resolved = ps::resolve_node(node, item);
    if (!resolved) return resolved.error();
    const auto& [where, var, layouts, partitioned] = *resolved;
    ps::VariablePlan vp{var->name, var->shape, node.partitioner(), false, {}};
    if (options.allow_ps && uses_ps(node)) {
      // Mixed strategy: the PS runtime serves this variable (all its parts).
      if (!only_ps(node)) {
        return make_error(errc::invalid_argument,
                          "{}: expected every part to use the same kind of synchronizer, got PS and all-reduce parts "
                          "mixed; rebuild the strategy",
                          where);
      }
      plan.ps_variables.push_back(var->name);
      continue;
    }
    for (std::size_t i = 0; i < layouts.size(); ++i) {
      const auto& part = partitioned ? node.part_config(static_cast<int>(i)) : node;
      const std::string part_where = partitioned ? where + " part " + std::to_string(i) : where;
      if (!part.has_allreducesynchronizer()) {
        return make_error(errc::invalid_argument,
                          "{}: expected an AllReduceSynchronizer, got {}; an all-reduce plan covers AllReduce, "
                          "PartitionedAR and RandomAxisPartitionAR strategies (a mixed strategy such as Parallax "
                          "needs ArOptions::allow_ps, which sets its PS variables aside for the PS runtime)",
                          part_where, part.has_pssynchronizer() ? "a PSSynchronizer" : "no synchronizer");
      }
      const auto& ar = part.allreducesynchronizer();
      auto transport = resolve_spec(ar.spec(), part_where, options, nccl_noted, plan.notes);
      if (!transport) return transport.error();
      if (var->sparse) continue;  // gathered whole, below
      ArTensor t;
      t.name = part.var_name().empty() ? var->name : part.var_name();
      t.variable = plan.variables.size();
      t.piece = i;
      t.size = layouts[i].size();
      t.group = ar.group();
      t.compressor = compressor_of(ar.compressor());
      t.transport = *transport;
      vp.shards.push_back(plan.tensors.size());
      plan.tensors.push_back(std::move(t));
    }
    if (var->sparse) {
      // Rows (indices and values) are all-gathered and averaged, never reduced densely.
      ArSparse sp{var->name, var->shape, var->shape.empty() ? 1 : var->shape[0], 1};
      for (std::size_t d = 1; d < var->shape.size(); ++d) sp.row_width *= static_cast<std::size_t>(var->shape[d]);
      plan.sparse.push_back(std::move(sp));
      continue;
    }
    plan.variables.push_back(std::move(vp));
  }
  if (!plan.sparse.empty()) {
    plan.notes.push_back(fmt::format("{} sparse variable(s) all-gathered as rows and averaged, one gather per step",
                                     plan.sparse.size()));
  }
  if (plan.tensors.empty() && plan.sparse.empty() && plan.ps_variables.empty()) {
    return make_error(errc::invalid_argument, "strategy {}: expected at least one variable node, got none",
                      strategy.id());
  }
  // Fusion: one collective per group, groups in ascending order, tensors in node order.
  std::map<std::int32_t, ArGroup> groups;
  for (std::size_t i = 0; i < plan.tensors.size(); ++i) {
    const auto& t = plan.tensors[i];
    auto [it, fresh] = groups.try_emplace(t.group);
    auto& g = it->second;
    if (!fresh && g.transport != t.transport) {
      // One fused collective runs over one transport.
      return make_error(errc::invalid_argument,
                        "fusion group {}: expected one spec for all its tensors, got {} for {} and {} for {}; give "
                        "them the same spec or different groups",
                        t.group, to_string(g.transport), plan.tensors[g.tensors.front()].name, to_string(t.transport),
                        t.name);
    }
    g.group = t.group;
    g.transport = t.transport;
    g.tensors.push_back(i);
  }

  for (auto& [index, g] : groups) plan.groups.push_back(std::move(g));
  return plan;
}

}  // namespace apiary::core::collective
