#include "core/dht/schema_validator.hpp"

#include <limits>
#include <string_view>
#include <utility>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/node_id.hpp"

namespace apiary::core::dht {
namespace {

/// True iff `bytes` holds an owner marker: "[owner:", at least one byte, then "]".
bool has_owner_marker(std::string_view bytes) {
  constexpr std::string_view open = "[owner:";
  const auto at = bytes.find(open);
  if (at == std::string_view::npos) return false;
  return bytes.find(']', at + open.size() + 1) != std::string_view::npos;
}

/// True iff `object` has exactly the msgpack type `type` asks for.
bool matches(const msgpack::object& object, schema_type type) {
  switch (type) {
    case schema_type::bytes:
      return object.type == msgpack::type::BIN;
    case schema_type::str:
      return object.type == msgpack::type::STR;
    case schema_type::integer:
      return object.type == msgpack::type::POSITIVE_INTEGER ||
             object.type == msgpack::type::NEGATIVE_INTEGER;
    case schema_type::nonnegative_int:
      return object.type == msgpack::type::POSITIVE_INTEGER;
    case schema_type::float64:
      return object.type == msgpack::type::FLOAT32 || object.type == msgpack::type::FLOAT64;
    case schema_type::boolean:
      return object.type == msgpack::type::BOOLEAN;
    case schema_type::bytes_with_owner:
      return object.type == msgpack::type::BIN &&
             has_owner_marker(std::string_view(object.via.bin.ptr, object.via.bin.size));
    case schema_type::nonnegative_float:
      return (object.type == msgpack::type::FLOAT32 || object.type == msgpack::type::FLOAT64) &&
             object.via.f64 >= 0;
    case schema_type::record:
      return false;  // checked against its fields by matches_record
  }
  return false;
}

/// True iff `object` is a map of exactly `fields`' str keys, each once, each value of
/// its field's type (nil for a nullable one).
bool matches_record(const msgpack::object& object, const std::vector<RecordField>& fields) {
  if (object.type != msgpack::type::MAP || object.via.map.size != fields.size()) return false;
  std::vector<bool> seen(fields.size(), false);
  for (std::uint32_t i = 0; i < object.via.map.size; ++i) {
    const msgpack::object_kv& kv = object.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR) return false;
    const std::string_view name(kv.key.via.str.ptr, kv.key.via.str.size);
    std::size_t f = 0;
    while (f < fields.size() && fields[f].name != name) ++f;
    if (f == fields.size() || seen[f]) return false;
    seen[f] = true;
    const bool nil_ok = fields[f].nullable && kv.val.type == msgpack::type::NIL;
    if (!nil_ok && !matches(kv.val, fields[f].type)) return false;
  }
  return true;
}

/// True iff `packed` is exactly one msgpack object fitting `field`'s values.
bool value_matches(std::string_view packed, const SchemaField& field) {
  auto handle = unpack_one(packed);
  if (!handle) return false;
  const msgpack::object& object = handle->get();
  if (field.nullable && object.type == msgpack::type::NIL) return true;
  if (field.value_type == schema_type::record) return matches_record(object, field.record);
  return matches(object, field.value_type);
}

/// True iff `packed` is exactly one msgpack object of type `type`.
bool packed_matches(std::string_view packed, schema_type type) {
  auto handle = unpack_one(packed);
  return handle && matches(handle->get(), type);
}

/// True iff `record` fits `field` (see SchemaValidator::validate).
bool accepts(const SchemaField& field, const DhtRecord& record) {
  if (!field.subkey_type) {
    // A regular field: no subkey, one value of the field's type.
    return record.subkey == k_subkey_regular && value_matches(record.value, field);
  }
  if (record.subkey == k_subkey_regular) return false;  // a dictionary field needs subkeys
  if (record.subkey == k_subkey_dictionary) {
    // A whole dictionary value: every entry must fit.
    auto dictionary = unpack_dictionary(record.value);
    if (!dictionary) return false;
    for (const auto& [subkey, entry] :
         dictionary->items(-std::numeric_limits<DhtTime>::infinity())) {
      if (!packed_matches(subkey, *field.subkey_type)) return false;
      if (!value_matches(entry.value, field)) return false;
    }
    return true;
  }
  // One dictionary entry.
  return packed_matches(record.subkey, *field.subkey_type) && value_matches(record.value, field);
}

}  // namespace

SchemaField SchemaField::regular(std::string name, schema_type type) {
  return SchemaField{std::move(name), type, std::nullopt, false, {}};
}

SchemaField SchemaField::dictionary(std::string name, schema_type subkey, schema_type value) {
  return SchemaField{std::move(name), value, subkey, false, {}};
}

SchemaField SchemaField::dictionary_of_records(std::string name, schema_type subkey, std::vector<RecordField> fields,
                                               bool nullable) {
  return SchemaField{std::move(name), schema_type::record, subkey, nullable, std::move(fields)};
}

SchemaValidator::SchemaValidator(std::vector<SchemaField> fields, SchemaOptions options)
    : allow_extra_keys_(options.allow_extra_keys) {
  Schema schema;
  for (auto& field : fields) {
    auto key = field_key(options.prefix, field.name);
    schema.insert_or_assign(std::move(key), std::move(field));
  }
  schemas_.push_back(std::move(schema));
}

std::string SchemaValidator::field_key(const std::optional<std::string>& prefix,
                                       const std::string& name) {
  const std::string key = prefix ? *prefix + "_" + name : name;
  return NodeId::of_str_key(key).to_bytes();
}

bool SchemaValidator::validate(const DhtRecord& record) const {
  bool named = false;
  for (const auto& schema : schemas_) {
    const auto it = schema.find(record.key);
    if (it == schema.end()) continue;
    named = true;
    if (accepts(it->second, record)) return true;
  }
  return !named && allow_extra_keys_;
}

bool SchemaValidator::merge_with(const RecordValidator& other) {
  const auto* schema = dynamic_cast<const SchemaValidator*>(&other);
  if (schema == nullptr) return false;
  schemas_.insert(schemas_.end(), schema->schemas_.begin(), schema->schemas_.end());
  allow_extra_keys_ = allow_extra_keys_ || schema->allow_extra_keys_;
  return true;
}

}  // namespace apiary::core::dht
