#include "core/ps/row_slots.hpp"

#include <algorithm>
#include <numeric>

namespace apiary::core::ps {

RowSlots::RowSlots(std::int64_t num_rows, std::size_t entries) {
  // A table costs a word per row of the variable: taken when that is at most four words
  // per entry (plus a little), so memory stays proportional to the gradient's size.
  const auto rows = static_cast<std::size_t>(std::max<std::int64_t>(num_rows, 0));
  dense_ = rows <= 4 * entries + 4096;
  if (dense_) {
    table_.assign(rows, k_none);
  } else {
    map_.reserve(entries);
  }
  rows_.reserve(std::min(entries, rows));
}

std::size_t RowSlots::slot(std::int64_t row) {
  std::size_t& s = dense_ ? table_[static_cast<std::size_t>(row)] : map_.try_emplace(row, k_none).first->second;
  if (s == k_none) {
    s = rows_.size();
    rows_.push_back(row);
  }
  return s;
}

std::vector<std::size_t> RowSlots::by_row() const {
  std::vector<std::size_t> out;
  out.reserve(rows_.size());
  if (dense_) {
    for (std::size_t s : table_) {
      if (s != k_none) out.push_back(s);
    }
    return out;
  }
  out.resize(rows_.size());
  std::iota(out.begin(), out.end(), std::size_t{0});
  std::sort(out.begin(), out.end(), [this](std::size_t a, std::size_t b) { return rows_[a] < rows_[b]; });
  return out;
}

}  // namespace apiary::core::ps
