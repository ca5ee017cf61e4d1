// The all-reduce builders: AllReduce, PartitionedAR, RandomAxisPartitionAR.
#include "core/rng.hpp"
#include "core/strategy/builders.hpp"
#include "core/strategy/builders_common.hpp"
#include "core/strategy/partitioner.hpp"

namespace apiary::core::strategy {
namespace {

/// Uniform in [0, n), n >= 1, from SplitMix64 (Steele, Lea, Flood 2014), the axis
/// choice's generator, fully specified so that a seed gives the same strategy on every
/// platform: draws until x < the largest multiple of n, returns x mod n.
std::uint64_t below(SplitMix64& rng, std::uint64_t n) {
  const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);
  std::uint64_t x = rng.next();
  while (x >= limit) x = rng.next();
  return x % n;
}

/// One AR variable split into `shards` along `axis` (or whole when shards <= 1), its
/// groups continuing from `counter`; returns the number of group slots used.
std::int64_t add_partitioned_ar(pb::autodist::Strategy& s, const Variable& var, std::size_t axis,
                                std::int64_t shards, std::int64_t counter, std::int64_t chunk_size) {
  constexpr auto spec = pb::autodist::AllReduceSynchronizer::AUTO;
  constexpr auto none = pb::autodist::AllReduceSynchronizer::NoneCompressor;
  auto* node = s.add_node_config();
  node->set_var_name(var.name);
  if (shards <= 1) {
    set_ar(*node, counter / chunk_size, spec, none);
    return 1;
  }
  node->set_partitioner(make_partitioner(var.shape.size(), axis, shards).to_string());
  for (std::int64_t i = 0; i < shards; ++i) {
    auto* part = node->add_part_config();
    part->set_var_name(part_name(var, i));
    set_ar(*part, (counter + i) / chunk_size, spec, none);
  }
  return shards;
}

}  // namespace

pb::autodist::Strategy build_all_reduce(const ArParams& p, const GraphItem& item, const ResourceSpec& spec) {
  pb::autodist::Strategy s = strategy_with_replicas(spec);
  std::int64_t index = 0;
  for (const Variable* var : item.trainable_variables()) {
    auto* node = s.add_node_config();
    node->set_var_name(var->name);
    set_ar(*node, index++ / p.chunk_size, p.spec, p.compressor);  // count-based groups
  }
  return s;
}

pb::autodist::Strategy build_partitioned_ar(std::int64_t chunk_size, const GraphItem& item,
                                            const ResourceSpec& spec) {
  pb::autodist::Strategy s = strategy_with_replicas(spec);
  std::int64_t counter = 0;  // shards placed so far: the group of the next shard is counter / chunk_size
  for (const Variable* var : item.trainable_variables()) {
    std::int64_t shards = 1;
    if (!var->shape.empty() && !var->control_flow) shards = smallest_divisor_shards(var->shape[0]);
    counter += add_partitioned_ar(s, *var, 0, shards, counter, chunk_size);
  }
  return s;
}

pb::autodist::Strategy build_random_axis_partition_ar(std::int64_t chunk_size, std::uint64_t seed,
                                                      const GraphItem& item, const ResourceSpec& spec) {
  pb::autodist::Strategy s = strategy_with_replicas(spec);
  SplitMix64 rng(seed);
  std::int64_t counter = 0;
  for (const Variable* var : item.trainable_variables()) {
    // Candidate axes: those longer than 1. Sparse variables split only on axis 0.
    std::vector<std::size_t> long_axes;
    for (std::size_t a = 0; a < var->shape.size(); ++a) {
      if (var->shape[a] > 1) long_axes.push_back(a);
    }
    std::size_t axis = 0;
    std::int64_t shards = 1;
    if (!long_axes.empty() && !var->control_flow) {
      axis = var->sparse ? 0 : long_axes[below(rng, long_axes.size())];
      shards = smallest_divisor_shards(var->shape[axis]);
    }
    counter += add_partitioned_ar(s, *var, axis, shards, counter, chunk_size);
  }
  return s;
}

}  // namespace apiary::core::strategy
