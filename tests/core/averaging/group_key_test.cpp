// core::averaging group keys: the key pattern, and the Moshpit update that sends
// groupmates to distinct buckets (checked by a small 8-peer grid that converges).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/averaging/group_key.hpp"

namespace {

using apiary::errc;
using namespace apiary::core::averaging;

/// A group id of 20 bytes from a seeded generator (as a leader draws one).
std::string random_group_id(std::mt19937_64& rng) {
  std::string id(k_group_id_bytes, '\0');
  for (char& c : id) c = static_cast<char>(rng() & 0xff);
  return id;
}

std::string next_bits(const std::string& bits, const std::string& group_id, std::size_t size,
                      std::size_t index, std::optional<std::size_t> target) {
  auto r = next_group_bits(bits, group_id, size, index, target);
  INFO((r.ok() ? std::string() : r.error().what()));
  REQUIRE(r.ok());
  return *r;
}

}  // namespace

TEST_CASE("group keys follow prefix.0b<bits>", "[averaging][group_key]") {
  CHECK(is_valid_group_key("mygroup.0b0110"));
  CHECK(is_valid_group_key("mygroup.0b"));
  CHECK(is_valid_group_key("bert_exp4_averaging.0b01001101"));
  CHECK_FALSE(is_valid_group_key(".0b01"));
  CHECK_FALSE(is_valid_group_key("a.b.0b01"));
  CHECK_FALSE(is_valid_group_key("grp.0b012"));
  CHECK_FALSE(is_valid_group_key("grp0b01"));
  CHECK_FALSE(is_valid_group_key("grp.0x01"));
  CHECK_FALSE(is_valid_group_key("grp.0b01\n"));
  CHECK_FALSE(is_valid_group_key(""));

  auto key = parse_group_key("run.0b101");
  REQUIRE(key.ok());
  CHECK(key->prefix == "run");
  CHECK(key->bits == "101");
  CHECK(key->str() == "run.0b101");

  CHECK(*make_group_key("run", "") == "run.0b");
  CHECK(*make_group_key("run", "0011") == "run.0b0011");
  auto dotted = make_group_key("my.run", "01");
  REQUIRE_FALSE(dotted.ok());
  CHECK(dotted.error().code == errc::invalid_argument);
  CHECK_FALSE(make_group_key("", "01").ok());
  auto bad_bits = make_group_key("run", "0120");
  REQUIRE_FALSE(bad_bits.ok());
  CHECK_THAT(bad_bits.error().message, Catch::Contains("position 2"));
  auto bad_sep = parse_group_key("run.1b01");
  REQUIRE_FALSE(bad_sep.ok());
  CHECK_THAT(bad_sep.error().message, Catch::Contains(".0b"));
}

TEST_CASE("bucket counts and widths", "[averaging][group_key]") {
  CHECK(next_power_of_two(0) == 1);
  CHECK(next_power_of_two(1) == 1);
  CHECK(next_power_of_two(5) == 8);
  CHECK(next_power_of_two(16) == 16);
  CHECK(bucket_bits(1) == 0);
  CHECK(bucket_bits(2) == 1);
  CHECK(bucket_bits(3) == 2);
  CHECK(bucket_bits(16) == 4);
  CHECK(bucket_bits(17) == 5);
}

TEST_CASE("groupmates draw pairwise distinct buckets and bits", "[averaging][group_key]") {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string group_id = random_group_id(rng);
    const std::size_t size = 1 + rng() % 16;
    const std::optional<std::size_t> target =
        trial % 2 ? std::nullopt : std::optional<std::size_t>(size + rng() % 8);
    const std::size_t buckets = target ? *target : next_power_of_two(size);
    const std::string bits(bucket_bits(buckets) + rng() % 3, '1');
    std::set<std::size_t> drawn;
    std::set<std::string> next;
    for (std::size_t i = 0; i < size; ++i) {
      auto b = draw_bucket(group_id, size, i, buckets);
      REQUIRE(b.ok());
      CHECK(*b < buckets);
      drawn.insert(*b);
      const std::string nb = next_bits(bits, group_id, size, i, target);
      CHECK(nb.size() == bits.size());
      next.insert(nb);
    }
    CAPTURE(trial, size, buckets, bits);
    CHECK(drawn.size() == size);
    CHECK(next.size() == size);
  }
}

TEST_CASE("the update is deterministic in the group id", "[averaging][group_key]") {
  std::mt19937_64 rng(5);
  const std::string id = random_group_id(rng);
  CHECK(next_bits("0110", id, 4, 2, std::nullopt) == next_bits("0110", id, 4, 2, std::nullopt));
  // Different group ids lead to different draws.
  std::set<std::size_t> seen;
  for (int i = 0; i < 50; ++i) seen.insert(*draw_bucket(random_group_id(rng), 4, 0, 16));
  CHECK(seen.size() > 4);
  // The new bits keep the old tail and append the bucket in binary.
  const std::size_t b = *draw_bucket(id, 4, 2, 4);
  const std::string appended = std::string(1, char('0' + ((b >> 1) & 1))) + char('0' + (b & 1));
  CHECK(next_bits("0110", id, 4, 2, std::nullopt) == "10" + appended);
  // Empty bits stay empty; bits shorter than the bucket width keep their length.
  CHECK(next_bits("", id, 4, 2, std::nullopt).empty());
  CHECK(next_bits("1", id, 4, 2, std::nullopt) == appended.substr(1));
  // A group of one has one bucket: its bits do not move.
  CHECK(next_bits("0101", id, 1, 0, std::nullopt) == "0101");
}

TEST_CASE("bad Moshpit inputs are rejected with clear errors", "[averaging][group_key]") {
  const std::string id(k_group_id_bytes, '\x07');
  auto index = next_group_bits("01", id, 4, 4, std::nullopt);
  REQUIRE_FALSE(index.ok());
  CHECK(index.error().code == errc::invalid_argument);
  auto small = next_group_bits("01", id, 4, 0, std::size_t{2});
  REQUIRE_FALSE(small.ok());
  CHECK_THAT(small.error().message, Catch::Contains("target_group_size"));
  CHECK_FALSE(next_group_bits("01", "", 4, 0, std::nullopt).ok());
  CHECK_FALSE(next_group_bits("0a", id, 4, 0, std::nullopt).ok());
  CHECK_FALSE(next_group_bits("01", id, 4, 0, std::size_t{0}).ok());
  CHECK_FALSE(next_group_bits("01", id, 0, 0, std::nullopt).ok());
}

TEST_CASE("an 8-peer 2-bit grid with groups of 2 reaches the mean in 3 rounds",
          "[averaging][group_key]") {
  // Peers i start in bucket bin(i / 2); every round each bucket averages its members and
  // each member moves on with next_group_bits.
  std::mt19937_64 rng(2026);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> value(8);
  std::vector<std::string> bits(8);
  for (std::size_t i = 0; i < 8; ++i) {
    value[i] = normal(rng);
    bits[i] = std::string(1, char('0' + ((i / 2) >> 1))) + char('0' + ((i / 2) & 1));
  }
  const double mean = std::accumulate(value.begin(), value.end(), 0.0) / 8;
  for (int round = 0; round < 3; ++round) {
    std::map<std::string, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < 8; ++i) groups[bits[i]].push_back(i);
    REQUIRE(groups.size() == 4);
    for (const auto& [key, members] : groups) {
      REQUIRE(members.size() == 2);
      const double avg = (value[members[0]] + value[members[1]]) / 2;
      const std::string id = random_group_id(rng);
      for (std::size_t m = 0; m < members.size(); ++m) {
        value[members[m]] = avg;
        bits[members[m]] = next_bits(bits[members[m]], id, 2, m, std::size_t{2});
      }
    }
    CHECK(std::accumulate(value.begin(), value.end(), 0.0) / 8 == Approx(mean).margin(1e-12));
  }
  for (double v : value) CHECK(v == Approx(mean).margin(1e-12));
}
