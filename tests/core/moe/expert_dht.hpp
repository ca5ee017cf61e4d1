#pragma once
/// Experts declared in DHT nodes of the in-memory network (tests/core/dht/node_network.hpp)
/// and looked up as a client does, for the layout and beam-search tests.
#include <catch2/catch.hpp>

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "core/moe/beam_search.hpp"
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

/// Runs `search` to its end, answering its lookups in the order asked from `node`;
/// every prefix looked up is appended to `looked_up` when given.
inline void run_search(NodeNetwork& net, dht::Node& node, BeamSearch& search, NegativeCache& cache,
                       std::vector<std::string>* looked_up = nullptr) {
  std::deque<std::string> queue;
  auto push = [&](const SearchStep& step) {
    for (const std::string& p : step.lookups) {
      queue.push_back(p);
      if (looked_up != nullptr) looked_up->push_back(p);
    }
  };
  push(search.begin(net.now(), cache));
  while (!queue.empty()) {
    const std::string prefix = queue.front();
    queue.pop_front();
    push(search.on_found(net.now(), prefix, successors_of(get(net, node, prefix)), cache));
  }
  REQUIRE(search.done());
}

}  // namespace apiary::core::moe::testing
