#include "core/strategy/partitioner.hpp"

#include <algorithm>

namespace apiary::core::strategy {

std::size_t PartitionerConfig::axis() const {
  for (std::size_t a = 0; a < splits.size(); ++a) {
    if (splits[a] > 1) return a;
  }
  return 0;
}

std::int64_t PartitionerConfig::num_shards() const {
  std::int64_t n = 1;
  for (auto s : splits) n *= s;
  return n;
}

std::string PartitionerConfig::to_string() const {
  std::string out;
  for (std::size_t a = 0; a < splits.size(); ++a) out += (a > 0 ? "," : "") + std::to_string(splits[a]);
  return out;
}

Result<PartitionerConfig> parse_partitioner(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return make_error(errc::invalid_argument,
                      "partitioner \"{}\": {}; expected one count >= 1 per axis with exactly one axis > 1, e.g. "
                      "\"2,1\" to split axis 0 in two", std::string(text), why);
  };
  if (text.empty()) return bad("empty (an unpartitioned variable has no partitioner)");
  PartitionerConfig config;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = text.find(',', begin);
    const std::string_view item = text.substr(begin, end == std::string_view::npos ? end : end - begin);
    if (item.empty() || item.size() > 12 || item.find_first_not_of("0123456789") != std::string_view::npos) {
      return bad(fmt::format("\"{}\" is not a count", item));
    }
    const std::int64_t count = std::stoll(std::string(item));
    if (count == 0) return bad("an axis has 0 pieces");
    config.splits.push_back(count);
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  const auto active = std::count_if(config.splits.begin(), config.splits.end(), [](auto s) { return s > 1; });
  if (active == 0) return bad("every axis is 1, which splits nothing");
  if (active > 1) return bad("more than one axis is split");
  return config;
}

PartitionerConfig make_partitioner(std::size_t rank, std::size_t axis, std::int64_t shards) {
  PartitionerConfig config;
  config.splits.assign(rank, 1);
  if (axis < rank) config.splits[axis] = shards;
  return config;
}

std::vector<std::int64_t> slice_sizes(std::int64_t dim, std::int64_t shards) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < shards; ++i) out.push_back(dim / shards + (i < dim % shards ? 1 : 0));
  return out;
}

std::vector<std::int64_t> slice_offsets(std::int64_t dim, std::int64_t shards) {
  std::vector<std::int64_t> out;
  std::int64_t offset = 0;
  for (auto rows : slice_sizes(dim, shards)) {
    out.push_back(offset);
    offset += rows;
  }
  return out;
}

SparseRow sparse_row(std::int64_t index, std::int64_t dim, std::int64_t shards) {
  const std::int64_t per = dim / shards;     // rows of a short slice
  const std::int64_t extras = dim % shards;  // slices with one more row
  // The first `extras` slices hold per+1 rows each; the rest hold per rows.
  if (index < extras * (per + 1)) return SparseRow{index / (per + 1), index % (per + 1)};
  return SparseRow{extras + (index - extras * (per + 1)) / per, (index - extras) % per};
}

}  // namespace apiary::core::strategy
