#pragma once
/// A key-value map whose entries carry absolute expiration times: the newest expiration
/// wins, expired entries vanish on access, and a bounded map evicts the entry that
/// expires first. The building block of DHT storage, caches and dictionary values.
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace apiary::core::dht {

/// DHT time: absolute seconds as a double, the unit of every expiration (hivemind's
/// `get_dht_time`). Core code is handed it; it never reads a clock.
using DhtTime = double;

/// A value and the absolute time (DhtTime seconds) after which it is gone.
template <class Value>
struct ValueWithExpiration {
  Value value;                   ///< the stored value
  DhtTime expiration_time = 0;   ///< absolute seconds; valid while expiration_time >= now

  friend bool operator==(const ValueWithExpiration& a, const ValueWithExpiration& b) {
    return a.value == b.value && a.expiration_time == b.expiration_time;
  }
  friend bool operator!=(const ValueWithExpiration& a, const ValueWithExpiration& b) {
    return !(a == b);
  }
};

/// Entries ordered by key; every access first drops entries expired at the `now` it is
/// given (expiration < now), then, if bounded, the earliest-expiring entries beyond
/// `maxsize`. While frozen nothing is dropped and expired writes are accepted.
template <class Key, class Value>
class TimedStorage {
 public:
  /// One entry as returned by items() and top().
  using Item = std::pair<Key, ValueWithExpiration<Value>>;

  /// An empty storage holding at most `maxsize` entries (unbounded if not given).
  explicit TimedStorage(std::optional<std::size_t> maxsize = std::nullopt)
      : maxsize_(maxsize) {}

  /// Stores `value` under `key` until `expiration` (absolute seconds). Rejected (false)
  /// when `expiration < now` (unless frozen) or when `key` already holds an entry that
  /// does not expire strictly earlier, or when `expiration` is NaN. A rejected write
  /// leaves the stored entry as it was. An accepted write to a full storage that expires
  /// before every other entry is evicted at once (and still reported as accepted).
  bool store(DhtTime now, const Key& key, Value value, DhtTime expiration) {
    if (std::isnan(expiration)) return false;
    if (expiration < now && !frozen_) return false;
    auto it = data_.find(key);
    if (it != data_.end()) {
      // Newest wins: only a strictly later expiration replaces the stored entry.
      if (expiration <= it->second.expiration_time) return false;
      by_expiration_.erase({it->second.expiration_time, key});
      it->second = ValueWithExpiration<Value>{std::move(value), expiration};
    } else {
      data_.emplace(key, ValueWithExpiration<Value>{std::move(value), expiration});
    }
    by_expiration_.emplace(expiration, key);
    purge(now);
    return true;
  }

  /// Moves the expiration of the entry under `key` to `expiration` if that is strictly
  /// later, keeping its value; false if absent, expired at `now` or not later.
  bool extend(DhtTime now, const Key& key, DhtTime expiration) {
    purge(now);
    auto it = data_.find(key);
    if (it == data_.end() || !(expiration > it->second.expiration_time)) return false;
    by_expiration_.erase({it->second.expiration_time, key});
    it->second.expiration_time = expiration;
    by_expiration_.emplace(expiration, key);
    return true;
  }

  /// The entry under `key` if it has not expired at `now`.
  [[nodiscard]] std::optional<ValueWithExpiration<Value>> get(DhtTime now, const Key& key) {
    purge(now);
    auto it = data_.find(key);
    if (it == data_.end()) return std::nullopt;
    return it->second;
  }

  /// The entry under `key` if it has not expired at `now`, where it lies (valid until the
  /// storage changes), or nullptr: get() without the copy.
  [[nodiscard]] ValueWithExpiration<Value>* find_entry(DhtTime now, const Key& key) {
    purge(now);
    auto it = data_.find(key);
    return it == data_.end() ? nullptr : &it->second;
  }

  /// Calls fn(key, entry) for every entry alive at `now`, in key order, where it lies
  /// (items() without the copies); fn must not change the storage.
  template <class Fn>
  void for_each(DhtTime now, Fn&& fn) {
    purge(now);
    for (auto& [key, entry] : data_) fn(key, entry);
  }

  /// The value under `key` for changing in place (its expiration stays), or nullptr.
  [[nodiscard]] Value* get_mutable(DhtTime now, const Key& key) {
    purge(now);
    auto it = data_.find(key);
    return it == data_.end() ? nullptr : &it->second.value;
  }

  /// True when `key` holds an entry that has not expired at `now`.
  [[nodiscard]] bool contains(DhtTime now, const Key& key) {
    purge(now);
    return data_.count(key) != 0;
  }

  /// Entries alive at `now`.
  [[nodiscard]] std::size_t size(DhtTime now) {
    purge(now);
    return data_.size();
  }

  /// Entries alive at `now`, in key order.
  [[nodiscard]] std::vector<Item> items(DhtTime now) {
    purge(now);
    return std::vector<Item>(data_.begin(), data_.end());
  }

  /// The alive entry that expires first (ties: smallest key), if any.
  [[nodiscard]] std::optional<Item> top(DhtTime now) {
    purge(now);
    if (by_expiration_.empty()) return std::nullopt;
    const Key& key = by_expiration_.begin()->second;
    return Item{key, data_.at(key)};
  }

  /// Removes `key`; false if it was not stored.
  bool erase(const Key& key) {
    auto it = data_.find(key);
    if (it == data_.end()) return false;
    by_expiration_.erase({it->second.expiration_time, key});
    data_.erase(it);
    return true;
  }

  /// Stops dropping entries (expired or over the bound) until unfreeze(); used while a
  /// caller merges values and must not see them vanish half-way.
  void freeze() { frozen_ = true; }
  /// Resumes dropping; the next access purges everything due.
  void unfreeze() { frozen_ = false; }
  /// True while frozen.
  [[nodiscard]] bool frozen() const { return frozen_; }

  /// The bound on entries, if any.
  [[nodiscard]] std::optional<std::size_t> maxsize() const { return maxsize_; }

 private:
  /// Drops entries expired at `now`, then the earliest-expiring ones beyond the bound.
  void purge(DhtTime now) {
    if (frozen_) return;
    while (!by_expiration_.empty()) {
      const auto& [expiration, key] = *by_expiration_.begin();
      const bool over_bound = maxsize_ && data_.size() > *maxsize_;
      if (expiration >= now && !over_bound) break;
      data_.erase(key);
      by_expiration_.erase(by_expiration_.begin());
    }
  }

  std::map<Key, ValueWithExpiration<Value>> data_;
  std::set<std::pair<DhtTime, Key>> by_expiration_;
  std::optional<std::size_t> maxsize_;
  bool frozen_ = false;
};

}  // namespace apiary::core::dht
