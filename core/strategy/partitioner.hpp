#pragma once
/// The partitioner string of Strategy.Node (reference §3.7): how many pieces each axis
/// of a variable is split into, e.g. "1,2,1" splits axis 1 in two. At most one axis is
/// split; shard i along it has floor(D/K) + (1 if i < D mod K) rows, so the first
/// D mod K shards hold one extra row.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "messages/result.hpp"

namespace apiary::core::strategy {

/// A parsed, valid partitioner.
struct PartitionerConfig {
  /// Pieces per axis (each >= 1, exactly one > 1).
  std::vector<std::int64_t> splits;

  /// The split axis: the first with more than one piece.
  [[nodiscard]] std::size_t axis() const;
  /// Number of shards: the product of splits.
  [[nodiscard]] std::int64_t num_shards() const;
  /// "1,2,1".
  [[nodiscard]] std::string to_string() const;
};

/// Parses and checks a partitioner string: a comma-separated list of integers >= 1,
/// not all 1 and at most one > 1. Errors: invalid_argument.
[[nodiscard]] Result<PartitionerConfig> parse_partitioner(std::string_view text);

/// The partitioner that splits `axis` of a tensor of rank `rank` into `shards` pieces.
[[nodiscard]] PartitionerConfig make_partitioner(std::size_t rank, std::size_t axis, std::int64_t shards);

/// Rows of each of `shards` slices of an axis of `dim` rows (shards in 1..dim).
[[nodiscard]] std::vector<std::int64_t> slice_sizes(std::int64_t dim, std::int64_t shards);

/// First row of each slice (cumulative slice_sizes, starting at 0).
[[nodiscard]] std::vector<std::int64_t> slice_offsets(std::int64_t dim, std::int64_t shards);

/// Where a row of a sparse gradient goes when axis 0 is split.
struct SparseRow {
  std::int64_t shard = 0;  ///< which slice holds the row
  std::int64_t local = 0;  ///< the row's index inside that slice
};

/// Maps global row `index` (0 <= index < dim) to its slice and local row, with the
/// same slice sizes as slice_sizes (TensorFlow's "div" strategy).
[[nodiscard]] SparseRow sparse_row(std::int64_t index, std::int64_t dim, std::int64_t shards);

}  // namespace apiary::core::strategy
