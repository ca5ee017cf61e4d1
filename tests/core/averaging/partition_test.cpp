// core::averaging partition: parts cover every element once and in order, hand-computed
// pivot assignments, zero-fraction peers, integer counts, determinism and bad inputs.
#include <catch2/catch.hpp>

#include <numeric>
#include <random>
#include <vector>

#include "core/averaging/partition.hpp"

namespace {

using apiary::errc;
using namespace apiary::core::averaging;

/// float32 tensors without compression of the given element counts.
std::vector<TensorLayout> floats(const std::vector<std::int64_t>& sizes) {
  std::vector<TensorLayout> out;
  for (auto n : sizes) out.push_back(TensorLayout{n, 4, 1.0});
  return out;
}

Partition split(const std::vector<TensorLayout>& tensors, const std::vector<double>& fractions,
                std::int64_t part_size_bytes) {
  auto r = partition_tensors(tensors, fractions, part_size_bytes);
  INFO((r.ok() ? std::string() : r.error().what()));
  REQUIRE(r.ok());
  return *r;
}

std::vector<std::size_t> owners(const Partition& p) {
  std::vector<std::size_t> out;
  for (const auto& part : p.parts) out.push_back(part.peer);
  return out;
}

/// Every element of every tensor is in exactly one part, parts in flattened order, and
/// the per-peer and per-tensor views agree with the part list.
void check_cover(const std::vector<TensorLayout>& tensors, const Partition& p,
                 std::size_t num_peers) {
  std::size_t at = 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    std::int64_t next = 0;
    std::size_t count = 0;
    while (at < p.parts.size() && p.parts[at].tensor_index == t) {
      CHECK(p.parts[at].offset == next);
      CHECK(p.parts[at].length >= 1);
      next += p.parts[at].length;
      ++at;
      ++count;
    }
    CHECK(next == tensors[t].num_elements);
    CHECK(p.num_parts_by_tensor[t] == count);
  }
  CHECK(at == p.parts.size());
  REQUIRE(p.num_parts_by_peer.size() == num_peers);
  std::size_t total_parts = 0;
  for (std::size_t k = 0; k < num_peers; ++k) {
    REQUIRE(p.parts_by_peer[k].size() == p.num_parts_by_peer[k]);
    for (std::size_t j = 0; j < p.parts_by_peer[k].size(); ++j) {
      const auto& part = p.parts[p.parts_by_peer[k][j]];
      CHECK(part.peer == k);
      CHECK(part.index_in_peer == j);
      if (j > 0) CHECK(p.parts_by_peer[k][j] > p.parts_by_peer[k][j - 1]);
    }
    total_parts += p.num_parts_by_peer[k];
  }
  CHECK(total_parts == p.parts.size());
}

}  // namespace

TEST_CASE("parts cover every element exactly once, in order", "[averaging][partition]") {
  std::mt19937_64 rng(31337);
  const std::vector<std::vector<double>> fraction_sets = {
      {1, 1}, {0.333, 0.1667, 0.5003}, {1, 0}, {0, 0.4, 0.6, 0}, {1}, {1, 1, 1, 1, 1, 1, 1, 1, 1}};
  for (std::int64_t part_bytes : {std::int64_t{16}, std::int64_t{31337}, std::int64_t{1} << 20,
                                  std::int64_t{10'000'000'000}}) {
    for (const auto& fractions : fraction_sets) {
      std::vector<TensorLayout> tensors;
      const std::size_t num_tensors = 1 + rng() % 5;
      for (std::size_t t = 0; t < num_tensors; ++t) {
        const std::int64_t n = rng() % 4 == 0 ? 0 : static_cast<std::int64_t>(rng() % 300000);
        tensors.push_back(TensorLayout{n, t % 2 ? 2u : 4u, t % 3 ? 1.0 : 0.25});
      }
      CAPTURE(part_bytes, fractions);
      const Partition p = split(tensors, fractions, part_bytes);
      check_cover(tensors, p, fractions.size());
      for (std::size_t k = 0; k < fractions.size(); ++k) {
        if (fractions[k] == 0.0) CHECK(p.num_parts_by_peer[k] == 0);
      }
    }
  }
}

TEST_CASE("parts go to the peer owning them, straddlers to the largest overlap",
          "[averaging][partition]") {
  // 4 floats per part: tensor 0 = [0,4) [4,8) [8,10); tensor 1 = [0,4) [4,7).
  // Positions 0-4, 4-8, 8-10, 10-14, 14-17; pivots 8, 17.
  Partition p = split(floats({10, 7}), {1, 1}, 16);
  CHECK(p.pivots == std::vector<std::int64_t>{8, 17});
  CHECK(owners(p) == std::vector<std::size_t>{0, 0, 1, 1, 1});
  CHECK(p.num_parts_by_peer == std::vector<std::size_t>{2, 3});
  CHECK(p.num_parts_by_tensor == std::vector<std::size_t>{3, 2});

  // Pivot 5 inside [4,8): peer 0 holds 1 element of it, peer 1 holds 3.
  CHECK(owners(split(floats({10}), {1, 1}, 16)) == std::vector<std::size_t>{0, 1, 1});
  // Pivot 3 inside [0,4): 3 vs 1, so peer 0 keeps it.
  CHECK(owners(split(floats({8}), {3, 5}, 16)) == std::vector<std::size_t>{0, 1});
  // An even overlap goes to the first peer; the second then has nothing.
  Partition tie = split(floats({4}), {1, 1}, 16);
  CHECK(owners(tie) == std::vector<std::size_t>{0});
  CHECK(tie.num_parts_by_peer == std::vector<std::size_t>{1, 0});
  // One 12-element part over three ranges: overlaps 3, 6, 3 / 3, 3, 6 / 6, 6, 0.
  CHECK(owners(split(floats({12}), {1, 2, 1}, 48)) == std::vector<std::size_t>{1});
  CHECK(owners(split(floats({12}), {1, 1, 2}, 48)) == std::vector<std::size_t>{2});
  CHECK(owners(split(floats({12}), {1, 1, 0}, 48)) == std::vector<std::size_t>{0});
}

TEST_CASE("peers with fraction 0 get no parts, empty tensors none at all",
          "[averaging][partition]") {
  Partition p = split(floats({0, 5, 0, 6, 0}), {0, 0.4, 0.6, 0}, 8);
  check_cover(floats({0, 5, 0, 6, 0}), p, 4);
  CHECK(p.num_parts_by_peer[0] == 0);
  CHECK(p.num_parts_by_peer[3] == 0);
  CHECK(p.num_parts_by_tensor == std::vector<std::size_t>{0, 3, 0, 3, 0});

  Partition empty = split(floats({0, 0}), {1, 0}, 8);
  CHECK(empty.parts.empty());
  CHECK(empty.total_size == 0);
  CHECK(empty.num_parts_by_peer == std::vector<std::size_t>{0, 0});
}

TEST_CASE("element counts from load balancing are the pivots exactly", "[averaging][partition]") {
  // 41 / 60 * 60 is not 41 in floating point; counts that add up to the total are used
  // as they are.
  Partition p = split(floats({60}), {41, 19, 0}, 4);
  CHECK(p.pivots == std::vector<std::int64_t>{41, 60, 60});
  CHECK(p.num_parts_by_peer == std::vector<std::size_t>{41, 19, 0});
  Partition q = split(floats({7, 3, 90}), {33, 33, 34}, 4);
  CHECK(q.num_parts_by_peer == std::vector<std::size_t>{33, 33, 34});
}

TEST_CASE("part size follows element size and compression ratio", "[averaging][partition]") {
  CHECK(*part_size_values(TensorLayout{10, 4, 1.0}, 16) == 4);
  CHECK(*part_size_values(TensorLayout{10, 4, 0.25}, 16) == 16);
  CHECK(*part_size_values(TensorLayout{10, 2, 1.0}, 17) == 8);
  CHECK(*part_size_values(TensorLayout{10, 8, 1.0}, 3) == 1);  // never below one element
  CHECK(*part_size_values(TensorLayout{10, 4, 1.0}, std::int64_t{1} << 19) == 131072);
  Partition p = split({TensorLayout{100, 4, 0.5}}, {1}, 40);
  CHECK(p.parts.size() == 5);
  CHECK(p.parts.back().length == 20);
}

TEST_CASE("identical inputs give identical partitions", "[averaging][partition]") {
  const auto tensors = floats({123457, 3, 99991, 1});
  const std::vector<double> fractions = {0.1, 0.35, 0.0, 0.55};
  const Partition a = split(tensors, fractions, 1000);
  const Partition b = split(tensors, fractions, 1000);
  REQUIRE(a.parts.size() == b.parts.size());
  for (std::size_t i = 0; i < a.parts.size(); ++i) {
    CHECK(a.parts[i].offset == b.parts[i].offset);
    CHECK(a.parts[i].length == b.parts[i].length);
    CHECK(a.parts[i].peer == b.parts[i].peer);
  }
  CHECK(a.pivots == b.pivots);
}

TEST_CASE("bad partition inputs are rejected with clear errors", "[averaging][partition]") {
  const auto t = floats({10});
  auto no_peers = partition_tensors(t, {}, 16);
  REQUIRE_FALSE(no_peers.ok());
  CHECK(no_peers.error().code == errc::invalid_argument);
  auto zero_sum = partition_tensors(t, {0, 0}, 16);
  REQUIRE_FALSE(zero_sum.ok());
  CHECK_THAT(zero_sum.error().message, Catch::Contains("sum"));
  CHECK_FALSE(partition_tensors(t, {1, -1}, 16).ok());
  CHECK_FALSE(partition_tensors(t, {1, std::nan("")}, 16).ok());
  CHECK_FALSE(partition_tensors(t, {1}, 0).ok());
  CHECK_FALSE(partition_tensors(floats({-1}), {1}, 16).ok());
  CHECK_FALSE(partition_tensors({TensorLayout{10, 0, 1.0}}, {1}, 16).ok());
  CHECK_FALSE(partition_tensors({TensorLayout{10, 4, 0.0}}, {1}, 16).ok());
  CHECK_FALSE(partition_tensors({TensorLayout{10, 4, HUGE_VAL}}, {1}, 16).ok());
}
