#pragma once
/// Experts declared in DHT nodes of the in-memory network (tests/core/dht/node_network.hpp)
/// and looked up as a client does.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "core/moe/dht_layout.hpp"
#include "tests/core/dht/node_network.hpp"

namespace apiary::core::moe::testing {

using dht::testing::NodeNetwork;

/// A DHT of one node, started.
struct OneNodeDht {
  NodeNetwork net;
  dht::Node& node = net.add(dht::NodeId::of_str_key("the only node"));
  OneNodeDht() { REQUIRE(net.start(node, {}).status); }
};

/// Stores the declaration of `uids` by `peer` for an hour; returns per record whether it was stored.
inline std::vector<bool> declare(NodeNetwork& net, dht::Node& node, const std::vector<std::string>& uids,
                                 const std::string& peer) {
  auto entries = declaration_entries(uids, peer);
  REQUIRE(entries);
  auto result = net.store(node, store_items(*entries, net.dht_now() + 3600));
  REQUIRE(result.status);
  return result.stored;
}

/// What a get of the string key `key` found.
inline std::optional<dht::FoundValue> get(NodeNetwork& net, dht::Node& node, const std::string& key) {
  auto result = net.get(node, {dht::NodeId::of_str_key(key)});
  REQUIRE(result.found.size() == 1);
  return result.found[0];
}

}  // namespace apiary::core::moe::testing
