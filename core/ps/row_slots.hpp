#pragma once
/// The distinct rows of a sparse gradient, each given a slot (0, 1, ... in the order
/// first seen) in constant time per lookup: a table indexed by row when the variable has
/// few rows next to the entries looked up, a hash map otherwise. What merge_rows and the
/// all-reduce's sparse gather sum into; a std::map of a million touched rows cost more
/// than the rest of the step.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <absl/container/flat_hash_map.h>

namespace apiary::core::ps {

class RowSlots {
 public:
  /// Rows in [0, num_rows) (num_rows >= 0), about `entries` lookups to come.
  RowSlots(std::int64_t num_rows, std::size_t entries);

  /// The slot of `row`, which must be in [0, num_rows): a new one when first seen.
  std::size_t slot(std::int64_t row);
  /// Distinct rows seen, by slot.
  [[nodiscard]] const std::vector<std::int64_t>& rows() const { return rows_; }
  /// The slots, ordered by their rows ascending.
  [[nodiscard]] std::vector<std::size_t> by_row() const;

 private:
  static constexpr std::size_t k_none = ~std::size_t{0};
  std::vector<std::size_t> table_;  ///< row -> slot (k_none: not seen), when dense
  absl::flat_hash_map<std::int64_t, std::size_t> map_;  ///< row -> slot, otherwise
  bool dense_ = false;
  std::vector<std::int64_t> rows_;
};

}  // namespace apiary::core::ps
