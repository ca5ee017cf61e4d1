#pragma once
/// What a DHT node keeps: under each key id either a regular value (bytes) or a
/// dictionary value (subkey -> bytes, each with its own expiration). Precedence between
/// the two follows hivemind's DHTLocalStorage (reference §2.4).
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/dht/node_id.hpp"
#include "core/dht/timed_storage.hpp"

namespace apiary::core::dht {

/// A dictionary value: subkeys (their msgpack encoding, as carried in
/// StoreRequest.subkeys) mapped to value bytes, each with its own expiration.
class DictionaryValue {
 public:
  /// One subkey entry.
  using Item = std::pair<std::string, ValueWithExpiration<std::string>>;

  /// An empty, unbounded dictionary; latest_expiration_time() is -infinity.
  DictionaryValue() = default;

  /// Stores `value` under `subkey` until `expiration` (absolute seconds), newest wins
  /// per subkey (see TimedStorage::store). An accepted write raises
  /// latest_expiration_time() to `expiration` if later.
  bool store(DhtTime now, const std::string& subkey, std::string value, DhtTime expiration);

  /// The entry under `subkey` if alive at `now`.
  [[nodiscard]] std::optional<ValueWithExpiration<std::string>> get(DhtTime now,
                                                                   const std::string& subkey);
  /// Entries alive at `now`, ordered by subkey bytes.
  [[nodiscard]] std::vector<Item> items(DhtTime now) { return entries_.items(now); }
  /// Entries alive at `now`.
  [[nodiscard]] std::size_t size(DhtTime now) { return entries_.size(now); }

  /// The latest expiration ever accepted (absolute seconds); it never decreases, even
  /// when that entry expires or is replaced. -infinity while empty.
  [[nodiscard]] DhtTime latest_expiration_time() const { return latest_; }
  /// Raises latest_expiration_time() to `t` if later (used when decoding a value).
  void raise_latest_expiration_time(DhtTime t);

  /// Keeps expired entries (and accepts expired writes) until unfreeze(); used while
  /// decoding or merging a value that must not lose entries half-way.
  void freeze() { entries_.freeze(); }
  /// Resumes dropping expired entries.
  void unfreeze() { entries_.unfreeze(); }

  /// The entry bound written on the wire: always +infinity (unbounded).
  [[nodiscard]] static double maxsize() { return std::numeric_limits<double>::infinity(); }

 private:
  TimedStorage<std::string, std::string> entries_;
  DhtTime latest_ = -std::numeric_limits<DhtTime>::infinity();
};

/// What a key holds: regular value bytes, or a dictionary.
using StoredValue = std::variant<std::string, DictionaryValue>;

/// A node's local storage (or its cache, when bounded): key ids mapped to regular or
/// dictionary values under an outer expiration.
class LocalStorage {
 public:
  /// Empty storage of at most `maxsize` keys (unbounded if not given); past the bound
  /// the earliest-expiring key is evicted.
  explicit LocalStorage(std::optional<std::size_t> maxsize = std::nullopt)
      : data_(maxsize) {}

  /// Stores a regular value: newest wins on the outer expiration, whether the key held a
  /// regular value or a dictionary. Rejected when `expiration < now`.
  bool store(DhtTime now, const NodeId& key, std::string value, DhtTime expiration);

  /// Stores one subkey of a dictionary value under `key`:
  /// 1. key absent, or holding a regular value expiring strictly earlier: replaced by a
  ///    new dictionary with just this subkey (outer expiration = `expiration`);
  /// 2. key holding a dictionary: if `expiration` is later than the dictionary's
  ///    latest_expiration_time the outer expiration is raised to it; then the subkey is
  ///    stored in the dictionary, newest wins per subkey (that decides the result);
  /// 3. key holding a regular value expiring at or after `expiration`: rejected.
  /// Any write with `expiration < now` is rejected, frozen or not.
  bool store_subkey(DhtTime now, const NodeId& key, const std::string& subkey,
                    std::string value, DhtTime expiration);

  /// Stores every entry of `dictionary` alive at `now` through store_subkey (how a
  /// StoreRequest with the dictionary subkey tag is applied); true iff all were accepted
  /// (and the dictionary had at least one).
  bool store_dictionary(DhtTime now, const NodeId& key, DictionaryValue dictionary);

  /// The value under `key` with its outer expiration, if alive at `now`.
  [[nodiscard]] std::optional<ValueWithExpiration<StoredValue>> get(DhtTime now,
                                                                    const NodeId& key);
  /// get() where the value lies (valid until the storage changes), or nullptr.
  [[nodiscard]] ValueWithExpiration<StoredValue>* find(DhtTime now, const NodeId& key) {
    return data_.find_entry(now, key);
  }
  /// Calls fn(key, entry) for every alive entry in key order, where it lies (items()
  /// without the copies); fn must not change the storage.
  template <class Fn>
  void for_each(DhtTime now, Fn&& fn) {
    data_.for_each(now, std::forward<Fn>(fn));
  }
  /// True when `key` holds a value alive at `now`.
  [[nodiscard]] bool contains(DhtTime now, const NodeId& key) { return data_.contains(now, key); }
  /// Keys alive at `now`.
  [[nodiscard]] std::size_t size(DhtTime now) { return data_.size(now); }
  /// Every alive entry at `now`, ordered by key id.
  [[nodiscard]] std::vector<std::pair<NodeId, ValueWithExpiration<StoredValue>>> items(
      DhtTime now) {
    return data_.items(now);
  }
  /// The alive key that expires first, if any.
  [[nodiscard]] std::optional<std::pair<NodeId, ValueWithExpiration<StoredValue>>> top(
      DhtTime now) {
    return data_.top(now);
  }
  /// Removes `key`; false if it was not stored.
  bool erase(const NodeId& key) { return data_.erase(key); }

  /// Keeps expired or over-bound keys until unfreeze().
  void freeze() { data_.freeze(); }
  /// Resumes dropping.
  void unfreeze() { data_.unfreeze(); }

 private:
  TimedStorage<NodeId, StoredValue> data_;
};

}  // namespace apiary::core::dht
