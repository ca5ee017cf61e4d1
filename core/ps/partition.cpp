#include "core/ps/partition.hpp"

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>

#include "core/strategy/partitioner.hpp"

namespace apiary::core::ps {

namespace {
std::size_t product(const std::vector<std::int64_t>& dims, std::size_t begin, std::size_t end) {
  std::size_t p = 1;
  for (std::size_t i = begin; i < end && i < dims.size(); ++i) p *= static_cast<std::size_t>(dims[i]);
  return p;
}

/// Copies each shard's block along the split axis: the tensor is `outer` blocks of
/// (axis length x inner) values; a shard owns rows [offset, offset + rows) of each block.
template <class Fn>
void for_each_block(const std::vector<std::int64_t>& shape, const std::vector<ShardLayout>& layouts, Fn&& fn) {
  const std::size_t axis = layouts.front().axis;
  const std::size_t outer = product(shape, 0, axis);
  const std::size_t inner = product(shape, axis + 1, shape.size());
  const std::size_t axis_len = shape.empty() ? 1 : static_cast<std::size_t>(shape[axis]);
  for (std::size_t s = 0; s < layouts.size(); ++s) {
    const std::size_t rows = shape.empty() ? 1 : static_cast<std::size_t>(layouts[s].shape[axis]);
    const std::size_t chunk = rows * inner;
    for (std::size_t o = 0; o < outer; ++o) {
      fn(s, (o * axis_len + static_cast<std::size_t>(layouts[s].offset)) * inner, o * chunk, chunk);
    }
  }
}
}  // namespace

std::size_t ShardLayout::size() const { return product(shape, 0, shape.size()); }

std::size_t ShardLayout::row_width() const { return product(shape, 1, shape.size()); }

Result<std::vector<ShardLayout>> shard_layouts(const std::vector<std::int64_t>& shape, std::string_view partitioner) {
  for (auto d : shape) {
    if (d < 0) return make_error(errc::invalid_argument, "variable shape: expected dimensions >= 0, got {}", d);
  }
  if (partitioner.empty()) return std::vector<ShardLayout>{ShardLayout{shape, 0, 0, 1}};
  auto config = strategy::parse_partitioner(partitioner);
  if (!config) return config.error();
  if (config->splits.size() != shape.size()) {
    return make_error(errc::invalid_argument,
                      "partitioner \"{}\": expected one count per axis of a rank-{} variable, got {} counts",
                      std::string(partitioner), shape.size(), config->splits.size());
  }
  const std::size_t axis = config->axis();
  const std::int64_t k = config->num_shards();
  if (k > shape[axis]) {
    return make_error(errc::invalid_argument,
                      "partitioner \"{}\": expected at most {} pieces along axis {} (its length), got {}",
                      std::string(partitioner), shape[axis], axis, k);
  }
  const auto sizes = strategy::slice_sizes(shape[axis], k);
  const auto offsets = strategy::slice_offsets(shape[axis], k);
  std::vector<ShardLayout> out;
  for (std::int64_t i = 0; i < k; ++i) {
    ShardLayout l{shape, axis, offsets[static_cast<std::size_t>(i)], k};
    l.shape[axis] = sizes[static_cast<std::size_t>(i)];
    out.push_back(std::move(l));
  }
  return out;
}

Result<std::vector<std::vector<float>>> split_dense(const std::vector<float>& values,
                                                   const std::vector<std::int64_t>& shape,
                                                   const std::vector<ShardLayout>& layouts) {
  const std::size_t total = product(shape, 0, shape.size());
  if (values.size() != total || layouts.empty()) {
    return make_error(errc::invalid_argument,
                      "split: expected {} values for the variable's shape and at least one shard, got {} values "
                      "and {} shards",
                      total, values.size(), layouts.size());
  }
  std::vector<std::vector<float>> pieces(layouts.size());
  for (std::size_t s = 0; s < layouts.size(); ++s) pieces[s].resize(layouts[s].size());
  for_each_block(shape, layouts, [&](std::size_t s, std::size_t whole_at, std::size_t piece_at, std::size_t n) {
    std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(whole_at), n,
                pieces[s].begin() + static_cast<std::ptrdiff_t>(piece_at));
  });
  return pieces;
}

Result<std::vector<float>> reassemble(const std::vector<std::vector<float>>& pieces,
                                      const std::vector<std::int64_t>& shape,
                                      const std::vector<ShardLayout>& layouts) {
  if (pieces.size() != layouts.size() || layouts.empty()) {
    return make_error(errc::invalid_argument, "reassemble: expected {} pieces (one per shard), got {}",
                      layouts.size(), pieces.size());
  }
  for (std::size_t s = 0; s < layouts.size(); ++s) {
    if (pieces[s].size() != layouts[s].size()) {
      return make_error(errc::invalid_argument, "reassemble: expected {} values from shard {}, got {}",
                        layouts[s].size(), s, pieces[s].size());
    }
  }
  std::vector<float> whole(product(shape, 0, shape.size()));
  for_each_block(shape, layouts, [&](std::size_t s, std::size_t whole_at, std::size_t piece_at, std::size_t n) {
    std::copy_n(pieces[s].begin() + static_cast<std::ptrdiff_t>(piece_at), n,
                whole.begin() + static_cast<std::ptrdiff_t>(whole_at));
  });
  return whole;
}

Result<std::vector<SparseGradient>> split_sparse(const SparseGradient& g, std::int64_t dim0, std::size_t row_width,
                                                 std::int64_t num_shards) {
  if (num_shards < 1 || num_shards > std::max<std::int64_t>(dim0, 1) || row_width == 0 ||
      g.values.size() != g.rows.size() * row_width) {
    return make_error(errc::invalid_argument,
                      "split sparse: expected 1..{} shards and {} x {} values, got {} shards and {} values",
                      dim0, g.rows.size(), row_width, num_shards, g.values.size());
  }
  std::vector<SparseGradient> out(static_cast<std::size_t>(num_shards));
  for (std::size_t i = 0; i < g.rows.size(); ++i) {
    const std::int64_t row = g.rows[i];
    if (row < 0 || row >= dim0) {
      return make_error(errc::invalid_argument, "split sparse: expected rows in [0, {}), got {}", dim0, row);
    }
    const auto where = strategy::sparse_row(row, dim0, num_shards);
    auto& part = out[static_cast<std::size_t>(where.shard)];
    part.rows.push_back(where.local);
    const auto* src = g.values.data() + i * row_width;
    part.values.insert(part.values.end(), src, src + row_width);
  }
  return out;
}

bool pieces_are_ranges(const std::vector<ShardLayout>& layouts, std::size_t size) {
  std::size_t next = 0;
  for (const auto& l : layouts) {
    if (l.axis != 0 || l.offset < 0 || static_cast<std::size_t>(l.offset) * l.row_width() != next) return false;
    next += l.size();
  }
  return next == size;
}

}  // namespace apiary::core::ps
