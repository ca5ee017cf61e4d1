#include "core/moe/dht_layout.hpp"

#include <utility>
#include <variant>

#include <msgpack.hpp>

#include "core/dht/msgpack_value.hpp"

namespace apiary::core::moe {
namespace {

/// msgpack of an int (the smallest form, as Python's msgpack writes it).
std::string pack_int(std::int64_t value) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer>(buffer).pack(value);
  return std::string(buffer.data(), buffer.size());
}

/// The text of a msgpack str, nullopt for anything else.
std::optional<std::string> str_of(const msgpack::object& o) {
  if (o.type != msgpack::type::STR) return std::nullopt;
  return std::string(o.via.str.ptr, o.via.str.size);
}

/// An int subkey of a dictionary entry; nullopt for any other subkey.
std::optional<std::int64_t> coordinate_of(const std::string& packed_subkey) {
  auto handle = dht::unpack_one(packed_subkey);
  if (!handle) return std::nullopt;
  const msgpack::object& o = handle->get();
  if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (o.via.u64 > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<std::int64_t>(o.via.u64);
  }
  if (o.type == msgpack::type::NEGATIVE_INTEGER) return o.via.i64;
  return std::nullopt;
}

/// The (uid, peer) pair of a prefix record; nullopt unless a 2-tuple of a valid uid and a str.
std::optional<ExpertInfo> pair_of(const std::string& packed_value) {
  auto elements = dht::unpack_tuple(packed_value);
  if (!elements || elements->size() != 2) return std::nullopt;
  ExpertInfo expert;
  for (std::size_t i = 0; i < 2; ++i) {
    auto handle = dht::unpack_one((*elements)[i]);
    if (!handle) return std::nullopt;
    auto text = str_of(handle->get());
    if (!text) return std::nullopt;
    (i == 0 ? expert.uid : expert.peer_id) = std::move(*text);
  }
  if (!is_valid_uid(expert.uid)) return std::nullopt;
  return expert;
}

}  // namespace

Result<std::vector<ExpertEntry>> declaration_entries(const std::vector<std::string>& uids, const std::string& peer_id) {
  if (peer_id.empty()) {
    return make_error(errc::invalid_argument, "declaring experts: the server's peer id is empty; pass its base58 PeerID");
  }
  std::vector<ExpertEntry> entries;
  std::map<std::pair<std::string, std::optional<std::int64_t>>, std::size_t> index;  // (key, subkey) -> place
  auto put = [&](std::string key, std::optional<std::int64_t> subkey, const std::string& uid) {
    auto [at, inserted] = index.emplace(std::make_pair(key, subkey), entries.size());
    if (inserted) {
      entries.push_back(ExpertEntry{std::move(key), subkey, ExpertInfo{uid, peer_id}});
    } else {
      entries[at->second].expert.uid = uid;  // the last uid to write the record names it
    }
  };
  for (const std::string& uid : uids) {
    auto parts = parse_uid(uid);
    if (!parts) {
      return make_error(errc::invalid_argument, "declaring experts: {} (nothing was declared)", parts.error().message);
    }
    put(uid, std::nullopt, uid);
    const std::vector<std::int64_t>& coords = parts->coordinates;
    if (coords.size() == 1) {
      // The flat trick: "expert.5" -> ("expert.5.", -1), so a 1-D search finds it as a prefix.
      put(uid + k_uid_delimiter, k_flat_expert, uid);
      continue;
    }
    // Each prefix of j coordinates (j = n-1 .. 1) names the next coordinate as its subkey.
    for (std::size_t j = coords.size() - 1; j >= 1; --j) {
      std::string prefix = parts->root + k_uid_delimiter;
      for (std::size_t i = 0; i < j; ++i) prefix += std::to_string(coords[i]) + k_uid_delimiter;
      put(std::move(prefix), coords[j], uid);
    }
  }
  return entries;
}

dht::StoreItem store_item(const ExpertEntry& entry, double expiration) {
  if (!entry.subkey) {
    return dht::StoreItem{dht::NodeId::of_str_key(entry.key), dht::k_subkey_regular,
                          dht::pack_str(entry.expert.peer_id), expiration};
  }
  return dht::StoreItem{dht::NodeId::of_str_key(entry.key), pack_int(*entry.subkey),
                        dht::pack_tuple({dht::pack_str(entry.expert.uid), dht::pack_str(entry.expert.peer_id)}),
                        expiration};
}

std::vector<dht::StoreItem> store_items(const std::vector<ExpertEntry>& entries, double expiration) {
  std::vector<dht::StoreItem> items;
  items.reserve(entries.size());
  for (const ExpertEntry& e : entries) items.push_back(store_item(e, expiration));
  return items;
}

dht::StoreItem negative_cache_item(const std::string& prefix, double expiration) {
  return dht::StoreItem{dht::NodeId::of_str_key(prefix), pack_int(k_flat_expert), std::string("\xc0", 1),
                        expiration};
}

std::optional<ExpertInfo> expert_of(const std::string& uid, const std::optional<dht::FoundValue>& found) {
  if (!found) return std::nullopt;
  const auto* packed = std::get_if<std::string>(&found->value);
  if (packed == nullptr) return std::nullopt;
  auto handle = dht::unpack_one(*packed);
  if (!handle) return std::nullopt;
  auto peer = str_of(handle->get());
  if (!peer) return std::nullopt;
  return ExpertInfo{uid, std::move(*peer)};
}

std::optional<Successors> successors_of(const std::optional<dht::FoundValue>& found) {
  if (!found) return std::nullopt;
  Successors successors;
  const auto* dictionary = std::get_if<dht::FoundValue::Dictionary>(&found->value);
  if (dictionary == nullptr) return successors;
  for (const auto& [subkey, entry] : *dictionary) {
    const auto coordinate = coordinate_of(subkey);
    if (!coordinate) continue;
    auto expert = pair_of(entry.value);
    if (expert) successors.emplace(*coordinate, std::move(*expert));
  }
  return successors;
}

}  // namespace apiary::core::moe
