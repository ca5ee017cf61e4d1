// The parameter-server builders: PS, PSLoadBalancing, PartitionedPS, UnevenPartitionedPS.
#include "core/strategy/builders.hpp"
#include "core/strategy/builders_common.hpp"
#include "core/strategy/partitioner.hpp"

namespace apiary::core::strategy {

pb::autodist::Strategy build_ps(const PsParams& p, const GraphItem& item, const ResourceSpec& spec) {
  pb::autodist::Strategy s = strategy_with_replicas(spec);
  const std::string first = spec.cpu_devices().front();  // the first node's CPU:0
  for (const Variable* var : item.trainable_variables()) {
    auto* node = s.add_node_config();
    node->set_var_name(var->name);
    set_ps(*node, first, p);
  }
  return s;
}

pb::autodist::Strategy build_ps_load_balancing(const PsParams& p, const GraphItem& item, const ResourceSpec& spec) {
  pb::autodist::Strategy s = strategy_with_replicas(spec);
  ServerLoads loads(spec.cpu_devices());
  for (const Variable* var : item.trainable_variables()) {
    // Creation order, no sorting by size: each variable to the least-loaded server.
    auto* node = s.add_node_config();
    node->set_var_name(var->name);
    set_ps(*node, loads.take_least(static_cast<double>(var->byte_size())), p);
  }
  return s;
}

pb::autodist::Strategy build_partitioned_ps(const PsParams& p, bool uneven, const GraphItem& item,
                                            const ResourceSpec& spec) {
  pb::autodist::Strategy s = strategy_with_replicas(spec);
  ServerLoads loads(spec.cpu_devices());
  for (const Variable* var : item.trainable_variables()) {
    // Shards along axis 0; scalars, empty axes and control-flow variables stay whole.
    std::int64_t shards = 1;
    if (!var->shape.empty() && !var->control_flow) {
      shards = uneven ? smallest_non_divisor_shards(var->shape[0]) : smallest_divisor_shards(var->shape[0]);
    }
    // The shards go to the least-loaded servers, round-robin when they outnumber them.
    const auto servers = loads.take_shards(shards, static_cast<double>(var->byte_size()) / static_cast<double>(shards));
    auto* node = s.add_node_config();
    node->set_var_name(var->name);
    if (shards == 1) {
      set_ps(*node, servers[0], p);
      continue;
    }
    node->set_partitioner(make_partitioner(var->shape.size(), 0, shards).to_string());
    for (std::int64_t i = 0; i < shards; ++i) {
      auto* part = node->add_part_config();
      part->set_var_name(part_name(*var, i));
      set_ps(*part, servers[static_cast<std::size_t>(i)], p);
    }
  }
  return s;
}

pb::autodist::Strategy build_parallax(std::int64_t chunk_size, bool sync, std::int32_t staleness,
                                      const GraphItem& item, const ResourceSpec& spec) {
  pb::autodist::Strategy s = strategy_with_replicas(spec);
  ServerLoads loads(spec.cpu_devices());
  const PsParams sparse_ps{false, sync, staleness};  // sparse variables never get a proxy
  std::int64_t index = 0;  // counts every variable, PS ones included
  for (const Variable* var : item.trainable_variables()) {
    auto* node = s.add_node_config();
    node->set_var_name(var->name);
    if (var->sparse) {
      set_ps(*node, loads.take_least(static_cast<double>(var->byte_size())), sparse_ps);
    } else {
      set_ar(*node, index / chunk_size, pb::autodist::AllReduceSynchronizer::NCCL,
             pb::autodist::AllReduceSynchronizer::NoneCompressor);
    }
    ++index;
  }
  return s;
}

}  // namespace apiary::core::strategy
