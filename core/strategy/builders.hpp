#pragma once
/// The strategy builders of AutoDist (reference §2), producing the seed's Strategy
/// message from a GraphItem and a ResourceSpec. Every builder:
/// - visits the trainable variables in creation order;
/// - sets graph_config.replicas to ResourceSpec::replicas() (every GPU, then the CPUs of
///   GPU-less nodes);
/// - uses ResourceSpec::cpu_devices() as the candidate parameter servers ("reduction
///   devices"), with a variable's load in bytes = elements x element size.
/// The placements are exactly upstream's; the few deliberate differences are listed in
/// core/strategy/README.md.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/strategy/graph_item.hpp"
#include "core/strategy/resource_spec.hpp"
#include "messages/result.hpp"
#include "strategy.pb.h"
#include "synchronizers.pb.h"

namespace apiary::core::strategy {

using ArSpec = pb::autodist::AllReduceSynchronizer::Spec;
using ArCompressor = pb::autodist::AllReduceSynchronizer::Compressor;

/// The builders, by AutoDist's class names.
enum class BuilderKind {
  ps,                        ///< "PS": everything on the first CPU device
  ps_load_balancing,         ///< "PSLoadBalancing": greedy by bytes (AutoDist's default)
  partitioned_ps,            ///< "PartitionedPS": axis 0 in its smallest divisor >= 2, shards greedy
  uneven_partitioned_ps,     ///< "UnevenPartitionedPS": axis 0 in its smallest non-divisor >= 2
  all_reduce,                ///< "AllReduce": group = index / chunk_size
  partitioned_ar,            ///< "PartitionedAR": axis 0 split, groups over shards, AUTO/None
  random_axis_partition_ar,  ///< "RandomAxisPartitionAR": a seeded random axis > 1 split
  parallax,                  ///< "Parallax": sparse -> PS (greedy), dense -> AR (NCCL)
};

/// Every builder, in the order above.
inline constexpr BuilderKind all_builder_kinds[] = {
    BuilderKind::ps,             BuilderKind::ps_load_balancing, BuilderKind::partitioned_ps,
    BuilderKind::uneven_partitioned_ps, BuilderKind::all_reduce, BuilderKind::partitioned_ar,
    BuilderKind::random_axis_partition_ar, BuilderKind::parallax};

/// AutoDist's class name ("PSLoadBalancing").
[[nodiscard]] std::string_view to_string(BuilderKind kind);
/// Parses a class name (exact spelling); errors list the accepted names.
[[nodiscard]] Result<BuilderKind> parse_builder_kind(std::string_view name);

/// Builder arguments; an unset one takes AutoDist's default. Setting one a builder does
/// not take is an error (it would be silently ignored upstream).
struct BuilderOptions {
  /// PS, PSLoadBalancing, PartitionedPS, UnevenPartitionedPS: a proxy copy of each dense
  /// PS variable on every worker. Default false. Parallax rejects true (it has no effect
  /// there: Parallax puts only sparse variables on PS, and those never get a proxy).
  std::optional<bool> local_proxy_variable;
  /// PS family and Parallax: synchronous (true, default) or asynchronous updates.
  std::optional<bool> sync;
  /// PS family and Parallax: 0 = bulk-synchronous (default); s > 0 = at most s steps
  /// ahead of the slowest worker (needs sync); < 0 invalid.
  std::optional<std::int32_t> staleness;
  /// AllReduce, PartitionedAR, RandomAxisPartitionAR, Parallax: variables (or shards)
  /// per fusion group, >= 1. Default 128.
  std::optional<std::int64_t> chunk_size;
  /// AllReduce only: the collective's implementation. Default NCCL.
  std::optional<ArSpec> all_reduce_spec;
  /// AllReduce only: gradient compression. Default NoneCompressor.
  std::optional<ArCompressor> compressor;
  /// RandomAxisPartitionAR only: seed of the axis choice. Default 0.
  std::optional<std::uint64_t> seed;
};

/// Builds a strategy with id `id` (see format_strategy_id in strategy_io.hpp) and an
/// empty path. Errors (invalid_argument): a bad or inapplicable option; a variable the
/// builder cannot place.
[[nodiscard]] Result<pb::autodist::Strategy> build_strategy(BuilderKind kind, const BuilderOptions& options,
                                                            const GraphItem& item, const ResourceSpec& spec,
                                                            std::string id);

/// Arguments of the PS-family builders.
struct PsParams {
  bool local_proxy_variable = false;  ///< proxy copies on workers (dense variables)
  bool sync = true;                   ///< synchronous updates
  std::int32_t staleness = 0;         ///< steps a worker may run ahead (0 = BSP)
};

/// Arguments of AllReduce.
struct ArParams {
  std::int64_t chunk_size = 128;                              ///< variables per group (>= 1)
  ArSpec spec = pb::autodist::AllReduceSynchronizer::NCCL;    ///< implementation
  ArCompressor compressor = pb::autodist::AllReduceSynchronizer::NoneCompressor;  ///< compression
};

/// The builders themselves, on checked arguments (build_strategy checks them); each
/// fills replicas and node_config only.
[[nodiscard]] pb::autodist::Strategy build_ps(const PsParams& p, const GraphItem& item, const ResourceSpec& spec);
[[nodiscard]] pb::autodist::Strategy build_ps_load_balancing(const PsParams& p, const GraphItem& item,
                                                             const ResourceSpec& spec);
/// PartitionedPS (`uneven` false) or UnevenPartitionedPS (`uneven` true).
[[nodiscard]] pb::autodist::Strategy build_partitioned_ps(const PsParams& p, bool uneven, const GraphItem& item,
                                                          const ResourceSpec& spec);
[[nodiscard]] pb::autodist::Strategy build_all_reduce(const ArParams& p, const GraphItem& item,
                                                      const ResourceSpec& spec);
[[nodiscard]] pb::autodist::Strategy build_partitioned_ar(std::int64_t chunk_size, const GraphItem& item,
                                                          const ResourceSpec& spec);
/// The axis of each dense variable is drawn from SplitMix64 seeded with `seed`: one
/// draw per dense variable with an axis longer than 1, in creation order, uniform over
/// those axes (see builders_ar.cpp). Sparse variables split on axis 0 and draw nothing.
[[nodiscard]] pb::autodist::Strategy build_random_axis_partition_ar(std::int64_t chunk_size, std::uint64_t seed,
                                                                    const GraphItem& item, const ResourceSpec& spec);
/// Parallax: sparse variables go to PS greedily by bytes with no proxy and `sync` /
/// `staleness`; dense ones to AR (NCCL, NoneCompressor), group = index / chunk_size
/// where the index counts every variable.
[[nodiscard]] pb::autodist::Strategy build_parallax(std::int64_t chunk_size, bool sync, std::int32_t staleness,
                                                    const GraphItem& item, const ResourceSpec& spec);

/// PartitionedPS's shard count for an axis of n rows: the smallest i in [2, n) dividing
/// n, else n (so a prime n gives n shards); 1 for n <= 1.
[[nodiscard]] std::int64_t smallest_divisor_shards(std::int64_t n);
/// UnevenPartitionedPS's: the smallest i in [2, n) not dividing n, else n; 1 for n <= 1.
[[nodiscard]] std::int64_t smallest_non_divisor_shards(std::int64_t n);

}  // namespace apiary::core::strategy
