#include "core/dht/protocol.hpp"

#include <utility>
#include <variant>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/rules.hpp"
#include "core/time.hpp"

namespace apiary::core::dht {

Status validate(const ProtocolConfig& config) {
  return require_all({
      {config.bucket_size > 0, "DHT bucket_size must be >= 1, got 0; set ProtocolConfig::bucket_size"},
      {config.depth_modulo > 0, "DHT depth_modulo must be >= 1, got 0; set ProtocolConfig::depth_modulo"},
      {config.num_replicas > 0, "DHT num_replicas must be >= 1, got 0; set ProtocolConfig::num_replicas"},
  });
}

namespace {

/// The routing tuning a protocol config implies.
RoutingConfig routing_config(const ProtocolConfig& config) {
  RoutingConfig out;
  out.bucket_size = config.bucket_size;
  out.depth_modulo = config.depth_modulo;
  return out;
}

/// The error of `bytes` that do not parse as a `type` sent to `handle`.
Error unparsed(const std::string& bytes, const char* handle, const char* type) {
  return make_error(errc::malformed,
                    "{}: expected a serialized {}, got {} bytes that do not parse; send a "
                    "{} encoded by protobuf",
                    handle, type, bytes.size(), type);
}

/// Parses `bytes` as a `Message`, or a malformed error naming it and the handle.
template <class Message>
Result<Message> parse(const std::string& bytes, const char* handle, const char* type) {
  Message message;
  if (!message.ParseFromString(bytes)) return unparsed(bytes, handle, type);
  return message;
}

/// Serializes a response, or passes its error on.
template <class Message>
Result<std::string> serialize(Result<Message> response) {
  if (!response) return response.error();
  return response->SerializeAsString();
}

/// The id of key `index` of a request, or a malformed error naming `message_type`.
Result<NodeId> key_id(const std::string& bytes, int index, const char* message_type) {
  if (bytes.size() != k_id_bytes) {
    return make_error(errc::malformed,
                      "{}.keys[{}]: expected a {}-byte DHT id, got {} bytes; send keys as "
                      "20-byte big-endian ids (SHA1 of the msgpack'd key)",
                      message_type, index, k_id_bytes, bytes.size());
  }
  return NodeId::from_bytes(bytes);
}

/// One StoreRequest item, checked and decoded before anything is stored.
struct StoreItem {
  /// What the item stores.
  enum class Kind { regular, subkey, dictionary };
  NodeId key;
  Kind kind = Kind::regular;
  std::string subkey;          ///< the msgpack'd subkey, for Kind::subkey
  DictionaryValue dictionary;  ///< the entries to merge, for Kind::dictionary
};

/// Checks and decodes item `i` of `request`.
Result<StoreItem> decode_store_item(const pb::StoreRequest& request, int i) {
  auto key = key_id(request.keys(i), i, "StoreRequest");
  if (!key) return key.error();
  const std::string& tag = request.subkeys(i);
  StoreItem item;
  item.key = *key;
  if (tag == k_subkey_regular) return item;
  if (tag == k_subkey_dictionary) {
    auto dictionary = unpack_dictionary(request.values(i));
    if (!dictionary) {
      return make_error(errc::malformed,
                        "StoreRequest.values[{}]: expected a msgpack dictionary value (ext "
                        "0x50) because subkeys[{}] is empty, got one that does not decode "
                        "({}); send a packed DictionaryDHTValue or a non-empty subkey",
                        i, i, dictionary.error().message);
    }
    item.kind = StoreItem::Kind::dictionary;
    item.dictionary = std::move(*dictionary);
    return item;
  }
  if (auto packed = check_packed(tag); !packed) {
    return make_error(errc::malformed,
                      "StoreRequest.subkeys[{}]: expected one msgpack object (0xc0 for a "
                      "regular value, empty for a whole dictionary), got {} bytes that are "
                      "not ({}); send the msgpack'd subkey",
                      i, tag.size(), packed.error().message);
  }
  item.kind = StoreItem::Kind::subkey;
  item.subkey = tag;
  return item;
}

}  // namespace

Protocol::Protocol(NodeId self, PeerId self_peer_id, ProtocolConfig config)
    : self_(self),
      self_peer_id_(std::move(self_peer_id)),
      config_(config),
      routing_table_(self, routing_config(config)),
      storage_(std::nullopt),
      cache_(config.cache_size) {
  if (!config_.client_mode) node_info_.set_node_id(self_.to_bytes());
}

Result<std::string> Protocol::handle(double now, const std::string& handle,
                                     const PeerId& from_peer, const std::string& request) {
  if (handle == k_ping_handle) {
    auto parsed = parse<pb::PingRequest>(request, k_ping_handle, "PingRequest");
    if (!parsed) return parsed.error();
    return serialize(ping(now, from_peer, *parsed));
  }
  if (handle == k_store_handle) {
    auto parsed = parse<pb::StoreRequest>(request, k_store_handle, "StoreRequest");
    if (!parsed) return parsed.error();
    return serialize(store(now, from_peer, *parsed));
  }
  if (handle == k_find_handle) {
    // The busiest RPC: its messages are reused by every find this thread serves, so their
    // strings keep their capacity and an answer allocates nothing. Nothing called from
    // here comes back to handle(), so they are never in use twice.
    static thread_local pb::FindRequest parsed;
    static thread_local pb::FindResponse response;
    if (!parsed.ParseFromString(request)) return unparsed(request, k_find_handle, "FindRequest");
    response.Clear();
    if (auto st = find_into(now, from_peer, parsed, response); !st) return st.error();
    return response.SerializeAsString();
  }
  return make_error(errc::not_found,
                    "DHTProtocol: expected one of the handles {}, {}, {}, got \"{}\"; call "
                    "one of those",
                    k_ping_handle, k_store_handle, k_find_handle, handle);
}

Result<pb::PingResponse> Protocol::ping(double now, const PeerId& from_peer,
                                        const pb::PingRequest& request) {
  auto sender = sender_id(request.peer(), "PingRequest");
  if (!sender) return sender.error();
  pb::PingResponse response;
  *response.mutable_peer() = node_info_;
  response.set_dht_time(now);
  // Upstream calls a validating sender back before answering; that is the caller's job.
  response.set_available(false);
  register_sender(now, *sender, from_peer);
  return response;
}

Result<pb::StoreResponse> Protocol::store(double now, const PeerId& from_peer,
                                          const pb::StoreRequest& request) {
  auto sender = sender_id(request.peer(), "StoreRequest");
  if (!sender) return sender.error();
  const int n = request.keys_size();
  if (request.subkeys_size() != n || request.values_size() != n ||
      request.expiration_time_size() != n || request.in_cache_size() != n) {
    return make_error(errc::malformed,
                      "StoreRequest: expected aligned lists, got {} keys, {} subkeys, {} "
                      "values, {} expiration_time and {} in_cache; send one of each per item",
                      n, request.subkeys_size(), request.values_size(),
                      request.expiration_time_size(), request.in_cache_size());
  }
  // Decode every item first, so a malformed one leaves the storage as it was.
  std::vector<StoreItem> items;
  items.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto item = decode_store_item(request, i);
    if (!item) return item.error();
    items.push_back(std::move(*item));
  }
  pb::StoreResponse response;
  for (int i = 0; i < n; ++i) {
    StoreItem& item = items[static_cast<std::size_t>(i)];
    LocalStorage& target = request.in_cache(i) ? cache_ : storage_;
    const DhtTime expiration = request.expiration_time(i);
    bool ok = false;
    switch (item.kind) {
      case StoreItem::Kind::regular:
        ok = target.store(now, item.key, request.values(i), expiration);
        break;
      case StoreItem::Kind::subkey:
        ok = target.store_subkey(now, item.key, item.subkey, request.values(i), expiration);
        break;
      case StoreItem::Kind::dictionary:
        // Every entry merged on its own expiration; the item's expiration_time is unused.
        ok = target.store_dictionary(now, item.key, std::move(item.dictionary));
        break;
    }
    response.add_store_ok(ok);
  }
  *response.mutable_peer() = node_info_;
  register_sender(now, *sender, from_peer);
  return response;
}

Result<pb::FindResponse> Protocol::find(double now, const PeerId& from_peer,
                                        const pb::FindRequest& request) {
  pb::FindResponse response;
  if (auto st = find_into(now, from_peer, request, response); !st) return st.error();
  return response;
}

Status Protocol::find_into(double now, const PeerId& from_peer, const pb::FindRequest& request,
                           pb::FindResponse& response) {
  auto sender = sender_id(request.peer(), "FindRequest");
  if (!sender) return sender.error();
  std::vector<NodeId> keys;
  keys.reserve(static_cast<std::size_t>(request.keys_size()));
  for (int i = 0; i < request.keys_size(); ++i) {
    auto key = key_id(request.keys(i), i, "FindRequest");
    if (!key) return key.error();
    keys.push_back(*key);
  }
  // The requester is known by the id it sent, else by the peer it called from.
  std::optional<NodeId> requester = *sender;
  if (!requester && !from_peer.empty()) requester = routing_table_.node_of(from_peer);
  for (const NodeId& key : keys) find_one(now, key, requester, *response.add_results());
  *response.mutable_peer() = node_info_;
  register_sender(now, *sender, from_peer);
  return ok_status();
}

void Protocol::find_one(double now, const NodeId& key, const std::optional<NodeId>& requester,
                        pb::FindResult& result) {
  // Storage and cache: the later expiration wins (storage on a tie). Read where they lie:
  // a dictionary of many subkeys is packed, not copied first.
  auto* item = storage_.find(now, key);
  auto* cached = cache_.find(now, key);
  if (cached && (!item || cached->expiration_time > item->expiration_time)) item = cached;
  if (!item) {
    result.set_type(pb::NOT_FOUND);
  } else if (auto* regular = std::get_if<std::string>(&item->value)) {
    result.set_type(pb::FOUND_REGULAR);
    result.set_value(*regular);
    result.set_expiration_time(item->expiration_time);
  } else {
    auto& dictionary = std::get<DictionaryValue>(item->value);
    result.set_type(pb::FOUND_DICTIONARY);
    result.set_value(pack_dictionary(now, dictionary));
    result.set_expiration_time(dictionary.latest_expiration_time());
  }
  for (const Contact* c : routing_table_.nearest_refs(key, config_.bucket_size, requester)) {
    result.add_nearest_node_ids(c->id.bytes().data(), c->id.bytes().size());
    result.add_nearest_peer_ids(c->peer.multiaddr());
  }
}

RoutingEvents Protocol::take_routing_events() { return std::exchange(events_, RoutingEvents{}); }

Result<std::optional<NodeId>> Protocol::sender_id(const pb::NodeInfo& peer,
                                                  const char* message_type) {
  if (peer.node_id().empty()) return std::optional<NodeId>{};
  if (peer.node_id().size() != k_id_bytes) {
    return make_error(errc::malformed,
                      "{}.peer.node_id: expected a {}-byte DHT id or nothing (client mode), "
                      "got {} bytes; send the sender's 20-byte big-endian id",
                      message_type, k_id_bytes, peer.node_id().size());
  }
  auto id = NodeId::from_bytes(peer.node_id());
  if (!id) return id.error();
  return std::optional<NodeId>{*id};
}

void Protocol::register_sender(double now, const std::optional<NodeId>& sender,
                               const PeerId& from_peer) {
  if (!sender || from_peer.empty() || *sender == self_) return;
  const Bucket& bucket = routing_table_.buckets()[routing_table_.bucket_index(*sender)];
  bool known = routing_table_.contains(*sender);
  for (const Contact& c : bucket.replacements()) known = known || c.id == *sender;
  if (!known) events_.joined.push_back(Contact{*sender, from_peer});
  auto candidate = routing_table_.add_or_update(from_seconds(now), *sender, from_peer);
  if (candidate) events_.to_ping.push_back(*candidate);
}

}  // namespace apiary::core::dht
