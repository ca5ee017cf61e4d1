#pragma once
/// A parameter-server training job laid out from a strategy: which shards exist (one per
/// PS variable, or one per partition of a partitioned one), on which PS device each one
/// lives, and how each replica sees the variables (core/ps/replica.hpp). Every PS
/// process, every replica and every test builds the same plan from the same inputs, so
/// shard ids agree everywhere without being sent.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/ps/replica.hpp"
#include "core/ps/shard.hpp"
#include "core/strategy/graph_item.hpp"
#include "messages/result.hpp"
#include "strategy.pb.h"

namespace apiary::core::ps {

/// One shard of the job.
struct PlannedShard {
  ShardConfig config;     ///< the shard's configuration (config.variable is its name)
  std::string variable;   ///< the whole variable it belongs to
  std::size_t piece = 0;  ///< its index among the variable's pieces
  std::string device;     ///< the PS device holding it, e.g. "localhost:CPU:0"
  /// local_replication of its synchronizer (dense shards only): each node's replicas
  /// read it through the node's proxy (core/ps/proxy_server.hpp).
  bool local_replication = false;
};

/// The whole job.
struct TrainingPlan {
  std::vector<PlannedShard> shards;     ///< index = shard id (node_config order, pieces in order)
  std::vector<VariablePlan> variables;  ///< per variable, node_config order
  std::vector<std::string> replicas;    ///< replica devices (graph_config.replicas order)
  std::vector<std::string> servers;     ///< distinct PS devices, in order of first use

  /// Ids of the shards held by `device` (empty when it holds none).
  [[nodiscard]] std::vector<std::size_t> shards_on(const std::string& device) const;
};

/// A strategy node (one variable) resolved against the model: what every plan built from
/// a strategy (this one, core/collective/ar_plan.hpp) starts each node with.
struct ResolvedNode {
  std::string where;                          ///< "node_config \"<var_name>\"", for errors
  const strategy::Variable* var = nullptr;    ///< the model's variable
  std::vector<ShardLayout> layouts;           ///< one per part (one when not partitioned)
  bool partitioned = false;                   ///< a partitioner: one part_config per layout
};

/// Finds `node`'s variable in `item` and lays out its parts. Errors: invalid_argument
/// naming the node (an unknown variable, a partitioner that does not fit the shape, a
/// part_config count that differs from the parts').
[[nodiscard]] Result<ResolvedNode> resolve_node(const pb::autodist::Strategy::Node& node,
                                                const strategy::GraphItem& item);

/// Lays out `strategy` for `item`'s variables. Every variable must use a
/// PSSynchronizer (partitions included) with a reduction_destination; replica hosts
/// come from the replicas' device names. `optimizer` and `aggregation` apply to every
/// shard. Errors: invalid_argument naming the node (an AllReduce synchronizer, no
/// destination, an unknown variable, a partitioner that does not fit the shape, a
/// replica that is not a device name).
[[nodiscard]] Result<TrainingPlan> plan_training(const pb::autodist::Strategy& strategy,
                                                 const strategy::GraphItem& item, const OptimizerConfig& optimizer,
                                                 Aggregation aggregation = Aggregation::sample_weighted);

/// The distinct PS devices of `strategy` (reduction destinations of its PSSynchronizers,
/// partitions included; all-reduced nodes have none), in order of first use: the
/// `servers` of the plan plan_training makes of it (or of a mixed strategy's PS part),
/// found without the model, as a launcher needs them.
[[nodiscard]] std::vector<std::string> ps_devices(const pb::autodist::Strategy& strategy);

/// Cuts whole-variable initial values (by variable name) into each shard's piece, by
/// shard id. Errors: invalid_argument on a missing or mis-sized variable.
[[nodiscard]] Result<std::vector<std::vector<float>>> initial_pieces(
    const TrainingPlan& plan, const std::map<std::string, std::vector<float>>& values);

/// The shards `plan` puts on PS `device`, by shard name: at `values` (every variable
/// whole), their optimizers continuing from `states` (every variable's whole state, a
/// checkpoint's; empty: afresh). What a PS process serves, and a simulated one. Errors:
/// invalid_argument (values or states that do not fit the plan), Shard::create's.
[[nodiscard]] Result<std::map<std::string, Shard>> device_shards(
    const TrainingPlan& plan, const std::string& device, const std::map<std::string, std::vector<float>>& values,
    const std::map<std::string, Optimizer::State>& states);

}  // namespace apiary::core::ps
