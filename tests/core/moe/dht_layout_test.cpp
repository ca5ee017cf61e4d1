// The DHT layout of declared experts (hivemind's declare_experts / get_experts, reference
// §6.2 and test_dht_single_node): the records, their bytes, and what a DHT node gives back.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "core/dht/msgpack_value.hpp"
#include "core/moe/dht_layout.hpp"
#include "tests/core/moe/expert_dht.hpp"

namespace {

namespace dht = apiary::core::dht;
namespace moe = apiary::core::moe;
using moe::ExpertEntry;
using moe::ExpertInfo;
using moe::testing::OneNodeDht;

const std::string k_peer = "12D3KooWPeer";

ExpertEntry regular(const std::string& uid) { return ExpertEntry{uid, std::nullopt, ExpertInfo{uid, k_peer}}; }
ExpertEntry level(const std::string& prefix, std::int64_t subkey, const std::string& uid) {
  return ExpertEntry{prefix, subkey, ExpertInfo{uid, k_peer}};
}

std::string unhex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

/// A found dictionary of (packed subkey -> packed value).
std::optional<dht::FoundValue> dictionary(const std::vector<std::pair<std::string, std::string>>& entries) {
  dht::FoundValue::Dictionary d;
  for (const auto& [subkey, value] : entries) d[subkey] = {value, 1e10};
  return dht::FoundValue{d, 1e10};
}

}  // namespace

TEST_CASE("declared uids are stored under themselves and every prefix level as hivemind lays them out", "[moe]") {
  // Flat uids: uid -> peer, and the uid as a prefix with subkey -1.
  auto flat = moe::declaration_entries({"expert.1", "expert.2", "expert.3"}, k_peer);
  REQUIRE(flat);
  CHECK(*flat == std::vector<ExpertEntry>{regular("expert.1"), level("expert.1.", -1, "expert.1"),
                                          regular("expert.2"), level("expert.2.", -1, "expert.2"),
                                          regular("expert.3"), level("expert.3.", -1, "expert.3")});
  auto two = moe::declaration_entries({"ffn.1", "ffn.2"}, k_peer);
  REQUIRE(two);
  CHECK(two->size() == 4);
  // e.1.2.3 and e.1.2.5 share (e.1., 2): one record, naming the last uid; the top prefix
  // "e." is not stored.
  auto grid = moe::declaration_entries({"e.1.2.3", "e.1.2.5", "e.2.0"}, k_peer);
  REQUIRE(grid);
  CHECK(*grid == std::vector<ExpertEntry>{regular("e.1.2.3"), level("e.1.2.", 3, "e.1.2.3"), level("e.1.", 2, "e.1.2.5"),
                                          regular("e.1.2.5"), level("e.1.2.", 5, "e.1.2.5"), regular("e.2.0"),
                                          level("e.2.", 0, "e.2.0")});
  CHECK(grid->size() == 7);
  auto again = moe::declaration_entries({"e.1.2.3", "e.1.2.3"}, k_peer);
  CHECK(again->size() == 3);
}

TEST_CASE("expert records carry hivemind's msgpack forms", "[moe]") {
  const dht::StoreItem uid = moe::store_item(ExpertEntry{"expert.5", std::nullopt, ExpertInfo{"expert.5", "QmX"}}, 99.5);
  CHECK(uid.key == dht::NodeId::of_str_key("expert.5"));
  CHECK(uid.subkey == dht::k_subkey_regular);
  CHECK(uid.value == dht::pack_str("QmX"));
  CHECK(uid.expiration == 99.5);
  const dht::StoreItem prefix = moe::store_item(ExpertEntry{"expert.5.", -1, ExpertInfo{"expert.5", "QmX"}}, 99.5);
  CHECK(prefix.key == dht::NodeId::of_str_key("expert.5."));
  CHECK(prefix.subkey == std::string("\xff"));  // msgpack -1
  CHECK(prefix.value == unhex("c70e4092a86578706572742e35a3516d58"));  // ("expert.5", "QmX") as ext 0x40
  const dht::StoreItem coordinate = moe::store_item(ExpertEntry{"e.1.", 300, ExpertInfo{"e.1.300", "QmX"}}, 1);
  CHECK(coordinate.subkey == unhex("cd012c"));  // msgpack uint16 300
  const dht::StoreItem negative = moe::negative_cache_item("ffn.0.", 7);
  CHECK(negative.key == dht::NodeId::of_str_key("ffn.0."));
  CHECK(negative.subkey == std::string("\xff"));
  CHECK(negative.value == std::string("\xc0", 1));
}

TEST_CASE("experts declared in a DHT node are found back as uid peers and prefix successors", "[moe]") {
  OneNodeDht d;
  const auto flat = moe::testing::declare(d.net, d.node, {"expert.1", "expert.2", "expert.3"}, k_peer);
  CHECK(flat == std::vector<bool>(6, true));
  CHECK(moe::testing::declare(d.net, d.node, {"ffn.1", "ffn.2"}, k_peer).size() == 4);
  const auto grid = moe::testing::declare(d.net, d.node, {"e.1.2.3", "e.1.2.5", "e.2.0"}, "12D3KooWOther");
  CHECK(grid == std::vector<bool>(7, true));

  // get_experts: a found str is the server; a missing uid is none.
  for (const std::string uid : {"expert.3", "expert.2"}) {
    auto expert = moe::expert_of(uid, moe::testing::get(d.net, d.node, uid));
    REQUIRE(expert);
    CHECK(*expert == ExpertInfo{uid, k_peer});
  }
  CHECK_FALSE(moe::expert_of("expert.4", moe::testing::get(d.net, d.node, "expert.4")));
  // A prefix key holds a dictionary, not a server.
  CHECK_FALSE(moe::expert_of("e.1.2.", moe::testing::get(d.net, d.node, "e.1.2.")));

  // Successors: e.1.2. has {3, 5}, e.2. has {0}, e.1. has {2} (naming e.1.2.5), e.4.5. nothing.
  auto e12 = moe::successors_of(moe::testing::get(d.net, d.node, "e.1.2."));
  REQUIRE(e12);
  CHECK(*e12 == moe::Successors{{3, ExpertInfo{"e.1.2.3", "12D3KooWOther"}}, {5, ExpertInfo{"e.1.2.5", "12D3KooWOther"}}});
  auto e2 = moe::successors_of(moe::testing::get(d.net, d.node, "e.2."));
  REQUIRE(e2);
  CHECK(*e2 == moe::Successors{{0, ExpertInfo{"e.2.0", "12D3KooWOther"}}});
  auto e1 = moe::successors_of(moe::testing::get(d.net, d.node, "e.1."));
  REQUIRE(e1);
  CHECK(*e1 == moe::Successors{{2, ExpertInfo{"e.1.2.5", "12D3KooWOther"}}});
  CHECK_FALSE(moe::successors_of(moe::testing::get(d.net, d.node, "e.4.5.")));
  auto flat5 = moe::successors_of(moe::testing::get(d.net, d.node, "expert.3."));
  REQUIRE(flat5);
  CHECK(*flat5 == moe::Successors{{-1, ExpertInfo{"expert.3", k_peer}}});
}

TEST_CASE("a declaration with an invalid uid is refused whole naming the uid", "[moe]") {
  auto bad = moe::declaration_entries({"e.1", "transformer.encoder.2", "e.2"}, k_peer);
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == apiary::errc::invalid_argument);
  CHECK(bad.error().message.find("'transformer.encoder.2'") != std::string::npos);
  CHECK(bad.error().message.find("nothing was declared") != std::string::npos);
  CHECK_FALSE(moe::declaration_entries({"e.01"}, k_peer));
  CHECK_FALSE(moe::declaration_entries({"e."}, k_peer));
  auto no_peer = moe::declaration_entries({"e.1"}, "");
  REQUIRE_FALSE(no_peer);
  CHECK(no_peer.error().message.find("peer id is empty") != std::string::npos);
}

TEST_CASE("found values that are not expert records are skipped", "[moe]") {
  const std::string good = dht::pack_tuple({dht::pack_str("e.1.2"), dht::pack_str("QmA")});
  auto found = moe::successors_of(dictionary({
      {"\x02", good},                                                                   // kept
      {"\xff", std::string("\xc0", 1)},                                                 // a negative-cache entry
      {dht::pack_str("3"), good},                                                       // a str subkey
      {"\x04", dht::pack_tuple({dht::pack_str("e.1.4"), dht::pack_str("QmA"), dht::pack_str("x")})},  // 3-tuple
      {"\x05", dht::pack_tuple({dht::pack_str("e.1.05"), dht::pack_str("QmA")})},       // invalid uid
      {"\x06", dht::pack_tuple({dht::pack_str("e.1.6"), dht::pack_bin("QmA")})},        // peer as bytes
      {"\x07", dht::pack_str("e.1.7")},                                                 // not a tuple
  }));
  REQUIRE(found);
  CHECK(*found == moe::Successors{{2, ExpertInfo{"e.1.2", "QmA"}}});
  // Only the dictionary's negative entry: found, but nothing usable (not a reason to cache).
  auto negative = moe::successors_of(dictionary({{"\xff", std::string("\xc0", 1)}}));
  REQUIRE(negative);
  CHECK(negative->empty());
  // A regular value under a prefix: found, no successors.
  auto plain = moe::successors_of(dht::FoundValue{dht::pack_str("QmA"), 1e10});
  REQUIRE(plain);
  CHECK(plain->empty());
  CHECK_FALSE(moe::expert_of("e.1", dht::FoundValue{dht::pack_bin("QmA"), 1e10}));
  CHECK_FALSE(moe::expert_of("e.1", dht::FoundValue{std::string("\xc1", 1), 1e10}));
}
