#pragma once
/// What the core::dht::Protocol tests share: a fixed clock, node ids by name, and the
/// items of store requests.
#include <string>

#include "core/dht/node_id.hpp"
#include "core/dht/protocol.hpp"
#include "dht.pb.h"

namespace apiary::testing::dht_protocol {

/// The DHT time every request is served at unless a test says otherwise.
inline constexpr core::dht::DhtTime k_now = 1700000000.0;

/// The node id of `name` (NodeId::of_str_key).
inline core::dht::NodeId id(const std::string& name) { return core::dht::NodeId::of_str_key(name); }

/// Appends one item to each of the five lists of `r`.
inline void add_item(pb::StoreRequest& r, const std::string& key_bytes, const std::string& subkey,
                     const std::string& value, core::dht::DhtTime expiration, bool in_cache) {
  r.add_keys(key_bytes);
  r.add_subkeys(subkey);
  r.add_values(value);
  r.add_expiration_time(expiration);
  r.add_in_cache(in_cache);
}

}  // namespace apiary::testing::dht_protocol
