#include "core/ps/partition.hpp"

#include <catch2/catch.hpp>
#include <numeric>

using namespace apiary::core::ps;

namespace {
std::vector<float> iota(std::size_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0F);
  return v;
}
}  // namespace

TEST_CASE("axis-0 partitions follow TF's slice sizes and reassemble", "[ps][partition]") {
  const std::vector<std::int64_t> shape{7, 3};
  auto layouts = shard_layouts(shape, "3,1");
  REQUIRE(layouts.ok());
  REQUIRE(layouts->size() == 3);
  CHECK((*layouts)[0].shape == std::vector<std::int64_t>{3, 3});
  CHECK((*layouts)[1].shape == std::vector<std::int64_t>{2, 3});
  CHECK((*layouts)[2].offset == 5);
  const auto whole = iota(21);
  auto pieces = split_dense(whole, shape, *layouts);
  REQUIRE(pieces.ok());
  CHECK((*pieces)[1] == std::vector<float>{9, 10, 11, 12, 13, 14});
  auto back = reassemble(*pieces, shape, *layouts);
  REQUIRE(back.ok());
  CHECK(*back == whole);
}

TEST_CASE("inner-axis partitions slice every row", "[ps][partition]") {
  const std::vector<std::int64_t> shape{4, 5};
  auto layouts = shard_layouts(shape, "1,2");
  REQUIRE(layouts.ok());
  const auto whole = iota(20);
  auto pieces = split_dense(whole, shape, *layouts);
  REQUIRE(pieces.ok());
  CHECK((*pieces)[0] == std::vector<float>{0, 1, 2, 5, 6, 7, 10, 11, 12, 15, 16, 17});
  CHECK((*pieces)[1] == std::vector<float>{3, 4, 8, 9, 13, 14, 18, 19});
  auto back = reassemble(*pieces, shape, *layouts);
  REQUIRE(back.ok());
  CHECK(*back == whole);
}

TEST_CASE("unpartitioned and scalar variables are one shard", "[ps][partition]") {
  auto scalar = shard_layouts({}, "");
  REQUIRE(scalar.ok());
  CHECK(scalar->front().size() == 1);
  auto pieces = split_dense({2.5F}, {}, *scalar);
  REQUIRE(pieces.ok());
  CHECK((*pieces)[0] == std::vector<float>{2.5F});
}

TEST_CASE("sparse gradients go to their shard with local rows", "[ps][partition][sparse]") {
  // D = 7, K = 3: shards hold rows {0,1,2}, {3,4}, {5,6}.
  SparseGradient g{{6, 0, 3, 2}, {60, 61, 0, 1, 30, 31, 20, 21}};
  auto parts = split_sparse(g, 7, 2, 3);
  REQUIRE(parts.ok());
  CHECK((*parts)[0].rows == std::vector<std::int64_t>{0, 2});
  CHECK((*parts)[0].values == std::vector<float>{0, 1, 20, 21});
  CHECK((*parts)[1].rows == std::vector<std::int64_t>{0});
  CHECK((*parts)[2].rows == std::vector<std::int64_t>{1});
  CHECK((*parts)[2].values == std::vector<float>{60, 61});
}

TEST_CASE("partition errors say what was expected", "[ps][partition][errors]") {
  auto rank = shard_layouts({4, 4}, "2");
  REQUIRE_FALSE(rank.ok());
  CHECK(rank.error().message.find("one count per axis") != std::string::npos);
  CHECK_FALSE(shard_layouts({2, 4}, "3,1").ok());
  CHECK_FALSE(shard_layouts({4, 4}, "2,2").ok());
  auto layouts = shard_layouts({4}, "2");
  REQUIRE(layouts.ok());
  CHECK_FALSE(split_dense({1, 2, 3}, {4}, *layouts).ok());
  CHECK_FALSE(reassemble({{1, 2}}, {4}, *layouts).ok());
  CHECK_FALSE(split_sparse(SparseGradient{{4}, {1}}, 4, 1, 2).ok());
}
