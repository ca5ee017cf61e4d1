#pragma once
/// Checks a Strategy against the model (and optionally the cluster) before anything
/// runs it: a strategy edited by hand or written by another tool fails here with a
/// message naming the node, instead of deep inside a synchronizer.
#include "core/strategy/graph_item.hpp"
#include "core/strategy/resource_spec.hpp"
#include "messages/result.hpp"
#include "strategy.pb.h"

namespace apiary::core::strategy {

/// Checks, returning the first problem as invalid_argument:
/// - every trainable variable of `item` has exactly one node, and every node names a
///   variable of `item`;
/// - an unpartitioned node has a synchronizer and no part_config;
/// - a partitioned node has a valid partitioner (parse_partitioner) with one entry per
///   axis of its variable, at most as many pieces as the axis has rows, axis 0 for a
///   sparse variable, and exactly that many part_config entries, each with a
///   synchronizer, a unique non-empty var_name and no partitioning of its own;
/// - PS: staleness >= 0, staleness > 0 only with sync, a reduction_destination that is
///   empty or a device name;
/// - AR: 0 <= group < the number of synchronized units (unpartitioned variables plus
///   partitions), the reference's "group index less than the number of variables";
///   spec and compressor values the schema defines;
/// - graph_config.replicas non-empty, device names, no duplicates.
[[nodiscard]] Status validate(const pb::autodist::Strategy& strategy, const GraphItem& item);

/// validate(strategy, item), and every replica and reduction_destination is a device of
/// `spec`.
[[nodiscard]] Status validate(const pb::autodist::Strategy& strategy, const GraphItem& item,
                              const ResourceSpec& spec);

}  // namespace apiary::core::strategy
