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
  }
  return false;
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
    return record.subkey == k_subkey_regular && packed_matches(record.value, field.value_type);
  }
  if (record.subkey == k_subkey_regular) return false;  // a dictionary field needs subkeys
  if (record.subkey == k_subkey_dictionary) {
    // A whole dictionary value: every entry must fit.
    auto dictionary = unpack_dictionary(record.value);
    if (!dictionary) return false;
    for (const auto& [subkey, entry] :
         dictionary->items(-std::numeric_limits<DhtTime>::infinity())) {
      if (!packed_matches(subkey, *field.subkey_type)) return false;
      if (!packed_matches(entry.value, field.value_type)) return false;
    }
    return true;
  }
  // One dictionary entry.
  return packed_matches(record.subkey, *field.subkey_type) &&
         packed_matches(record.value, field.value_type);
}

}  // namespace

SchemaField SchemaField::regular(std::string name, schema_type type) {
  return SchemaField{std::move(name), type, std::nullopt};
}

SchemaField SchemaField::dictionary(std::string name, schema_type subkey, schema_type value) {
  return SchemaField{std::move(name), value, subkey};
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
