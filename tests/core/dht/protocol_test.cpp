// core::dht::Protocol, the DHTProtocol servicer: rpc_ping, rpc_store and rpc_find driven
// through handle() with serialized requests, the way a shell would call them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/protocol.hpp"
#include "dht.pb.h"
#include "tests/core/dht/protocol_requests.hpp"
#include "tests/support/peer_addr.hpp"

namespace {

namespace pb = apiary::pb;
using namespace apiary::core::dht;
using namespace apiary::testing::dht_protocol;
using apiary::test::test_peer;

pb::NodeInfo info(const NodeId& node) {
  pb::NodeInfo out;
  out.set_node_id(node.to_bytes());
  return out;
}

/// Serves `request` under `handle`; fails the test on an error.
template <class Response, class Request>
Response call(Protocol& p, const char* handle, const Request& request,
              const PeerId& from_peer = test_peer("caller"), DhtTime now = k_now) {
  auto bytes = p.handle(now, handle, from_peer, request.SerializeAsString());
  REQUIRE(bytes.ok());
  Response response;
  REQUIRE(response.ParseFromString(*bytes));
  return response;
}

/// One store item.
struct Item {
  NodeId key;
  std::string subkey;
  std::string value;
  DhtTime expiration;
  bool in_cache = false;
};

pb::StoreRequest store_request(const std::vector<Item>& items) {
  pb::StoreRequest r;
  for (const Item& i : items) add_item(r, i.key.to_bytes(), i.subkey, i.value, i.expiration, i.in_cache);
  return r;
}

std::vector<bool> store(Protocol& p, const std::vector<Item>& items, DhtTime now = k_now) {
  auto response =
      call<pb::StoreResponse>(p, k_store_handle, store_request(items), test_peer("caller"), now);
  return {response.store_ok().begin(), response.store_ok().end()};
}

pb::FindResult find(Protocol& p, const NodeId& key, DhtTime now = k_now) {
  pb::FindRequest r;
  r.add_keys(key.to_bytes());
  auto response = call<pb::FindResponse>(p, k_find_handle, r, test_peer("caller"), now);
  REQUIRE(response.results_size() == 1);
  return response.results(0);
}

/// One entry of a dictionary, its subkey and value as strings to pack.
struct Entry {
  std::string subkey;
  std::string value;
  DhtTime expiration;
};

/// Stores under "d" a whole dictionary of `entries`; returns what the store reported for it.
bool store_dictionary(Protocol& p, const std::vector<Entry>& entries) {
  DictionaryValue dictionary;
  for (const Entry& e : entries) dictionary.store(k_now, pack_str(e.subkey), pack_str(e.value), e.expiration);
  const auto ok = store(p, {{id("d"), k_subkey_dictionary, pack_dictionary(k_now, dictionary), 0}});
  REQUIRE(ok.size() == 1);
  return ok[0];
}

/// The dictionary found under "d".
DictionaryValue dictionary_at_d(Protocol& p) {
  auto dictionary = unpack_dictionary(find(p, id("d")).value());
  REQUIRE(dictionary.ok());
  return *dictionary;
}

}  // namespace

TEST_CASE("ping answers with own NodeInfo and time, and registers the sender",
          "[dht][protocol]") {
  Protocol p(id("self"), test_peer("self-peer"), ProtocolConfig{});
  pb::PingRequest request;
  *request.mutable_peer() = info(id("alice"));
  request.set_validate(true);
  auto response = call<pb::PingResponse>(p, k_ping_handle, request, test_peer("alice-peer"));
  CHECK(response.peer().node_id() == id("self").to_bytes());
  CHECK(response.dht_time() == k_now);
  CHECK_FALSE(response.available());  // validation call-backs are the caller's job
  CHECK(p.routing_table().peer_of(id("alice")) == std::optional<PeerId>(test_peer("alice-peer")));
  auto events = p.take_routing_events();
  REQUIRE(events.joined.size() == 1);
  CHECK(events.joined[0].id == id("alice"));
  CHECK(events.to_ping.empty());
  // A known sender is not a newcomer again; the events were cleared.
  (void)call<pb::PingResponse>(p, k_ping_handle, request, test_peer("alice-peer"));
  CHECK(p.take_routing_events().joined.empty());
}

TEST_CASE("senders without an id, without a peer, or equal to self are not registered",
          "[dht][protocol]") {
  Protocol p(id("self"), test_peer("self-peer"), ProtocolConfig{});
  (void)call<pb::PingResponse>(p, k_ping_handle, pb::PingRequest{}, test_peer("anon-peer"));
  pb::PingRequest no_peer;
  *no_peer.mutable_peer() = info(id("bob"));
  (void)call<pb::PingResponse>(p, k_ping_handle, no_peer, PeerId{});
  pb::PingRequest self;
  *self.mutable_peer() = info(id("self"));
  (void)call<pb::PingResponse>(p, k_ping_handle, self, test_peer("self-peer"));
  CHECK(p.routing_table().size() == 0);
  CHECK(p.take_routing_events().joined.empty());
}

TEST_CASE("client mode answers every RPC with an empty NodeInfo", "[dht][protocol]") {
  ProtocolConfig config;
  config.client_mode = true;
  Protocol p(id("self"), test_peer("self-peer"), config);
  CHECK(p.node_info().node_id().empty());
  auto ping = call<pb::PingResponse>(p, k_ping_handle, pb::PingRequest{});
  CHECK(ping.peer().node_id().empty());
  CHECK(ping.dht_time() == k_now);
  auto stored = call<pb::StoreResponse>(
      p, k_store_handle, store_request({{id("k"), k_subkey_regular, "v", k_now + 10}}));
  CHECK(stored.peer().node_id().empty());
  pb::FindRequest f;
  f.add_keys(id("k").to_bytes());
  CHECK(call<pb::FindResponse>(p, k_find_handle, f).peer().node_id().empty());
}

TEST_CASE("a stored regular value is found with its exact expiration", "[dht][protocol]") {
  Protocol p(id("self"), test_peer("self-peer"), ProtocolConfig{});
  const DhtTime expiration = k_now + 123.456789;
  auto ok = store(p, {{id("key"), k_subkey_regular, pack_str("value"), expiration},
                      {id("old"), k_subkey_regular, pack_str("late"), k_now - 1}});
  CHECK(ok == std::vector<bool>{true, false});
  auto result = find(p, id("key"));
  CHECK(result.type() == pb::FOUND_REGULAR);
  CHECK(result.value() == pack_str("value"));
  CHECK(result.expiration_time() == expiration);
  CHECK(find(p, id("old")).type() == pb::NOT_FOUND);
  // Newest wins: an older write is rejected and the value stays.
  CHECK(store(p, {{id("key"), k_subkey_regular, pack_str("older"), k_now + 5}}) ==
        std::vector<bool>{false});
  CHECK(find(p, id("key")).value() == pack_str("value"));
  // Past its expiration the value is gone (time only moves forward from here).
  CHECK(find(p, id("key"), expiration + 1).type() == pb::NOT_FOUND);
}

TEST_CASE("subkey stores build a dictionary, found with with the latest expiration",
          "[dht][protocol]") {
  Protocol p(id("self"), test_peer("self-peer"), ProtocolConfig{});
  auto ok = store(p, {{id("dict"), pack_str("a"), pack_str("va"), k_now + 10},
                      {id("dict"), pack_str("b"), pack_str("vb"), k_now + 30}});
  CHECK(ok == std::vector<bool>{true, true});
  auto result = find(p, id("dict"));
  REQUIRE(result.type() == pb::FOUND_DICTIONARY);
  CHECK(result.expiration_time() == k_now + 30);
  auto dictionary = unpack_dictionary(result.value());
  REQUIRE(dictionary.ok());
  CHECK(dictionary->size(k_now) == 2);
  CHECK(dictionary->get(k_now, pack_str("a"))->value == pack_str("va"));
  CHECK(dictionary->get(k_now, pack_str("b"))->expiration_time == k_now + 30);
  CHECK(dictionary->latest_expiration_time() == k_now + 30);
  // A regular value expiring no later than the dictionary's outer expiration loses.
  CHECK(store(p, {{id("dict"), k_subkey_regular, pack_str("r"), k_now + 30}}) ==
        std::vector<bool>{false});
}

TEST_CASE("a whole dictionary value merges entry by entry", "[dht][protocol]") {
  Protocol p(id("self"), test_peer("self-peer"), ProtocolConfig{});
  CHECK(store(p, {{id("d"), pack_str("a"), pack_str("old-a"), k_now + 20}}) ==
        std::vector<bool>{true});
  CHECK(store_dictionary(p, {{"a", "new-a", k_now + 40}, {"c", "c", k_now + 15}}));
  DictionaryValue merged = dictionary_at_d(p);
  CHECK(merged.size(k_now) == 2);
  CHECK(merged.get(k_now, pack_str("a"))->value == pack_str("new-a"));
  CHECK(merged.latest_expiration_time() == k_now + 40);
  // One entry older than the stored one: the rest merges, but the item reports false.
  CHECK_FALSE(store_dictionary(p, {{"a", "stale", k_now + 25}, {"e", "e", k_now + 25}}));
  DictionaryValue after = dictionary_at_d(p);
  CHECK(after.get(k_now, pack_str("a"))->value == pack_str("new-a"));
  CHECK(after.get(k_now, pack_str("e")).has_value());
}

TEST_CASE("in_cache items go to the cache, and find takes the later of storage and cache",
          "[dht][protocol]") {
  ProtocolConfig config;
  config.cache_size = 2;
  Protocol p(id("self"), test_peer("self-peer"), config);
  CHECK(store(p, {{id("k"), k_subkey_regular, "stored", k_now + 10, false},
                  {id("k"), k_subkey_regular, "cached", k_now + 20, true}}) ==
        std::vector<bool>{true, true});
  CHECK(p.storage().size(k_now) == 1);
  CHECK(p.cache().size(k_now) == 1);
  CHECK(find(p, id("k")).value() == "cached");
  // After the stored value expires only the cached one is left.
  CHECK(find(p, id("k"), k_now + 15).value() == "cached");
  // A later value in storage wins over the cache.
  CHECK(store(p, {{id("k"), k_subkey_regular, "newer", k_now + 50, false}}) ==
        std::vector<bool>{true});
  CHECK(find(p, id("k")).value() == "newer");
  // The cache is bounded: the earliest-expiring key is evicted.
  (void)store(p, {{id("c1"), k_subkey_regular, "1", k_now + 30, true},
                  {id("c2"), k_subkey_regular, "2", k_now + 40, true}});
  CHECK(p.cache().size(k_now) == 2);
  CHECK_FALSE(p.cache().contains(k_now, id("k")));
  CHECK(p.storage().size(k_now) == 1);
}

TEST_CASE("find lists the nearest nodes by XOR distance, leaving out the requester",
          "[dht][protocol]") {
  ProtocolConfig config;
  config.bucket_size = 8;
  Protocol p(id("self"), test_peer("self-peer"), config);
  std::vector<NodeId> nodes;
  for (int i = 0; i < 40; ++i) {
    const NodeId node = id("node" + std::to_string(i));
    pb::PingRequest ping;
    *ping.mutable_peer() = info(node);
    (void)call<pb::PingResponse>(p, k_ping_handle, ping, test_peer("peer-of-" + node.to_hex()));
    if (p.routing_table().contains(node)) nodes.push_back(node);
  }
  REQUIRE(nodes.size() >= 9);
  const NodeId key = id("target");
  // The requester is the table's nearest node to the key, so leaving it out shows.
  std::sort(nodes.begin(), nodes.end(), [&](const NodeId& a, const NodeId& b) {
    return a.distance(key) < b.distance(key);
  });
  const NodeId requester = nodes[0];
  pb::FindRequest request;
  request.add_keys(key.to_bytes());
  *request.mutable_peer() = info(requester);
  auto response = call<pb::FindResponse>(p, k_find_handle, request,
                                         test_peer("peer-of-" + requester.to_hex()));
  REQUIRE(response.results_size() == 1);
  const auto& result = response.results(0);
  CHECK(result.type() == pb::NOT_FOUND);
  REQUIRE(result.nearest_node_ids_size() == 8);
  REQUIRE(result.nearest_peer_ids_size() == 8);
  for (int i = 0; i < 8; ++i) {
    const NodeId expected = nodes[static_cast<std::size_t>(i) + 1];
    CHECK(result.nearest_node_ids(i) == expected.to_bytes());
    CHECK(result.nearest_peer_ids(i) == test_peer("peer-of-" + expected.to_hex()));
  }
  // Without the requester's id, the peer it calls from identifies it.
  pb::FindRequest anonymous;
  anonymous.add_keys(key.to_bytes());
  auto by_peer = call<pb::FindResponse>(p, k_find_handle, anonymous,
                                        test_peer("peer-of-" + requester.to_hex()));
  CHECK(by_peer.results(0).nearest_node_ids(0) == nodes[1].to_bytes());
  // Anyone else gets the requester back as the nearest.
  CHECK(find(p, key).nearest_node_ids(0) == requester.to_bytes());
}
