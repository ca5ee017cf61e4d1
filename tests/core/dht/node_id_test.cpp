// core::dht::NodeId: golden key ids, XOR distance and its ordering, bit helpers.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "core/dht/node_id.hpp"

namespace {

using apiary::errc;
using apiary::core::dht::k_id_bits;
using apiary::core::dht::NodeId;

NodeId id_hex(const std::string& hex) {
  auto id = NodeId::from_hex(hex);
  REQUIRE(id.ok());
  return *id;
}

/// An id whose value is the small number `v`.
NodeId small(std::uint64_t v) {
  NodeId::Bytes b{};
  for (int i = 0; i < 8; ++i) b[19 - i] = static_cast<std::uint8_t>(v >> (8 * i));
  return NodeId(b);
}

std::string bit_string(const NodeId& id) {
  std::string s;
  for (std::size_t i = 0; i < k_id_bits; ++i) s.push_back(id.bit(i) ? '1' : '0');
  return s;
}

}  // namespace

TEST_CASE("key ids match hivemind's golden vectors", "[dht][node_id]") {
  CHECK(NodeId::of_str_key("key").to_hex() == "88c6f489594d5d9a9d57d93567bfb6ee377abd24");
  CHECK(NodeId::of_str_key("mykey").to_hex() == "6a9a82708532eead9c87b7c2aa81916d0a0c4619");
  CHECK(NodeId::of_bytes_key("key").to_hex() == "a62f2225bf70bfaccbc7f1ef2a397836717377de");
  CHECK(NodeId::of_str_key("my_tensor.0b").to_hex() ==
        "d40864b44265ae7596e886de29aabd3c4ddfae8c");
  // A pre-encoded key: msgpack str "key" is a3 6b 65 79.
  CHECK(NodeId::of_packed_key(std::string("\xa3key", 4)) == NodeId::of_str_key("key"));
  CHECK(NodeId::of_str_key("party").to_hex() == "e07cbefaa9b17d097422e8bde5dd88d1930f048f");
}

TEST_CASE("a key longer than 31 bytes is encoded as str8, not fixstr", "[dht][node_id]") {
  const std::string key(40, 'x');
  const std::string packed = std::string("\xd9\x28", 2) + key;
  CHECK(NodeId::of_str_key(key) == NodeId::of_packed_key(packed));
  CHECK(NodeId::of_str_key(key) != NodeId::of_bytes_key(key));
}

TEST_CASE("random ids: self distance 0, distinct ids positive, bytes round-trip",
          "[dht][node_id]") {
  std::mt19937_64 gen(42);
  for (int i = 0; i < 100; ++i) {
    const NodeId a = NodeId::random(gen);
    const NodeId b = NodeId::random(gen);
    REQUIRE(a != b);
    CHECK(a.distance(a) == NodeId::min());
    CHECK(a.distance(b) > NodeId::min());
    CHECK(a.distance(b) == b.distance(a));
    auto back = NodeId::from_bytes(a.to_bytes());
    REQUIRE(back.ok());
    CHECK(*back == a);
    CHECK(NodeId::from_hex(a.to_hex()).value() == a);
  }
}

TEST_CASE("the same generator seed gives the same ids", "[dht][node_id]") {
  std::mt19937_64 g1(7);
  std::mt19937_64 g2(7);
  std::uint64_t calls = 0;
  auto counting = [&] { ++calls; return g2(); };
  CHECK(NodeId::random(g1) == NodeId::random(counting));
  CHECK(calls == 3);
}

TEST_CASE("ordering is numeric on the big-endian value", "[dht][node_id]") {
  CHECK(small(1) < small(2));
  CHECK(small(255) < small(256));
  CHECK(small(0x0100) > small(0x00ff));
  CHECK(NodeId::max() > small(~0ULL));
  CHECK(NodeId::min() == small(0));
  CHECK((small(5) ^ small(3)) == small(6));
  // Distance ranks the nearer of two candidates first.
  CHECK(small(8).distance(small(9)) < small(8).distance(small(12)));
}

TEST_CASE("common prefix length equals the bit-string prefix", "[dht][node_id]") {
  std::mt19937_64 gen(1);
  for (int i = 0; i < 256; ++i) {
    const NodeId a = small(gen() % 4096);
    const NodeId b = small(gen() % 4096);
    const std::string sa = bit_string(a);
    const std::string sb = bit_string(b);
    std::size_t expected = 0;
    while (expected < sa.size() && sa[expected] == sb[expected]) ++expected;
    CHECK(a.common_prefix_length(b) == expected);
  }
  CHECK(small(0).common_prefix_length(small(0)) == k_id_bits);
  CHECK(NodeId::min().common_prefix_length(NodeId::max()) == 0);
}

TEST_CASE("bit, with_bit and prefix address bits from the most significant", "[dht][node_id]") {
  const NodeId top = NodeId::min().with_bit(0, true);
  CHECK(top.to_hex() == "8000000000000000000000000000000000000000");
  CHECK(top.bit(0));
  CHECK_FALSE(top.bit(1));
  CHECK(small(1).bit(159));
  CHECK(small(1).with_bit(159, false) == NodeId::min());
  CHECK(NodeId::max().prefix(0) == NodeId::min());
  CHECK(NodeId::max().prefix(160) == NodeId::max());
  CHECK(NodeId::max().prefix(4).to_hex() == "f000000000000000000000000000000000000000");
  CHECK(NodeId::max().prefix(12).to_hex() == "fff0000000000000000000000000000000000000");
  CHECK(NodeId::max().prefix(17).to_hex() == "ffff800000000000000000000000000000000000");
}

TEST_CASE("malformed ids are rejected with a clear error", "[dht][node_id]") {
  auto short_id = NodeId::from_bytes("abc");
  REQUIRE_FALSE(short_id.ok());
  CHECK(short_id.error().code == errc::invalid_argument);
  CHECK(short_id.error().message.find("20 bytes") != std::string::npos);
  CHECK_FALSE(NodeId::from_hex("88c6").ok());
  CHECK_FALSE(NodeId::from_hex("zz" + std::string(38, '0')).ok());
  CHECK(id_hex("88C6F489594D5D9A9D57D93567BFB6EE377ABD24") == NodeId::of_str_key("key"));
}

TEST_CASE("ids order as their bytes do, big-endian, whichever byte first differs", "[dht][node_id]") {
  std::mt19937_64 gen(11);
  for (int i = 0; i < 2000; ++i) {
    NodeId a = NodeId::random(gen);
    // Mostly ids that share a prefix, so that every word of the comparison decides some.
    std::string bytes = a.to_bytes();
    const std::size_t at = static_cast<std::size_t>(gen() % bytes.size());
    bytes[at] = static_cast<char>(gen());
    const NodeId b = NodeId::from_bytes(bytes).value();
    const bool byte_order = a.to_bytes() < b.to_bytes();  // std::string compares as unsigned char
    INFO("differs at byte " << at);
    CHECK((a < b) == byte_order);
    CHECK((b < a) == (b.to_bytes() < a.to_bytes()));
    CHECK_FALSE(a < a);
  }
  CHECK(NodeId::min() < NodeId::max());
}
