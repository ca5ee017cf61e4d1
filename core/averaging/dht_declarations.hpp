#pragma once
/// How matchmaking's DHT operations look in the Kademlia DHT (reference §3.2), for every
/// shell that hosts an AveragerRole beside a core::dht::Node: a declaration is the
/// record key = group key (a string key), subkey = the peer's id (msgpack bin), value =
/// msgpack true (looking) or false (left), expiring at the declared time.
#include <optional>
#include <vector>

#include "core/averaging/matchmaking_types.hpp"
#include "core/dht/node.hpp"

namespace apiary::core::averaging {

/// The DHT record of a declaration.
[[nodiscard]] dht::StoreItem declaration_item(const DhtDeclare& declare);

/// The key a DhtGetAveragers reads.
[[nodiscard]] dht::NodeId averagers_key(const DhtGetAveragers& get);

/// The peers a group key's value declares looking and unexpired at `dht_now` (seconds),
/// from a latest get (nullopt or a non-dictionary value: none). Subkeys that are not
/// msgpack bin or str are skipped.
[[nodiscard]] std::vector<Averager> declared_averagers(const std::optional<dht::FoundValue>& found,
                                                       double dht_now);

}  // namespace apiary::core::averaging
