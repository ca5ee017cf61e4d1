#include "core/ps/plan.hpp"

#include <algorithm>

#include "core/strategy/resource_spec.hpp"

namespace apiary::core::ps {
namespace {

using pb::autodist::Strategy;

/// Host index of every replica device, by order of first appearance of its host.
Result<std::vector<std::int32_t>> replica_hosts(const Strategy& strategy) {
  std::vector<std::string> hosts;
  std::vector<std::int32_t> out;
  for (const auto& device : strategy.graph_config().replicas()) {
    auto name = strategy::parse_device_name(device);
    if (!name) {
      return make_error(errc::invalid_argument,
                        "graph_config.replicas: {}; rebuild the strategy with `apiary strategy build`",
                        name.error().message);
    }
    auto it = std::find(hosts.begin(), hosts.end(), name->host);
    if (it == hosts.end()) it = hosts.insert(hosts.end(), name->host);
    out.push_back(static_cast<std::int32_t>(it - hosts.begin()));
  }
  if (out.empty()) {
    return make_error(errc::invalid_argument,
                      "graph_config.replicas: expected at least one replica device, got none; rebuild the strategy");
  }
  return out;
}

/// The synchronization part of a shard's configuration from a node's PSSynchronizer.
Status apply_synchronizer(const Strategy::Node& node, const std::string& where, ShardConfig& config,
                          std::string& device) {
  if (node.synchronizer_case() != Strategy::Node::kPSSynchronizer) {
    return make_error(errc::invalid_argument,
                      "{}: expected a PSSynchronizer, got {}; apiary ps runs parameter-server strategies only "
                      "(build one with --builder PS, PSLoadBalancing, PartitionedPS or UnevenPartitionedPS)",
                      where, node.has_allreducesynchronizer() ? "an AllReduceSynchronizer" : "no synchronizer");
  }
  const auto& ps = node.pssynchronizer();
  if (ps.reduction_destination().empty()) {
    return make_error(errc::invalid_argument,
                      "{}: expected a reduction_destination (the PS device, \"<host>:CPU:<i>\"), got none; "
                      "a PS process cannot be chosen for it",
                      where);
  }
  config.sync = ps.sync();
  config.staleness = ps.staleness();
  device = ps.reduction_destination();
  return ok_status();
}

}  // namespace

std::vector<std::string> ps_devices(const Strategy& strategy) {
  std::vector<std::string> out;
  const auto add = [&out](const Strategy::Node& part) {
    if (part.synchronizer_case() != Strategy::Node::kPSSynchronizer) return;
    const auto& device = part.pssynchronizer().reduction_destination();
    if (!device.empty() && std::find(out.begin(), out.end(), device) == out.end()) out.push_back(device);
  };
  for (const auto& node : strategy.node_config()) {
    if (node.partitioner().empty()) {
      add(node);
    } else {
      for (const auto& part : node.part_config()) add(part);
    }
  }
  return out;
}

std::vector<std::size_t> TrainingPlan::shards_on(const std::string& device) const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    if (shards[i].device == device) out.push_back(i);
  }
  return out;
}

Result<ResolvedNode> resolve_node(const Strategy::Node& node, const strategy::GraphItem& item) {
  ResolvedNode r;
  r.where = "node_config \"" + node.var_name() + "\"";
  r.var = item.find(node.var_name());
  if (r.var == nullptr) {
    return make_error(errc::invalid_argument,
                      "{}: expected a variable of the model, got an unknown name; "
                      "was the strategy built for another model?",
                      r.where);
  }
  auto layouts = shard_layouts(r.var->shape, node.partitioner());
  if (!layouts) return make_error(errc::invalid_argument, "{}: {}", r.where, layouts.error().message);
  r.layouts = std::move(*layouts);
  r.partitioned = !node.partitioner().empty();
  if (r.partitioned && static_cast<std::size_t>(node.part_config_size()) != r.layouts.size()) {
    return make_error(errc::invalid_argument, "{}: expected {} part_config entries for partitioner \"{}\", got {}",
                      r.where, r.layouts.size(), node.partitioner(), node.part_config_size());
  }
  return r;
}

Result<TrainingPlan> plan_training(const Strategy& strategy, const strategy::GraphItem& item,
                                   const OptimizerConfig& optimizer, Aggregation aggregation) {
  auto hosts = replica_hosts(strategy);
  if (!hosts) return hosts.error();
  TrainingPlan plan;
  plan.replicas.assign(strategy.graph_config().replicas().begin(), strategy.graph_config().replicas().end());
  for (const auto& node : strategy.node_config()) {
    auto resolved = resolve_node(node, item);
    if (!resolved) return resolved.error();
    const auto& [where, var, layouts, partitioned] = *resolved;
    VariablePlan vp{var->name, var->shape, node.partitioner(), var->sparse, {}};
    for (std::size_t i = 0; i < layouts.size(); ++i) {
      const auto& part = partitioned ? node.part_config(static_cast<int>(i)) : node;
      PlannedShard s;
      s.variable = var->name;
      s.piece = i;
      s.config.variable = part.var_name().empty() ? var->name : part.var_name();
      s.config.layout = layouts[i];
      s.config.sparse = var->sparse;
      s.config.optimizer = optimizer;
      s.config.replica_hosts = *hosts;
      s.config.aggregation = aggregation;
      const std::string part_where = partitioned ? where + " part " + std::to_string(i) : where;
      if (auto st = apply_synchronizer(part, part_where, s.config, s.device); !st) return st.error();
      s.local_replication = part.pssynchronizer().local_replication() && !var->sparse;
      if (std::find(plan.servers.begin(), plan.servers.end(), s.device) == plan.servers.end()) {
        plan.servers.push_back(s.device);
      }
      vp.shards.push_back(plan.shards.size());
      plan.shards.push_back(std::move(s));
    }
    plan.variables.push_back(std::move(vp));
  }
  if (plan.shards.empty()) {
    return make_error(errc::invalid_argument, "strategy {}: expected at least one variable node, got none",
                      strategy.id());
  }
  return plan;
}

Result<std::vector<std::vector<float>>> initial_pieces(const TrainingPlan& plan,
                                                       const std::map<std::string, std::vector<float>>& values) {
  std::vector<std::vector<float>> out(plan.shards.size());
  for (const auto& var : plan.variables) {
    auto it = values.find(var.name);
    if (it == values.end()) {
      return make_error(errc::invalid_argument, "initial values: expected variable {}, got none", var.name);
    }
    auto layouts = shard_layouts(var.shape, var.partitioner);
    if (!layouts) return layouts.error();
    auto pieces = split_dense(it->second, var.shape, *layouts);
    if (!pieces)
      return make_error(errc::invalid_argument, "initial values of {}: {}", var.name, pieces.error().message);
    for (std::size_t i = 0; i < var.shards.size(); ++i) out[var.shards[i]] = std::move((*pieces)[i]);
  }
  return out;
}

namespace {

/// Cuts every variable's whole optimizer state into each shard's, by shard id.
Result<std::vector<Optimizer::State>> shard_states(const TrainingPlan& plan,
                                                   const std::map<std::string, Optimizer::State>& states) {
  std::vector<Optimizer::State> out(plan.shards.size());
  for (auto slot : {&Optimizer::State::m, &Optimizer::State::v}) {
    std::map<std::string, std::vector<float>> whole;
    for (const auto& v : plan.variables) {
      auto it = states.find(v.name);
      if (it == states.end()) return make_error(errc::invalid_argument, "optimizer state: expected one for {}, got none", v.name);
      whole[v.name] = it->second.*slot;
    }
    if (std::all_of(whole.begin(), whole.end(), [](const auto& w) { return w.second.empty(); })) continue;
    auto pieces = initial_pieces(plan, whole);
    if (!pieces) return make_error(pieces.error().code, "optimizer state: {}", pieces.error().message);
    for (std::size_t id = 0; id < plan.shards.size(); ++id) out[id].*slot = std::move((*pieces)[id]);
  }
  for (std::size_t id = 0; id < plan.shards.size(); ++id) out[id].updates = states.at(plan.shards[id].variable).updates;
  return out;
}

}  // namespace

Result<std::map<std::string, Shard>> device_shards(const TrainingPlan& plan, const std::string& device,
                                                   const std::map<std::string, std::vector<float>>& values,
                                                   const std::map<std::string, Optimizer::State>& states) {
  auto initial = initial_pieces(plan, values);
  if (!initial) return initial.error();
  std::vector<Optimizer::State> cut;
  if (!states.empty()) {
    auto pieces = shard_states(plan, states);
    if (!pieces) return pieces.error();
    cut = std::move(*pieces);
  }
  std::map<std::string, Shard> shards;
  for (auto id : plan.shards_on(device)) {
    auto shard = Shard::create(plan.shards[id].config, std::move((*initial)[id]));
    if (!shard) return shard.error();
    if (!cut.empty()) {
      if (auto st = shard->restore_optimizer(std::move(cut[id])); !st) return st.error();
    }
    shards.emplace(plan.shards[id].config.variable, std::move(*shard));
  }
  return shards;
}

}  // namespace apiary::core::ps
