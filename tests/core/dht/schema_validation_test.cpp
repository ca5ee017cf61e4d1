// Schema validators (the behaviour of hivemind's test_dht_schema.py, on records directly).
// Schema: experiment_name: bytes; n_batches: {bytes: int >= 0};
// signed_data: {bytes with an owner marker: bytes}.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <msgpack.hpp>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/node_id.hpp"
#include "core/dht/schema_validator.hpp"
#include "core/dht/storage.hpp"

namespace dht = apiary::core::dht;
using dht::schema_type;
using dht::SchemaField;

namespace {

/// msgpack of any value msgpack-c++ knows (ints, doubles, vectors, maps, ...).
template <class T>
std::string pack(const T& value) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, value);
  return std::string(buffer.data(), buffer.size());
}

std::vector<SchemaField> experiment_schema() {
  return {SchemaField::regular("experiment_name", schema_type::bytes),
          SchemaField::dictionary("n_batches", schema_type::bytes, schema_type::nonnegative_int),
          SchemaField::dictionary("signed_data", schema_type::bytes_with_owner,
                                  schema_type::bytes)};
}

dht::DhtRecord rec(const std::string& field, std::string subkey, std::string value,
                   const std::optional<std::string>& prefix = std::nullopt) {
  return dht::DhtRecord{dht::SchemaValidator::field_key(prefix, field), std::move(subkey),
                        std::move(value), 100.0};
}

const std::string& regular = dht::k_subkey_regular;

}  // namespace

TEST_CASE("a regular field takes exactly its type", "[dht][schema]") {
  const dht::SchemaValidator schema(experiment_schema());
  CHECK(schema.validate(rec("experiment_name", regular, dht::pack_bin("foo_bar"))));
  CHECK_FALSE(schema.validate(rec("experiment_name", regular, pack(777))));
  CHECK_FALSE(schema.validate(rec("experiment_name", regular, dht::pack_str("foo_bar"))));
  CHECK_FALSE(schema.validate(rec("experiment_name", dht::pack_bin("subkey"),
                                  dht::pack_bin("foo_bar"))));
  CHECK_FALSE(schema.validate(rec("experiment_name", regular, pack(std::vector<int>{}))));
  CHECK_FALSE(schema.validate(rec("experiment_name", regular, pack(std::vector<int>{1, 2, 3}))));
  // Not exactly one msgpack object: trailing bytes or nothing.
  CHECK_FALSE(schema.validate(rec("experiment_name", regular, dht::pack_bin("a") + "\x01")));
  CHECK_FALSE(schema.validate(rec("experiment_name", regular, "")));
}

TEST_CASE("a dictionary field checks subkeys and values strictly", "[dht][schema]") {
  const dht::SchemaValidator schema(experiment_schema());
  const auto uid = [](const char* text) { return dht::pack_bin(text); };
  CHECK(schema.validate(rec("n_batches", uid("uid1"), pack(777))));
  CHECK(schema.validate(rec("n_batches", uid("uid2"), pack(0))));
  CHECK_FALSE(schema.validate(rec("n_batches", uid("uid3"), pack(-1))));
  CHECK_FALSE(schema.validate(rec("n_batches", regular, pack(999))));            // no subkey
  CHECK_FALSE(schema.validate(rec("n_batches", uid("uid3"), dht::pack_bin("nope"))));
  CHECK_FALSE(schema.validate(rec("n_batches", pack(42), pack(777))));           // int subkey
  CHECK_FALSE(schema.validate(rec("n_batches", dht::pack_str("uid3"), pack(777))));  // str
  CHECK_FALSE(schema.validate(rec("n_batches", uid("uid3"), dht::pack_float(779.5))));
  CHECK_FALSE(schema.validate(rec("n_batches", uid("uid3"), dht::pack_float(779.0))));
  CHECK_FALSE(schema.validate(rec("n_batches", uid("uid3"), pack(std::vector<int>{}))));
  CHECK_FALSE(schema.validate(rec("n_batches", uid("uid3"), pack(std::vector<int>{1, 2}))));
  CHECK_FALSE(schema.validate(rec("n_batches", uid("uid3"), dht::pack_str(""))));
  CHECK_FALSE(schema.validate(rec("n_batches", uid("uid3"), pack(true))));
  // A plain msgpack map stored as a regular value is not a dictionary value.
  CHECK_FALSE(schema.validate(rec("n_batches", regular, pack(std::map<int, int>{{1, 1}}))));
}

TEST_CASE("a whole dictionary value is checked entry by entry", "[dht][schema]") {
  const dht::SchemaValidator schema(experiment_schema());
  dht::DictionaryValue good;
  REQUIRE(good.store(0, dht::pack_bin("uid1"), pack(777), 50));
  REQUIRE(good.store(0, dht::pack_bin("uid2"), pack(778), 60));
  CHECK(schema.validate(rec("n_batches", dht::k_subkey_dictionary, dht::pack_dictionary(0, good))));

  dht::DictionaryValue bad = good;
  REQUIRE(bad.store(0, dht::pack_bin("uid3"), pack(-5), 70));
  CHECK_FALSE(
      schema.validate(rec("n_batches", dht::k_subkey_dictionary, dht::pack_dictionary(0, bad))));
  CHECK_FALSE(schema.validate(rec("n_batches", dht::k_subkey_dictionary, pack(777))));
  // A regular field never takes a dictionary value.
  CHECK_FALSE(schema.validate(
      rec("experiment_name", dht::k_subkey_dictionary, dht::pack_dictionary(0, good))));
}

TEST_CASE("subkeys of signed_data must name an owner", "[dht][schema]") {
  const dht::SchemaValidator schema(experiment_schema());
  const std::string owner = "[owner:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=]";
  CHECK(schema.validate(rec("signed_data", dht::pack_bin("uid" + owner), dht::pack_bin("v"))));
  CHECK_FALSE(schema.validate(rec("signed_data", dht::pack_bin("uid"), dht::pack_bin("v"))));
  const auto v = dht::pack_bin("v");
  CHECK_FALSE(schema.validate(rec("signed_data", dht::pack_bin("uid[owner:]"), v)));
  CHECK_FALSE(schema.validate(rec("signed_data", dht::pack_str("uid" + owner), v)));
}

TEST_CASE("keys outside the schema pass iff extra keys are allowed", "[dht][schema]") {
  const auto unknown = rec("unknown_key", regular, pack(777));
  CHECK(dht::SchemaValidator(experiment_schema(), {std::nullopt, true}).validate(unknown));
  CHECK_FALSE(dht::SchemaValidator(experiment_schema(), {std::nullopt, false}).validate(unknown));
}

TEST_CASE("a prefix moves every field to <prefix>_<field>", "[dht][schema]") {
  const dht::SchemaValidator schema({SchemaField::regular("field", schema_type::integer)},
                                    {std::string("prefix"), false});
  CHECK(schema.validate(rec("field", regular, pack(-3), std::string("prefix"))));
  CHECK_FALSE(schema.validate(rec("field", regular, dht::pack_bin("x"), std::string("prefix"))));
  CHECK_FALSE(schema.validate(rec("field", regular, pack(-3))));  // unprefixed key is extra
  CHECK(dht::SchemaValidator::field_key(std::string("prefix"), "field") ==
        dht::NodeId::of_str_key("prefix_field").to_bytes());
}

TEST_CASE("merged schemas accept what any of them accepts", "[dht][schema]") {
  for (const bool first_allows_extra : {false, true}) {
    dht::SchemaValidator first({SchemaField::regular("some_field", schema_type::integer)},
                               {std::nullopt, first_allows_extra});
    const dht::SchemaValidator second(
        {SchemaField::regular("another_field", schema_type::integer)}, {std::nullopt, false});
    REQUIRE(first.merge_with(second));

    CHECK(first.validate(rec("some_field", regular, pack(777))));
    CHECK_FALSE(first.validate(rec("some_field", regular, dht::pack_str("string_value"))));
    CHECK(first.validate(rec("another_field", regular, pack(42))));
    CHECK_FALSE(first.validate(rec("another_field", regular, dht::pack_str("string_value"))));
    CHECK(first.validate(rec("unknown_key", regular, pack(777))) == first_allows_extra);
  }
}

TEST_CASE("two schemas naming one field accept either type", "[dht][schema]") {
  dht::SchemaValidator ints({SchemaField::regular("x", schema_type::integer)});
  REQUIRE(ints.merge_with(dht::SchemaValidator({SchemaField::regular("x", schema_type::str)})));
  CHECK(ints.validate(rec("x", regular, pack(1))));
  CHECK(ints.validate(rec("x", regular, dht::pack_str("one"))));
  CHECK_FALSE(ints.validate(rec("x", regular, dht::pack_float(1.0))));
}

TEST_CASE("a dictionary of optional records checks each record's fields strictly (hivemind's progress)",
          "[dht][schema]") {
  const std::vector<dht::RecordField> progress{{"peer_id", schema_type::bytes, false},
                                          {"epoch", schema_type::nonnegative_int, false},
                                          {"samples_per_second", schema_type::nonnegative_float, false},
                                          {"time", schema_type::float64, false},
                                          {"client_mode", schema_type::boolean, false},
                                          {"note", schema_type::str, true}};
  const dht::SchemaValidator validator(
      {SchemaField::dictionary_of_records("progress", schema_type::bytes_with_owner, progress, true)},
      dht::SchemaOptions{std::string("run"), false});
  const std::string owner = dht::pack_bin("[owner:abc]");
  auto record_of = [&](const std::string& value) {
    return dht::DhtRecord{dht::SchemaValidator::field_key(std::string("run"), "progress"), owner, value, 1e9};
  };
  // A map of the fields, in any order, built by hand in msgpack.
  auto map_of = [](const std::vector<std::pair<std::string, std::string>>& entries) {
    std::string out(1, static_cast<char>(0x80 | entries.size()));
    for (const auto& [k, v] : entries) out += dht::pack_str(k) + v;
    return out;
  };
  const std::vector<std::pair<std::string, std::string>> good{
      {"peer_id", dht::pack_bin("id")}, {"epoch", std::string(1, '\x05')}, {"samples_per_second", dht::pack_float(2.5)},
      {"time", dht::pack_float(1.7e9)}, {"client_mode", std::string(1, '\xc2')}, {"note", std::string(1, '\xc0')}};
  CHECK(validator.validate(record_of(map_of(good))));
  auto reversed = good;
  std::reverse(reversed.begin(), reversed.end());
  CHECK(validator.validate(record_of(map_of(reversed))));
  CHECK(validator.validate(record_of(std::string(1, '\xc0'))));  // None: the peer left
  auto with = [&](const std::string& name, const std::string& value) {
    auto entries = good;
    for (auto& [k, v] : entries) {
      if (k == name) v = value;
    }
    return record_of(map_of(entries));
  };
  CHECK_FALSE(validator.validate(with("epoch", std::string(1, '\xff'))));             // -1
  CHECK_FALSE(validator.validate(with("epoch", dht::pack_float(5.0))));                    // a float is not an int
  CHECK_FALSE(validator.validate(with("samples_per_second", dht::pack_float(-1.0))));      // negative
  CHECK_FALSE(validator.validate(with("samples_per_second", std::string(1, '\x02'))));  // an int is not a float
  CHECK_FALSE(validator.validate(with("client_mode", std::string(1, '\x00'))));
  CHECK_FALSE(validator.validate(with("peer_id", std::string(1, '\xc0'))));           // not nullable
  CHECK(validator.validate(with("note", dht::pack_str("hello"))));
  auto missing = good;
  missing.pop_back();
  CHECK_FALSE(validator.validate(record_of(map_of(missing))));
  auto extra = good;
  extra.emplace_back("extra", dht::pack_str("x"));
  CHECK_FALSE(validator.validate(record_of(map_of(extra))));
  auto twice = good;
  twice.back() = {"epoch", std::string(1, '\x05')};
  CHECK_FALSE(validator.validate(record_of(map_of(twice))));
  CHECK_FALSE(validator.validate(record_of(dht::pack_str("not a map"))));
  CHECK_FALSE(validator.validate(dht::DhtRecord{dht::SchemaValidator::field_key(std::string("run"), "progress"),
                                           dht::pack_bin("no owner"), map_of(good), 1e9}));
}
