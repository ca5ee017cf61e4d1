// Ownership signatures and composite validators (hivemind's test_dht_crypto.py and
// test_dht_validation.py, driven on records directly).
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/node_id.hpp"
#include "core/dht/ownership_validator.hpp"
#include "core/dht/schema_validator.hpp"
#include "core/dht/validation.hpp"
#include "messages/identity/rsa.hpp"

namespace dht = apiary::core::dht;
using apiary::messages::Ed25519PrivateKey;

namespace {

Ed25519PrivateKey key_from(char fill) {
  auto key = Ed25519PrivateKey::from_seed(std::string(32, fill));
  REQUIRE(key.ok());
  return *key;
}

dht::DhtRecord record(std::string subkey, std::string value, double expiration = 1000.5) {
  return dht::DhtRecord{dht::NodeId::of_str_key("experiment").to_bytes(), std::move(subkey),
                        std::move(value), expiration};
}

std::string signed_value(const dht::RecordValidator& validator, const dht::DhtRecord& r) {
  auto value = validator.sign_value(r);
  REQUIRE(value.ok());
  return *value;
}

}  // namespace

TEST_CASE("base64 round-trips and rejects non-canonical text", "[dht][validation]") {
  CHECK(dht::base64_encode("") == "");
  CHECK(dht::base64_encode("f") == "Zg==");
  CHECK(dht::base64_encode("fo") == "Zm8=");
  CHECK(dht::base64_encode("foobar") == "Zm9vYmFy");
  for (const std::string text : {"", "f", "fo", "foo", "foob", "fooba", "foobar"}) {
    auto decoded = dht::base64_decode(dht::base64_encode(text));
    REQUIRE(decoded.ok());
    CHECK(*decoded == text);
  }
  CHECK_FALSE(dht::base64_decode("Zg=").ok());
  CHECK_FALSE(dht::base64_decode("Zh==").ok());  // non-zero bits under the padding
  CHECK_FALSE(dht::base64_decode("Z===").ok());
  CHECK_FALSE(dht::base64_decode("Zg==Zg==").ok());
  CHECK_FALSE(dht::base64_decode("Zm9v!mFy").ok());
}

TEST_CASE("the signed message is msgpack of the record as a tuple", "[dht][validation]") {
  const dht::DhtRecord r{"k", dht::k_subkey_regular, "v", 1.5};
  // ext 8 (19 bytes, type 0x40) of [bin "k", bin c0, bin "v", float64 1.5].
  const std::string expected("\xc7\x13\x40\x94\xc4\x01k\xc4\x01\xc0\xc4\x01v"
                             "\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00",
                             22);
  CHECK(dht::OwnershipValidator::signed_message(r) == expected);
}

TEST_CASE("bob signs his subkey, mallory cannot write there", "[dht][validation]") {
  const dht::OwnershipValidator bob(key_from('b'));
  const dht::OwnershipValidator mallory(key_from('m'));
  const auto subkey = dht::pack_bin("peer" + bob.own_marker());
  const auto plain = record(subkey, dht::pack_str("bob's value"));

  // Bob signs and his record validates for anyone; stripping gives the value back.
  auto bobs = plain;
  bobs.value = signed_value(bob, plain);
  CHECK(bobs.value != plain.value);
  CHECK(bob.validate(bobs));
  CHECK(mallory.validate(bobs));
  CHECK(mallory.strip_value(bobs) == plain.value);

  // Unsigned, or signed by mallory's validator (which does not sign for bob), fails.
  CHECK_FALSE(mallory.validate(plain));
  CHECK(signed_value(mallory, plain) == plain.value);

  // A forged signature over mallory's value, made with mallory's key, fails.
  auto forged = record(subkey, dht::pack_str("mallory's value"));
  auto signature = key_from('m').sign(dht::OwnershipValidator::signed_message(forged));
  REQUIRE(signature.ok());
  forged.value += dht::OwnershipValidator::signature_marker(*signature);
  CHECK_FALSE(bob.validate(forged));

  // Garbage in the signature marker fails.
  auto garbage = plain;
  garbage.value += "[signature:INVALID_BYTES]";
  CHECK_FALSE(bob.validate(garbage));

  // Bob's signature moved onto another value or another expiration fails.
  auto tampered = bobs;
  tampered.value = dht::pack_str("mallory's value") + bobs.value.substr(plain.value.size());
  CHECK_FALSE(bob.validate(tampered));
  auto later = bobs;
  later.expiration += 1;
  CHECK_FALSE(bob.validate(later));
  auto moved = bobs;
  moved.key = dht::NodeId::of_str_key("other experiment").to_bytes();
  CHECK_FALSE(bob.validate(moved));

  // Two signatures, even two valid copies of bob's, fail.
  auto twice = bobs;
  twice.value += bobs.value.substr(plain.value.size());
  CHECK_FALSE(bob.validate(twice));
  // Signing again replaces the signature rather than adding one.
  auto resigned = bobs;
  resigned.value = signed_value(bob, bobs);
  CHECK(resigned.value == bobs.value);
}

TEST_CASE("owner markers in the key, and conflicting owners", "[dht][validation]") {
  const dht::OwnershipValidator alice(key_from('a'));
  const dht::OwnershipValidator bob(key_from('b'));

  // The owner may also be named in the key bytes.
  auto in_key = dht::DhtRecord{"key" + alice.own_marker(), dht::k_subkey_regular,
                               dht::pack_bin("v"), 7.0};
  in_key.value = signed_value(alice, in_key);
  CHECK(bob.validate(in_key));

  // Key and subkey naming different owners is rejected whatever is signed.
  auto both = dht::DhtRecord{"key" + alice.own_marker(), dht::pack_bin(bob.own_marker()),
                             dht::pack_bin("v"), 7.0};
  both.value = signed_value(alice, both);
  CHECK_FALSE(alice.validate(both));

  // A marker that is not a 32-byte base64 key protects nothing anyone can sign.
  const auto bad_owner = record(dht::pack_bin("[owner:not-a-key]"), dht::pack_bin("v"));
  CHECK_FALSE(alice.validate(bad_owner));
}

TEST_CASE("unprotected records pass unsigned and are left alone", "[dht][validation]") {
  const dht::OwnershipValidator alice(key_from('a'));
  const auto regular = record(dht::k_subkey_regular, dht::pack_bin("hello"));
  CHECK(alice.validate(regular));
  CHECK(signed_value(alice, regular) == regular.value);
  CHECK(alice.strip_value(regular) == regular.value);
  CHECK(alice.validate(record(dht::pack_str("some subkey"), dht::pack_str("x"))));
}

TEST_CASE("a composite merges alike validators and runs them by priority", "[dht][validation]") {
  const auto alice_key = key_from('a');
  const std::string alice_marker = dht::OwnershipValidator::owner_marker(alice_key.public_key());

  std::vector<std::unique_ptr<dht::RecordValidator>> parts;
  parts.push_back(std::make_unique<dht::SchemaValidator>(
      std::vector<dht::SchemaField>{dht::SchemaField::regular("field_a", dht::schema_type::bytes)},
      dht::SchemaOptions{std::nullopt, false}));
  parts.push_back(std::make_unique<dht::OwnershipValidator>(alice_key));
  parts.push_back(std::make_unique<dht::SchemaValidator>(
      std::vector<dht::SchemaField>{dht::SchemaField::dictionary(
          "field_b", dht::schema_type::bytes_with_owner, dht::schema_type::bytes)},
      dht::SchemaOptions{std::nullopt, false}));
  parts.push_back(std::make_unique<dht::OwnershipValidator>(key_from('z')));
  const dht::CompositeValidator composite(std::move(parts));
  CHECK(composite.size() == 2);  // one schema validator, one ownership validator

  // field_a: bytes pass, an int does not; nothing to sign.
  const auto key_a = dht::SchemaValidator::field_key(std::nullopt, "field_a");
  const dht::DhtRecord a_ok{key_a, dht::k_subkey_regular, dht::pack_bin("data"), 5.0};
  CHECK(composite.validate(a_ok));
  auto a_int = a_ok;
  a_int.value = "\x07";
  CHECK_FALSE(composite.validate(a_int));

  // field_b: a subkey naming alice; the signature is stripped before the schema looks.
  const auto key_b = dht::SchemaValidator::field_key(std::nullopt, "field_b");
  dht::DhtRecord b{key_b, dht::pack_bin("uid" + alice_marker), dht::pack_bin("payload"), 9.25};
  const auto original = b.value;
  auto signed_b = composite.sign_value(b);
  REQUIRE(signed_b.ok());
  b.value = *signed_b;
  CHECK(b.value.find("[signature:") != std::string::npos);
  CHECK(b.value.find("[signature:") == b.value.rfind("[signature:"));  // exactly one
  CHECK(composite.validate(b));
  CHECK(composite.strip_value(b) == original);
  b.value = original;
  CHECK_FALSE(composite.validate(b));  // unsigned

  // Keys outside every schema are rejected (neither schema allows extra keys).
  const dht::DhtRecord unknown{dht::SchemaValidator::field_key(std::nullopt, "other"),
                               dht::k_subkey_regular, dht::pack_bin("x"), 5.0};
  CHECK_FALSE(composite.validate(unknown));
}

namespace {

/// Records the order in which a composite calls it, and appends its tag when signing.
class tagging_validator final : public dht::RecordValidator {
 public:
  tagging_validator(int priority, std::string tag, std::string* log)
      : priority_(priority), tag_(std::move(tag)), log_(log) {}
  bool validate(const dht::DhtRecord& r) const override {
    *log_ += "v" + tag_;
    return r.value.size() >= tag_.size() && r.value.substr(r.value.size() - tag_.size()) == tag_;
  }
  apiary::Result<std::string> sign_value(const dht::DhtRecord& r) const override {
    *log_ += "s" + tag_;
    return r.value + tag_;
  }
  std::string strip_value(const dht::DhtRecord& r) const override {
    return r.value.substr(0, r.value.size() - tag_.size());
  }
  int priority() const override { return priority_; }

 private:
  int priority_;
  std::string tag_;
  std::string* log_;
};

}  // namespace

TEST_CASE("a composite signs upwards and validates downwards", "[dht][validation]") {
  std::string log;
  dht::CompositeValidator composite;
  composite.extend(std::make_unique<tagging_validator>(1, "L", &log));
  composite.extend(std::make_unique<tagging_validator>(5, "H", &log));
  composite.extend(std::make_unique<tagging_validator>(3, "M", &log));
  composite.extend(nullptr);
  CHECK(composite.size() == 3);

  dht::DhtRecord r{"k", dht::k_subkey_regular, "v", 1.0};
  auto value = composite.sign_value(r);
  REQUIRE(value.ok());
  CHECK(*value == "vLMH");
  CHECK(log == "sLsMsH");

  log.clear();
  r.value = *value;
  CHECK(composite.validate(r));
  CHECK(log == "vHvMvL");
  CHECK(composite.strip_value(r) == "v");

  r.value = "vMLH";  // right outer tag, wrong order inside
  CHECK_FALSE(composite.validate(r));
}

TEST_CASE("records owned by an OpenSSH RSA key verify with RSA-PSS, as hivemind signs them", "[dht][validation]") {
  auto rsa = apiary::messages::RsaPrivateKey::generate(2048);
  REQUIRE(rsa.ok());
  auto other = apiary::messages::RsaPrivateKey::generate(2048);
  REQUIRE(other.ok());
  auto reparsed = apiary::messages::RsaPublicKey::from_openssh(rsa->public_key().openssh() + " comment");
  REQUIRE(reparsed.ok());
  CHECK(reparsed->openssh() == rsa->public_key().openssh());
  auto ed = Ed25519PrivateKey::generate();
  REQUIRE(ed.ok());
  const dht::OwnershipValidator validator(*ed);
  dht::DhtRecord record{dht::NodeId::of_str_key("key").to_bytes(),
                        dht::pack_str("[owner:" + rsa->public_key().openssh() + "]"), dht::pack_str("value"),
                        1.7e9};
  auto sign_with = [&](const apiary::messages::RsaPrivateKey& key) {
    auto signature = key.sign_pss(dht::OwnershipValidator::signed_message(record));
    REQUIRE(signature.ok());
    dht::DhtRecord r = record;
    r.value += dht::OwnershipValidator::signature_marker(*signature);
    return r;
  };
  auto good = sign_with(*rsa);
  CHECK(validator.validate(good));
  CHECK(validator.strip_value(good) == record.value);
  CHECK_FALSE(validator.validate(sign_with(*other)));
  CHECK_FALSE(validator.validate(record));
  auto tampered = good;
  tampered.expiration += 1;
  CHECK_FALSE(validator.validate(tampered));
  CHECK_FALSE(apiary::messages::RsaPublicKey::from_openssh("ssh-rsa AAAA").ok());
  CHECK_FALSE(apiary::messages::RsaPublicKey::from_openssh("ssh-ed25519 AAAA").ok());
}

TEST_CASE("an RSA-keyed validator signs its own records as hivemind's RSASignatureValidator", "[dht][validation]") {
  auto rsa = apiary::messages::RsaPrivateKey::generate(2048);
  REQUIRE(rsa.ok());
  auto der = rsa->to_der();
  REQUIRE(der.ok());
  auto restored = apiary::messages::RsaPrivateKey::from_der(*der);
  REQUIRE(restored.ok());
  CHECK(restored->public_key().openssh() == rsa->public_key().openssh());
  CHECK_FALSE(apiary::messages::RsaPrivateKey::from_der(der->substr(0, der->size() / 2)).ok());
  CHECK_FALSE(apiary::messages::RsaPrivateKey::from_der(*der + "x").ok());
  auto ed = Ed25519PrivateKey::generate();
  REQUIRE(ed.ok());
  auto ed_der = apiary::messages::RsaPrivateKey::from_der(ed->seed());
  CHECK_FALSE(ed_der.ok());

  const dht::OwnershipValidator signer(*restored);  // signs as the key it was saved from
  CHECK(signer.own_marker() == "[owner:" + rsa->public_key().openssh() + "]");
  dht::DhtRecord record{dht::NodeId::of_str_key("key").to_bytes(), dht::pack_bin(signer.own_marker()),
                        dht::pack_str("value"), 1.7e9};
  auto signed_value = signer.sign_value(record);
  REQUIRE(signed_value.ok());
  dht::DhtRecord good = record;
  good.value = *signed_value;
  const dht::OwnershipValidator checker(*ed);  // any validator checks any owner's signature
  CHECK(checker.validate(good));
  CHECK(checker.strip_value(good) == record.value);
  // Signing again replaces the signature rather than adding a second one.
  good.value = *signer.sign_value(good);
  CHECK(checker.validate(good));
  // Someone else's record is left unsigned, and unprotected records pass unsigned.
  dht::DhtRecord foreign = record;
  foreign.subkey = dht::pack_bin(dht::OwnershipValidator::owner_marker(ed->public_key()));
  CHECK(*signer.sign_value(foreign) == foreign.value);
  CHECK_FALSE(checker.validate(foreign));
  dht::DhtRecord open = record;
  open.subkey = dht::pack_str("plain");
  CHECK(checker.validate(open));
}

TEST_CASE("merged ownership validators sign with the key each record names", "[dht][validation]") {
  auto rsa = apiary::messages::RsaPrivateKey::generate(2048);
  auto ed = Ed25519PrivateKey::generate();
  auto third = Ed25519PrivateKey::generate();
  REQUIRE(rsa.ok());
  REQUIRE(ed.ok());
  REQUIRE(third.ok());
  dht::OwnershipValidator merged(*ed);
  const dht::OwnershipValidator by_rsa(*rsa);
  REQUIRE(merged.merge_with(by_rsa));
  REQUIRE(merged.merge_with(dht::OwnershipValidator(*ed)));  // the same key again adds nothing
  CHECK(merged.own_marker() == dht::OwnershipValidator::owner_marker(ed->public_key()));
  for (const std::string& marker : {by_rsa.own_marker(), merged.own_marker()}) {
    dht::DhtRecord record{dht::NodeId::of_str_key("k").to_bytes(), dht::pack_bin(marker), dht::pack_str("v"), 1.7e9};
    auto value = merged.sign_value(record);
    REQUIRE(value.ok());
    CHECK(*value != record.value);
    record.value = *value;
    CHECK(dht::OwnershipValidator(*third).validate(record));
  }
  dht::DhtRecord foreign{dht::NodeId::of_str_key("k").to_bytes(),
                         dht::pack_bin(dht::OwnershipValidator::owner_marker(third->public_key())), dht::pack_str("v"),
                         1.7e9};
  CHECK(*merged.sign_value(foreign) == foreign.value);
}
