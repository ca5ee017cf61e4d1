// Bindings of the DHT's record validators (core/dht: ownership signatures, schemas) and
// the keys they sign with. The package's apiary.dht.crypto / apiary.dht.schema build on
// these; a DHT node runs its validators in C++, on its own threads.
#include <pybind11/stl.h>

#include "core/dht/ownership_validator.hpp"
#include "core/dht/schema_validator.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/identity/rsa.hpp"
#include "python/src/common.hpp"

namespace apiary::python {

namespace {

template <class V>
PyValidator validator_of(V validator) {
  auto proto = std::make_shared<const V>(std::move(validator));
  return PyValidator{proto, [proto] { return std::make_unique<V>(*proto); }};
}

core::dht::DhtRecord record_of(const py::bytes& key, const py::bytes& subkey, const py::bytes& value,
                               double expiration) {
  return core::dht::DhtRecord{std::string(key), std::string(subkey), std::string(value), expiration};
}

/// Binds `name` on RecordValidator as fn(validator, record), the record given as (key id
/// bytes, msgpack subkey, msgpack value, expiration_time).
template <class Fn>
void def_on_record(py::class_<PyValidator>& validator, const char* name, Fn fn, const char* doc) {
  validator.def(
      name,
      [fn](const PyValidator& v, const py::bytes& key, const py::bytes& subkey, const py::bytes& value,
           double expiration) { return fn(*v.proto, record_of(key, subkey, value, expiration)); },
      py::arg("key"), py::arg("subkey"), py::arg("value"), py::arg("expiration_time"), doc);
}

core::dht::schema_type schema_type_of(int code) {
  if (code < 0 || code > static_cast<int>(core::dht::schema_type::record)) {
    throw py::value_error("expected a schema type code from 0 to " +
                          std::to_string(static_cast<int>(core::dht::schema_type::record)) + ", got " +
                          std::to_string(code));
  }
  return static_cast<core::dht::schema_type>(code);
}

}  // namespace

void bind_validators(py::module_& m) {
  using core::dht::DhtRecord;
  using core::dht::RecordValidator;
  py::class_<PyValidator> validator(m, "RecordValidator",
                                    "A DHT record validator (signing, checking, stripping records).");
  def_on_record(validator, "validate", [](const RecordValidator& v, const DhtRecord& r) { return v.validate(r); },
                "True iff the record (key id bytes, msgpack subkey, msgpack value, expiration) is valid.");
  def_on_record(
      validator, "sign_value",
      [](const RecordValidator& v, const DhtRecord& r) { return py::bytes(value_or_raise(v.sign_value(r))); },
      "The value as stored: signed when the record names this validator's key.");
  def_on_record(validator, "strip_value",
                [](const RecordValidator& v, const DhtRecord& r) { return py::bytes(v.strip_value(r)); },
                "The value without this validator's markers.");
  validator.def_property_readonly("priority", [](const PyValidator& v) { return v.proto->priority(); });

  m.def(
      "merge_validators",
      [](const PyValidator& a, const PyValidator& b) -> std::optional<PyValidator> {
        std::shared_ptr<core::dht::RecordValidator> merged = a.clone();
        if (!merged->merge_with(*b.proto)) return std::nullopt;
        auto clone_a = a.clone;
        auto proto_b = b.proto;
        return PyValidator{merged, [clone_a, proto_b] {
                             auto out = clone_a();
                             (void)out->merge_with(*proto_b);
                             return out;
                           }};
      },
      py::arg("a"), py::arg("b"), "`a` having absorbed `b`, or None when they do not merge.");
  m.def(
      "ownership_validator",
      [](const std::string& kind, const py::bytes& key) {
        if (kind == "ed25519") {
          auto private_key = value_or_raise(messages::Ed25519PrivateKey::from_seed(std::string(key)));
          const std::string marker = core::dht::OwnershipValidator::owner_marker(private_key.public_key());
          return py::make_tuple(validator_of(core::dht::OwnershipValidator(std::move(private_key))), py::bytes(marker));
        }
        if (kind == "rsa") {
          auto private_key = value_or_raise(messages::RsaPrivateKey::from_der(std::string(key)));
          const std::string marker = core::dht::OwnershipValidator::owner_marker(private_key.public_key());
          return py::make_tuple(validator_of(core::dht::OwnershipValidator(std::move(private_key))), py::bytes(marker));
        }
        throw py::value_error("expected a key kind 'ed25519' or 'rsa', got '" + kind + "'");
      },
      py::arg("kind"), py::arg("private_key"),
      "An ownership validator signing with an Ed25519 seed or an RSA DER key: (validator, owner marker bytes).");
  m.def(
      "generate_private_key",
      [](const std::string& kind, int bits) {
        if (kind == "ed25519") return py::bytes(value_or_raise(messages::Ed25519PrivateKey::generate()).seed());
        if (kind == "rsa") {
          if (bits < 1024 || bits > 16384) throw py::value_error("expected RSA bits from 1024 to 16384, got " + std::to_string(bits));
          py::gil_scoped_release unlocked;  // a 2048-bit key takes tens of milliseconds
          auto key = messages::RsaPrivateKey::generate(bits);
          auto der = key ? key->to_der() : Result<std::string>(key.error());
          py::gil_scoped_acquire locked;
          return py::bytes(value_or_raise(std::move(der)));
        }
        throw py::value_error("expected a key kind 'ed25519' or 'rsa', got '" + kind + "'");
      },
      py::arg("kind"), py::arg("bits") = 2048,
      "A fresh private key: an Ed25519 seed (32 bytes) or an RSA key's DER bytes.");
  m.def(
      "public_key_text",
      [](const std::string& kind, const py::bytes& key) {
        if (kind == "ed25519") {
          auto private_key = value_or_raise(messages::Ed25519PrivateKey::from_seed(std::string(key)));
          return py::bytes(private_key.public_key().bytes());
        }
        if (kind == "rsa") {
          auto private_key = value_or_raise(messages::RsaPrivateKey::from_der(std::string(key)));
          return py::bytes(private_key.public_key().openssh());
        }
        throw py::value_error("expected a key kind 'ed25519' or 'rsa', got '" + kind + "'");
      },
      py::arg("kind"), py::arg("private_key"),
      "The public key of a private key: raw 32 bytes (Ed25519) or OpenSSH text (RSA).");
  m.def(
      "schema_validator",
      [](const std::vector<std::tuple<std::string, int, std::optional<int>, bool,
                                      std::vector<std::tuple<std::string, int, bool>>>>& fields,
         const std::optional<std::string>& prefix, bool allow_extra_keys) {
        std::vector<core::dht::SchemaField> schema;
        for (const auto& [name, value_type, subkey_type, nullable, record] : fields) {
          core::dht::SchemaField field{name, schema_type_of(value_type), std::nullopt, nullable, {}};
          if (subkey_type) field.subkey_type = schema_type_of(*subkey_type);
          for (const auto& [member, type, member_nullable] : record) {
            const auto member_type = schema_type_of(type);
            if (member_type == core::dht::schema_type::record) {
              throw py::value_error("expected the fields of a record in a schema to be plain types, but '" + member +
                                    "' of '" + name + "' is a record itself");
            }
            field.record.push_back(core::dht::RecordField{member, member_type, member_nullable});
          }
          if ((field.value_type == core::dht::schema_type::record) != !field.record.empty()) {
            throw py::value_error("expected record fields exactly for a record field, got '" + name + "'");
          }
          schema.push_back(std::move(field));
        }
        return validator_of(core::dht::SchemaValidator(std::move(schema), {prefix, allow_extra_keys}));
      },
      py::arg("fields"), py::arg("prefix"), py::arg("allow_extra_keys"),
      "A schema validator of (name, value type code, subkey type code or None, nullable, record fields) fields; "
      "record fields are (name, type code, nullable).");
}

}  // namespace apiary::python
