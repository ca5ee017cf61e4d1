// core::dht::TimedStorage, DictionaryValue and LocalStorage: newest-wins expirations,
// expiry on access, bounded eviction, dictionary subkeys and their precedence over
// regular values. Time is passed in, so nothing here sleeps.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <variant>

#include "core/dht/storage.hpp"

namespace {

using namespace apiary::core::dht;

constexpr DhtTime k_now = 1700000000.0;

NodeId key(const char* name) { return NodeId::of_str_key(name); }

/// The regular value under `k`, or "" if absent or a dictionary.
std::string regular(LocalStorage& s, DhtTime now, const NodeId& k) {
  auto v = s.get(now, k);
  if (!v || !std::holds_alternative<std::string>(v->value)) return "";
  return std::get<std::string>(v->value);
}

/// The dictionary under `k`; fails the test if there is none.
DictionaryValue dictionary(LocalStorage& s, DhtTime now, const NodeId& k) {
  auto v = s.get(now, k);
  REQUIRE(v.has_value());
  REQUIRE(std::holds_alternative<DictionaryValue>(v->value));
  return std::get<DictionaryValue>(v->value);
}

}  // namespace

TEST_CASE("a stored value is returned with its expiration", "[dht][storage]") {
  LocalStorage s;
  CHECK(s.store(k_now, key("key"), "val", k_now + 0.5));
  auto v = s.get(k_now, key("key"));
  REQUIRE(v.has_value());
  CHECK(std::get<std::string>(v->value) == "val");
  CHECK(v->expiration_time == k_now + 0.5);
  CHECK_FALSE(s.get(k_now, key("other")).has_value());
  CHECK(s.size(k_now) == 1);
}

TEST_CASE("expired values vanish on access, expired writes are rejected", "[dht][storage]") {
  LocalStorage s;
  CHECK(s.store(k_now, key("key"), "val", k_now + 0.1));
  CHECK(regular(s, k_now + 0.1, key("key")) == "val");  // alive up to and at expiration
  CHECK_FALSE(s.get(k_now + 0.5, key("key")).has_value());
  CHECK(s.size(k_now + 0.5) == 0);
  CHECK_FALSE(s.store(k_now, key("late"), "val", k_now - 1));
  CHECK_FALSE(s.store(k_now, key("nan"), "val", std::nan("")));
  CHECK(s.size(k_now) == 0);
}

TEST_CASE("only a strictly later expiration replaces a value", "[dht][storage]") {
  LocalStorage s;
  CHECK(s.store(k_now, key("key"), "val1", k_now + 1));
  CHECK_FALSE(s.store(k_now, key("key"), "same-time", k_now + 1));
  CHECK(regular(s, k_now, key("key")) == "val1");
  CHECK(s.store(k_now, key("key"), "val2", k_now + 200));
  // Survives the first expiration.
  CHECK(regular(s, k_now + 5, key("key")) == "val2");
}

TEST_CASE("a rejected older write does not shorten the newer value's life",
          "[dht][storage]") {
  LocalStorage s;
  CHECK(s.store(k_now, key("key"), "v1", k_now + 100));
  CHECK_FALSE(s.store(k_now, key("key"), "v2", k_now + 0.2));
  auto later = s.get(k_now + 1, key("key"));
  REQUIRE(later.has_value());
  CHECK(std::get<std::string>(later->value) == "v1");
  CHECK(later->expiration_time == k_now + 100);
  REQUIRE(s.top(k_now + 1).has_value());
  CHECK(s.top(k_now + 1)->second.expiration_time == k_now + 100);
}

TEST_CASE("a bounded storage evicts the earliest-expiring key", "[dht][storage]") {
  LocalStorage s(1);
  CHECK(s.store(k_now, key("key1"), "val1", k_now + 1));
  CHECK(s.store(k_now, key("key2"), "val2", k_now + 200));
  CHECK(regular(s, k_now, key("key2")) == "val2");
  CHECK_FALSE(s.get(k_now, key("key1")).has_value());

  LocalStorage two(2);
  CHECK(two.store(k_now, key("a"), "a", k_now + 5));
  CHECK(two.store(k_now, key("b"), "b", k_now + 3));
  CHECK(two.store(k_now, key("c"), "c", k_now + 9));
  CHECK(two.size(k_now) == 2);
  CHECK_FALSE(two.contains(k_now, key("b")));
}

TEST_CASE("top is the earliest-expiring entry and follows re-stores and erases",
          "[dht][storage]") {
  TimedStorage<std::string, std::string> s(3);
  CHECK_FALSE(s.top(k_now).has_value());
  CHECK(s.store(k_now, "key1", "val1", k_now + 1));
  CHECK(s.store(k_now, "key2", "val2", k_now + 2));
  CHECK(s.store(k_now, "key3", "val3", k_now + 4));
  CHECK(s.top(k_now)->first == "key1");
  CHECK(s.store(k_now, "key1", "val1", k_now + 3));  // moves behind key2
  CHECK(s.top(k_now)->first == "key2");
  CHECK(s.erase("key2"));
  CHECK_FALSE(s.erase("key2"));
  CHECK(s.top(k_now)->first == "key1");
  CHECK(s.store(k_now, "key2", "val2", k_now + 5));
  CHECK(s.store(k_now, "key4", "val4", k_now + 6));  // over the bound: key1 goes
  CHECK(s.size(k_now) == 3);
  CHECK_FALSE(s.contains(k_now, "key1"));
  CHECK(s.top(k_now)->first == "key3");
  CHECK(s.top(k_now)->second.value == "val3");
}

TEST_CASE("a frozen storage keeps expired and over-bound entries until unfrozen",
          "[dht][storage]") {
  TimedStorage<std::string, std::string> s(2);
  CHECK(s.store(k_now, "a", "1", k_now + 1));
  s.freeze();
  CHECK(s.store(k_now, "expired", "x", k_now - 10));  // accepted while frozen
  CHECK(s.store(k_now, "b", "2", k_now + 2));
  CHECK(s.size(k_now + 1.5) == 3);
  CHECK(s.get(k_now + 1.5, "a").has_value());
  s.unfreeze();
  CHECK(s.size(k_now + 1.5) == 1);
  CHECK(s.get(k_now + 1.5, "b").has_value());
}

TEST_CASE("extend moves an expiration only forward", "[dht][storage]") {
  TimedStorage<std::string, std::string> s;
  CHECK(s.store(k_now, "a", "1", k_now + 1));
  CHECK_FALSE(s.extend(k_now, "a", k_now + 1));
  CHECK_FALSE(s.extend(k_now, "missing", k_now + 9));
  CHECK(s.extend(k_now, "a", k_now + 9));
  CHECK(s.get(k_now + 5, "a")->expiration_time == k_now + 9);
}

TEST_CASE("dictionary values: per-subkey newest wins, latest expiration never decreases",
          "[dht][storage]") {
  DictionaryValue d;
  CHECK(d.latest_expiration_time() == -std::numeric_limits<double>::infinity());
  CHECK(d.store(k_now, "subkey1", "value1", k_now + 2));
  CHECK(d.store(k_now, "subkey2", "value2", k_now + 3));
  CHECK(d.store(k_now, "subkey3", "value3", k_now + 1));
  CHECK(d.latest_expiration_time() == k_now + 3);
  CHECK_FALSE(d.store(k_now, "subkey2", "older", k_now + 2.5));
  CHECK(d.get(k_now, "subkey2")->value == "value2");
  CHECK(d.store(k_now, "subkey2", "newer", k_now + 2.5 + 1));
  CHECK(d.latest_expiration_time() == k_now + 3.5);
  // Entries expire one by one; the latest expiration stays.
  CHECK(d.size(k_now + 1.5) == 2);
  CHECK(d.size(k_now + 10) == 0);
  CHECK(d.latest_expiration_time() == k_now + 3.5);
  // A rejected expired write does not move it either.
  CHECK_FALSE(d.store(k_now + 10, "late", "x", k_now + 5));
  CHECK(d.latest_expiration_time() == k_now + 3.5);
}

TEST_CASE("store_subkey builds a dictionary whose outer expiration is the latest",
          "[dht][storage]") {
  LocalStorage s;
  DictionaryValue d;
  CHECK(d.store(k_now, "subkey1", "value1", k_now + 2));
  CHECK(d.store(k_now, "subkey2", "value2", k_now + 3));
  CHECK(d.store(k_now, "subkey3", "value3", k_now + 1));
  for (auto& [subkey, entry] : d.items(k_now)) {
    CHECK(s.store_subkey(k_now, key("foo"), subkey, entry.value, entry.expiration_time));
  }
  CHECK(s.get(k_now, key("foo"))->expiration_time == k_now + 3);
  auto stored = dictionary(s, k_now, key("foo"));
  CHECK(stored.items(k_now) == d.items(k_now));
  CHECK(stored.latest_expiration_time() == k_now + 3);
  CHECK(*stored.get(k_now, "subkey1") == apiary::core::dht::ValueWithExpiration<std::string>{
                                              "value1", k_now + 2});
  // A later subkey raises the outer expiration.
  CHECK(s.store_subkey(k_now, key("foo"), "subkey4", "value4", k_now + 4));
  CHECK(dictionary(s, k_now, key("foo")).size(k_now) == 4);
  CHECK(s.get(k_now, key("foo"))->expiration_time == k_now + 4);
  // The dictionary outlives its early subkeys.
  CHECK(dictionary(s, k_now + 3.5, key("foo")).size(k_now + 3.5) == 1);
  CHECK(s.store_dictionary(k_now, key("copy"), d));
  CHECK(dictionary(s, k_now, key("copy")).size(k_now) == 3);
  CHECK_FALSE(s.store_dictionary(k_now, key("none"), DictionaryValue{}));
}

TEST_CASE("precedence between regular values and dictionaries", "[dht][storage]") {
  LocalStorage s;
  // (3) a regular value expiring later (or at the same time) keeps its key.
  CHECK(s.store(k_now, key("bar"), "456", k_now + 2));
  CHECK_FALSE(s.store_subkey(k_now, key("bar"), "subkey4", "value4", k_now + 1));
  CHECK_FALSE(s.store_subkey(k_now, key("bar"), "subkey4", "value4", k_now + 2));
  CHECK(regular(s, k_now, key("bar")) == "456");
  // (1) a newer subkey replaces the regular value with a dictionary.
  CHECK(s.store_subkey(k_now, key("bar"), "subkey5", "value5", k_now + 3));
  auto bar = dictionary(s, k_now, key("bar"));
  CHECK(bar.size(k_now) == 1);
  CHECK(bar.get(k_now, "subkey5")->value == "value5");
  // (2) into the dictionary: an older subkey is still accepted (subkeys are independent)
  // and does not lower the outer expiration.
  CHECK(s.store_subkey(k_now, key("bar"), "subkey6", "value6", k_now + 1));
  CHECK(s.get(k_now, key("bar"))->expiration_time == k_now + 3);
  CHECK(dictionary(s, k_now, key("bar")).size(k_now) == 2);
  // A regular store over a dictionary: plain newest-wins on the outer expiration.
  CHECK_FALSE(s.store(k_now, key("bar"), "older", k_now + 3));
  CHECK(dictionary(s, k_now, key("bar")).size(k_now) == 2);
  CHECK(s.store(k_now, key("bar"), "newer", k_now + 4));
  CHECK(regular(s, k_now, key("bar")) == "newer");
  // Expired subkey writes are rejected outright.
  CHECK_FALSE(s.store_subkey(k_now, key("baz"), "s", "v", k_now - 1));
  CHECK_FALSE(s.contains(k_now, key("baz")));
}

TEST_CASE("an expired dictionary key is replaced by a fresh one", "[dht][storage]") {
  LocalStorage s;
  CHECK(s.store_subkey(k_now, key("k"), "a", "1", k_now + 1));
  CHECK(s.store_subkey(k_now + 5, key("k"), "b", "2", k_now + 6));
  auto d = dictionary(s, k_now + 5, key("k"));
  CHECK(d.size(k_now + 5) == 1);
  CHECK_FALSE(d.get(k_now + 5, "a").has_value());
  CHECK(d.latest_expiration_time() == k_now + 6);
}
