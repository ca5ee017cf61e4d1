// core::dht::Protocol on bad input: unknown handles, unparsable bytes, misaligned or
// malformed store items, ids of the wrong size. Each gives a clear error and changes
// nothing. Also the routing work handed back (eviction pings) and config validation.
#include <catch2/catch.hpp>

#include <string>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/protocol.hpp"
#include "dht.pb.h"
#include "tests/core/dht/protocol_requests.hpp"
#include "tests/support/peer_addr.hpp"

namespace {

namespace pb = apiary::pb;
using apiary::errc;
using namespace apiary::core::dht;
using namespace apiary::testing::dht_protocol;
using apiary::test::test_peer;

/// A valid one-item store request of a regular value under `key`.
pb::StoreRequest one_item(const std::string& key_bytes) {
  pb::StoreRequest r;
  add_item(r, key_bytes, k_subkey_regular, pack_str("v"), k_now + 10, false);
  return r;
}

/// The error `handle` gives for `request`; fails the test if it succeeds.
apiary::Error error_of(Protocol& p, const char* handle, const std::string& request) {
  auto response = p.handle(k_now, handle, test_peer("caller"), request);
  REQUIRE_FALSE(response.ok());
  return response.error();
}

}  // namespace

TEST_CASE("unknown handles and unparsable requests are rejected with their names",
          "[dht][protocol]") {
  Protocol p(id("self"), test_peer("self-peer"), ProtocolConfig{});
  auto unknown = error_of(p, "DHTProtocol.rpc_nope", "");
  CHECK(unknown.code == errc::not_found);
  CHECK_THAT(unknown.message, Catch::Contains("DHTProtocol.rpc_nope"));
  const std::string garbage("\x12\x10" "abc", 5);  // field 2 claims 16 bytes, 3 follow
  for (const auto& [handle, type] : {std::pair{k_ping_handle, "PingRequest"},
                                     std::pair{k_store_handle, "StoreRequest"},
                                     std::pair{k_find_handle, "FindRequest"}}) {
    auto e = error_of(p, handle, garbage);
    CHECK(e.code == errc::malformed);
    CHECK_THAT(e.message, Catch::Contains(type));
  }
}

TEST_CASE("misaligned store lists are rejected and nothing is stored", "[dht][protocol]") {
  Protocol p(id("self"), test_peer("self-peer"), ProtocolConfig{});
  pb::StoreRequest r = one_item(id("a").to_bytes());
  r.add_keys(id("b").to_bytes());
  r.add_subkeys(k_subkey_regular);
  r.add_values(pack_str("v"));
  r.add_expiration_time(k_now + 10);  // in_cache has one entry, the rest two
  auto e = error_of(p, k_store_handle, r.SerializeAsString());
  CHECK(e.code == errc::malformed);
  CHECK_THAT(e.message, Catch::Contains("2 keys") && Catch::Contains("1 in_cache"));
  CHECK(p.storage().size(k_now) == 0);
}

TEST_CASE("keys and sender ids must be 20 bytes", "[dht][protocol]") {
  Protocol p(id("self"), test_peer("self-peer"), ProtocolConfig{});
  auto short_key = error_of(p, k_store_handle, one_item(std::string(19, 'k')).SerializeAsString());
  CHECK(short_key.code == errc::malformed);
  CHECK_THAT(short_key.message, Catch::Contains("StoreRequest.keys[0]") &&
                                    Catch::Contains("19 bytes"));
  pb::FindRequest find;
  find.add_keys(id("a").to_bytes());
  find.add_keys(std::string(21, 'k'));
  auto long_key = error_of(p, k_find_handle, find.SerializeAsString());
  CHECK(long_key.code == errc::malformed);
  CHECK_THAT(long_key.message, Catch::Contains("FindRequest.keys[1]"));
  pb::PingRequest ping;
  ping.mutable_peer()->set_node_id("short");
  auto bad_sender = error_of(p, k_ping_handle, ping.SerializeAsString());
  CHECK(bad_sender.code == errc::malformed);
  CHECK_THAT(bad_sender.message, Catch::Contains("PingRequest.peer.node_id"));
  CHECK(p.routing_table().size() == 0);
}

TEST_CASE("a malformed item anywhere in a store request stores nothing", "[dht][protocol]") {
  Protocol p(id("self"), test_peer("self-peer"), ProtocolConfig{});
  SECTION("a subkey that is not one msgpack object") {
    pb::StoreRequest r = one_item(id("a").to_bytes());
    // The subkey: a 3-byte str with 2 bytes.
    add_item(r, id("b").to_bytes(), std::string("\xa3" "ab", 3), pack_str("v"), k_now + 10, false);
    auto e = error_of(p, k_store_handle, r.SerializeAsString());
    CHECK(e.code == errc::malformed);
    CHECK_THAT(e.message, Catch::Contains("StoreRequest.subkeys[1]"));
  }
  SECTION("a dictionary tag whose value is not a dictionary") {
    pb::StoreRequest r = one_item(id("a").to_bytes());
    add_item(r, id("b").to_bytes(), k_subkey_dictionary, pack_str("not a dictionary"), k_now + 10, true);
    auto e = error_of(p, k_store_handle, r.SerializeAsString());
    CHECK(e.code == errc::malformed);
    CHECK_THAT(e.message, Catch::Contains("StoreRequest.values[1]"));
  }
  CHECK(p.storage().size(k_now) == 0);
  CHECK(p.cache().size(k_now) == 0);
}

TEST_CASE("a full unsplittable bucket hands back the node to ping", "[dht][protocol]") {
  ProtocolConfig config;
  config.bucket_size = 1;
  config.depth_modulo = 1;
  // Self in the lower half; the two senders in the upper half share one bucket of
  // depth 1, which may not split.
  NodeId::Bytes low{};
  NodeId::Bytes high_a{};
  high_a[0] = 0x80;
  NodeId::Bytes high_b = high_a;
  high_b[19] = 1;
  Protocol p(NodeId(low), test_peer("self-peer"), config);
  for (const auto& [bytes, peer] : {std::pair{high_a, test_peer("a-peer")}, std::pair{high_b, test_peer("b-peer")}}) {
    pb::PingRequest ping;
    ping.mutable_peer()->set_node_id(NodeId(bytes).to_bytes());
    REQUIRE(p.handle(k_now, k_ping_handle, peer, ping.SerializeAsString()).ok());
  }
  auto events = p.take_routing_events();
  CHECK(events.joined.size() == 2);
  REQUIRE(events.to_ping.size() == 1);
  CHECK(events.to_ping[0].id == NodeId(high_a));
  CHECK(events.to_ping[0].peer == test_peer("a-peer"));
  CHECK(p.routing_table().contains(NodeId(high_a)));
  CHECK_FALSE(p.routing_table().contains(NodeId(high_b)));
}

TEST_CASE("protocol config is validated", "[dht][protocol]") {
  CHECK(validate(ProtocolConfig{}).ok());
  ProtocolConfig zero_bucket;
  zero_bucket.bucket_size = 0;
  CHECK_THAT(validate(zero_bucket).error().message, Catch::Contains("bucket_size"));
  ProtocolConfig zero_modulo;
  zero_modulo.depth_modulo = 0;
  CHECK_THAT(validate(zero_modulo).error().message, Catch::Contains("depth_modulo"));
  ProtocolConfig zero_replicas;
  zero_replicas.num_replicas = 0;
  CHECK(validate(zero_replicas).error().code == errc::invalid_argument);
}
