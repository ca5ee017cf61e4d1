// The partitioner string (reference §3.7): validation, slice sizes, and the sparse row
// remap checked against TensorFlow's "div" formula.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/strategy/partitioner.hpp"

namespace {

using namespace apiary::core::strategy;
using Catch::Matchers::Contains;

}  // namespace

TEST_CASE("partitioner: valid strings parse") {
  auto p = parse_partitioner("1,2,1");
  REQUIRE(p.ok());
  CHECK(p->splits == std::vector<std::int64_t>{1, 2, 1});
  CHECK(p->axis() == 1);
  CHECK(p->num_shards() == 2);
  CHECK(p->to_string() == "1,2,1");
  CHECK(parse_partitioner("3")->num_shards() == 3);
  CHECK(make_partitioner(2, 0, 3).to_string() == "3,1");
  CHECK(make_partitioner(1, 0, 2).to_string() == "2");
}

TEST_CASE("partitioner: invalid strings are rejected with the reason") {
  CHECK_THAT(parse_partitioner("").error().message, Contains("empty"));
  CHECK_THAT(parse_partitioner("0,2").error().message, Contains("0 pieces"));
  CHECK_THAT(parse_partitioner("1,1").error().message, Contains("splits nothing"));
  CHECK_THAT(parse_partitioner("2,2").error().message, Contains("more than one axis"));
  CHECK_THAT(parse_partitioner("2,").error().message, Contains("not a count"));
  CHECK_THAT(parse_partitioner("a,1").error().message, Contains("not a count"));
  CHECK_THAT(parse_partitioner("-2,1").error().message, Contains("not a count"));
}

TEST_CASE("partitioner: slices give the first D mod K shards one extra row") {
  CHECK(slice_sizes(10000, 3) == std::vector<std::int64_t>{3334, 3333, 3333});
  CHECK(slice_sizes(16, 3) == std::vector<std::int64_t>{6, 5, 5});
  CHECK(slice_sizes(7, 7) == std::vector<std::int64_t>{1, 1, 1, 1, 1, 1, 1});
  CHECK(slice_offsets(10000, 3) == std::vector<std::int64_t>{0, 3334, 6667});
}

TEST_CASE("partitioner: sparse rows land in the slice that holds them") {
  for (std::int64_t dim : {10000, 7, 16}) {
    for (std::int64_t shards : {2, 3}) {
      const auto sizes = slice_sizes(dim, shards);
      const auto offsets = slice_offsets(dim, shards);
      const std::int64_t ipp = dim / shards, extras = dim % shards;
      for (std::int64_t idx = 0; idx < dim; ++idx) {
        const SparseRow row = sparse_row(idx, dim, shards);
        // TensorFlow's formula (reference §3.7).
        const std::int64_t part = std::max(idx / (ipp + 1), (idx - extras) / ipp);
        const std::int64_t local = part < extras ? idx % (ipp + 1) : (idx - extras) % ipp;
        INFO("dim " << dim << " shards " << shards << " idx " << idx);
        REQUIRE(row.shard == part);
        REQUIRE(row.local == local);
        REQUIRE(offsets[static_cast<std::size_t>(row.shard)] + row.local == idx);
        REQUIRE(row.local < sizes[static_cast<std::size_t>(row.shard)]);
      }
    }
  }
}
