#pragma once
/// Schema checks on DHT records (hivemind's SchemaValidator, reference §2.8, without
/// pydantic): a schema names fields, each a DHT key, and the msgpack type its value (and,
/// for dictionary fields, its subkeys) must have. Types are checked strictly: a float is
/// not an int, a str is not bytes, nothing is converted.
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dht/validation.hpp"

namespace apiary::core::dht {

/// A msgpack type a schema may expect.
enum class schema_type {
  bytes,             ///< msgpack bin (a Python `bytes`)
  str,               ///< msgpack str
  integer,           ///< msgpack int, any sign (not a float, not a bool)
  nonnegative_int,   ///< msgpack int >= 0 (pydantic `conint(ge=0, strict=True)`)
  float64,           ///< msgpack float (32 or 64 bit), not an int
  boolean,           ///< msgpack true/false
  bytes_with_owner,  ///< msgpack bin containing an `[owner:...]` marker
  nonnegative_float, ///< msgpack float >= 0 (pydantic `confloat(ge=0, strict=True)`)
  record,            ///< msgpack map of named fields (a nested pydantic model): SchemaField::record
};

/// One field of a record value (a nested model such as hivemind's LocalTrainingProgress).
struct RecordField {
  std::string name;                          ///< the map key (a msgpack str)
  schema_type type = schema_type::bytes;     ///< not record: records nest one level
  bool nullable = false;                     ///< nil is accepted too (Optional[...])
};

/// One field of a schema: its name (the DHT key is the id of the name, or of
/// "<prefix>_<name>") and the type of its values.
struct SchemaField {
  /// The field's name.
  std::string name;
  /// Type of a regular value, or of each dictionary entry's value.
  schema_type value_type = schema_type::bytes;
  /// Set for a dictionary field: the type of each subkey; unset for a regular field.
  std::optional<schema_type> subkey_type;
  /// The value may be nil too (Optional[...]: hivemind's progress entries are None once
  /// their peer left).
  bool nullable = false;
  /// The fields of a record value (value_type record): a msgpack map holding exactly
  /// these str keys, each value of its type.
  std::vector<RecordField> record;

  /// A field holding a regular value of `type`.
  [[nodiscard]] static SchemaField regular(std::string name, schema_type type);
  /// A field holding a dictionary of `subkey` -> `value`.
  [[nodiscard]] static SchemaField dictionary(std::string name, schema_type subkey,
                                              schema_type value);
  /// A dictionary of `subkey` -> a record of `fields` (or nil when `nullable`).
  [[nodiscard]] static SchemaField dictionary_of_records(std::string name, schema_type subkey,
                                                         std::vector<RecordField> fields, bool nullable);
};

/// Options of a SchemaValidator.
struct SchemaOptions {
  /// If set, field `f` lives under the key "<prefix>_f" instead of "f".
  std::optional<std::string> prefix;
  /// Whether records under keys that no field names are accepted.
  bool allow_extra_keys = true;
};

/// Accepts records that match the schema; merged schema validators accept a record that
/// matches any of their schemas.
class SchemaValidator final : public RecordValidator {
 public:
  /// A validator for one schema of `fields` (names should be distinct; a later field
  /// with the same name replaces the earlier one).
  SchemaValidator(std::vector<SchemaField> fields, SchemaOptions options = {});

  /// The key id bytes of field `name` under `prefix`: NodeId::of_str_key of
  /// "<prefix>_<name>", or of "<name>" without a prefix.
  [[nodiscard]] static std::string field_key(const std::optional<std::string>& prefix,
                                             const std::string& name);

  /// For a key no schema names: allow_extra_keys. Otherwise true iff some schema naming
  /// the key accepts the record: a regular field needs subkey k_subkey_regular and a
  /// value of its type (a msgpack map is never accepted); a dictionary field needs a
  /// msgpack subkey and value of its types, or, under k_subkey_dictionary, an ext 0x50
  /// dictionary value whose every entry has them. The value must be exactly one msgpack
  /// object (signature markers are stripped by higher-priority validators first).
  [[nodiscard]] bool validate(const DhtRecord& record) const override;

  /// 0: runs after OwnershipValidator has checked and stripped signatures.
  [[nodiscard]] int priority() const override { return 0; }

  /// Absorbs another SchemaValidator: its schemas join this one's, and extra keys are
  /// allowed if either allowed them.
  [[nodiscard]] bool merge_with(const RecordValidator& other) override;

 private:
  using Schema = std::unordered_map<std::string, SchemaField>;  // key id bytes -> field

  std::vector<Schema> schemas_;
  bool allow_extra_keys_;
};

}  // namespace apiary::core::dht
