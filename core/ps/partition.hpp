#pragma once
/// How one variable's values are cut into parameter-server shards and put back
/// together, per the strategy's partitioner string (reference autodist.md §3.7):
/// dense tensors are sliced along the split axis (row-major layout), sparse gradients
/// are re-indexed row by row with the "div" rule of core/strategy/partitioner.hpp.
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/ps/optimizer.hpp"
#include "messages/result.hpp"

namespace apiary::core::ps {

/// One shard of a variable: its shape and where it sits in the whole.
struct ShardLayout {
  std::vector<std::int64_t> shape;  ///< the shard's own shape
  std::size_t axis = 0;             ///< the split axis (0 when unpartitioned)
  std::int64_t offset = 0;          ///< first index along `axis` held by the shard
  std::int64_t num_shards = 1;      ///< pieces the variable is split into

  /// Number of values in the shard.
  [[nodiscard]] std::size_t size() const;
  /// Values per row of axis 0 (product of shape[1:], 1 for rank <= 1).
  [[nodiscard]] std::size_t row_width() const;
};

/// The layouts of every shard of a variable of shape `shape` split by `partitioner`
/// (an empty string: one shard holding everything). Errors: invalid_argument on a bad
/// string, a rank mismatch, or more pieces than the axis has entries.
[[nodiscard]] Result<std::vector<ShardLayout>> shard_layouts(const std::vector<std::int64_t>& shape,
                                                             std::string_view partitioner);

/// Cuts a dense row-major tensor of `shape` into the shards' pieces. Errors:
/// invalid_argument when `values` does not hold product(shape) values.
[[nodiscard]] Result<std::vector<std::vector<float>>> split_dense(const std::vector<float>& values,
                                                                  const std::vector<std::int64_t>& shape,
                                                                  const std::vector<ShardLayout>& layouts);

/// Puts the shards' pieces back into one row-major tensor (the inverse of
/// split_dense). Errors: invalid_argument when a piece has the wrong size.
[[nodiscard]] Result<std::vector<float>> reassemble(const std::vector<std::vector<float>>& pieces,
                                                    const std::vector<std::int64_t>& shape,
                                                    const std::vector<ShardLayout>& layouts);

/// Whether `layouts` split a tensor of `size` values along axis 0, one piece after
/// another from its first value to its last: each piece a range of the row-major values
/// (starting at offset * row_width), which can be read or written where the tensor lies.
[[nodiscard]] bool pieces_are_ranges(const std::vector<ShardLayout>& layouts, std::size_t size);

/// Routes a sparse gradient of a variable with `dim0` rows, split along axis 0 into
/// `num_shards`, to its shards with shard-local row indices. Shards no row goes to get
/// an empty gradient. Errors: invalid_argument on a row outside [0, dim0) or a size
/// mismatch.
[[nodiscard]] Result<std::vector<SparseGradient>> split_sparse(const SparseGradient& g, std::int64_t dim0,
                                                               std::size_t row_width, std::int64_t num_shards);

}  // namespace apiary::core::ps
