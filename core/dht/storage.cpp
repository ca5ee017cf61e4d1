#include "core/dht/storage.hpp"

#include <utility>

namespace apiary::core::dht {

bool DictionaryValue::store(DhtTime now, const std::string& subkey, std::string value,
                            DhtTime expiration) {
  if (!entries_.store(now, subkey, std::move(value), expiration)) return false;
  raise_latest_expiration_time(expiration);
  return true;
}

std::optional<ValueWithExpiration<std::string>> DictionaryValue::get(
    DhtTime now, const std::string& subkey) {
  return entries_.get(now, subkey);
}

void DictionaryValue::raise_latest_expiration_time(DhtTime t) {
  if (t > latest_) latest_ = t;
}

bool LocalStorage::store(DhtTime now, const NodeId& key, std::string value,
                         DhtTime expiration) {
  return data_.store(now, key, StoredValue(std::move(value)), expiration);
}

bool LocalStorage::store_subkey(DhtTime now, const NodeId& key, const std::string& subkey,
                                std::string value, DhtTime expiration) {
  if (!(expiration >= now)) return false;  // expired (or NaN)
  StoredValue* previous = data_.get_mutable(now, key);
  // (2) A dictionary: keep its outer expiration at least the newest subkey's, then let
  // the subkey's own newest-wins rule decide.
  if (previous != nullptr && std::holds_alternative<DictionaryValue>(*previous)) {
    auto& dictionary = std::get<DictionaryValue>(*previous);
    if (expiration > dictionary.latest_expiration_time()) {
      data_.extend(now, key, expiration);
    }
    return dictionary.store(now, subkey, std::move(value), expiration);
  }
  // (1) Absent, or a regular value: a new dictionary replaces it only if strictly newer;
  // (3) otherwise the regular value stays.
  DictionaryValue fresh;
  if (!fresh.store(now, subkey, std::move(value), expiration)) return false;
  return data_.store(now, key, StoredValue(std::move(fresh)), expiration);
}

bool LocalStorage::store_dictionary(DhtTime now, const NodeId& key, DictionaryValue dictionary) {
  auto entries = dictionary.items(now);
  if (entries.empty()) return false;
  bool all = true;
  for (auto& [subkey, entry] : entries) {
    all = store_subkey(now, key, subkey, std::move(entry.value), entry.expiration_time) && all;
  }
  return all;
}

std::optional<ValueWithExpiration<StoredValue>> LocalStorage::get(DhtTime now,
                                                                  const NodeId& key) {
  return data_.get(now, key);
}

}  // namespace apiary::core::dht
