#pragma once
/// Pieces shared by the builders: node constructors, partition names and the greedy
/// per-server byte loads.
#include <cstdint>
#include <string>
#include <vector>

#include "core/strategy/builders.hpp"

namespace apiary::core::strategy {

/// A strategy with graph_config.replicas = spec.replicas() and no nodes.
[[nodiscard]] pb::autodist::Strategy strategy_with_replicas(const ResourceSpec& spec);

/// Fills `node`'s PSSynchronizer.
void set_ps(pb::autodist::Strategy::Node& node, const std::string& destination, const PsParams& p);

/// Fills `node`'s AllReduceSynchronizer.
void set_ar(pb::autodist::Strategy::Node& node, std::int64_t group, ArSpec spec, ArCompressor compressor);

/// The name of shard `i` of `var`: "<op name>/part_<i>:0".
[[nodiscard]] std::string part_name(const Variable& var, std::int64_t i);

/// Bytes placed so far on each candidate parameter server, in device order.
class ServerLoads {
 public:
  /// Every device of `devices` starts at 0 bytes.
  explicit ServerLoads(std::vector<std::string> devices);
  /// The least-loaded server (the earliest on ties), charged `bytes`.
  [[nodiscard]] std::string take_least(double bytes);
  /// The `count` least-loaded servers for the shards of one variable: servers sorted
  /// by load (stable, so ties keep device order), the list repeated when count exceeds
  /// the servers; each occurrence is charged `bytes_per_shard`.
  [[nodiscard]] std::vector<std::string> take_shards(std::int64_t count, double bytes_per_shard);

 private:
  std::vector<std::string> devices_;
  std::vector<double> loads_;
};

}  // namespace apiary::core::strategy
