#include "messages/identity/ed25519.hpp"

#include <catch2/catch.hpp>

#include "tests/identity/test_hex.hpp"

using apiary::errc;
using apiary::messages::Ed25519PrivateKey;
using apiary::messages::Ed25519PublicKey;
using apiary::test::from_hex;
using apiary::test::to_hex;

TEST_CASE("Ed25519 matches RFC 8032 test vector 1 (empty message)", "[identity][ed25519]") {
  auto key = Ed25519PrivateKey::from_seed(
      from_hex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"));
  REQUIRE(key.ok());
  CHECK(to_hex(key->public_key().bytes()) ==
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
  CHECK(to_hex(key->seed()) == "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
  auto signature = key->sign("");
  REQUIRE(signature.ok());
  CHECK(to_hex(*signature) ==
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e3970"
        "1cf9b46bd25bf5f0595bbe24655141438e7a100b");
  CHECK(key->public_key().verify("", *signature));
}

TEST_CASE("Ed25519 matches RFC 8032 test vector 2 (one byte)", "[identity][ed25519]") {
  auto public_key = Ed25519PublicKey::from_bytes(
      from_hex("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"));
  REQUIRE(public_key.ok());
  std::string signature = from_hex(
      "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0"
      "f11d8c387b2eaeb4302aeeb00d291612bb0c00");
  CHECK(public_key->verify("\x72", signature));
  CHECK_FALSE(public_key->verify("\x73", signature));

  auto key = Ed25519PrivateKey::from_seed(
      from_hex("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb"));
  REQUIRE(key.ok());
  CHECK(key->public_key() == *public_key);
  auto again = key->sign("\x72");
  REQUIRE(again.ok());
  CHECK(*again == signature);
}

TEST_CASE("Ed25519 generated keys sign and verify", "[identity][ed25519]") {
  auto a = Ed25519PrivateKey::generate();
  auto b = Ed25519PrivateKey::generate();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->public_key() != b->public_key());
  CHECK(a->seed().size() == 32);
  CHECK(a->public_key().bytes().size() == 32);

  const std::string message = "apiary DHT store request";
  auto signature = a->sign(message);
  REQUIRE(signature.ok());
  CHECK(signature->size() == 64);
  CHECK(a->public_key().verify(message, *signature));

  SECTION("another key's public key rejects it") {
    CHECK_FALSE(b->public_key().verify(message, *signature));
  }
  SECTION("a changed message is rejected") {
    CHECK_FALSE(a->public_key().verify(message + "!", *signature));
  }
  SECTION("a changed signature is rejected") {
    std::string bad = *signature;
    bad[10] = static_cast<char>(bad[10] ^ 0x01);
    CHECK_FALSE(a->public_key().verify(message, bad));
  }
  SECTION("a signature of the wrong size is rejected") {
    CHECK_FALSE(a->public_key().verify(message, signature->substr(0, 63)));
    CHECK_FALSE(a->public_key().verify(message, *signature + "x"));
    CHECK_FALSE(a->public_key().verify(message, ""));
  }
  SECTION("the seed rebuilds the same key") {
    auto rebuilt = Ed25519PrivateKey::from_seed(a->seed());
    REQUIRE(rebuilt.ok());
    CHECK(rebuilt->public_key() == a->public_key());
    auto same = rebuilt->sign(message);
    REQUIRE(same.ok());
    CHECK(*same == *signature);  // Ed25519 signatures are deterministic
  }
  SECTION("the raw public key rebuilds a verifier") {
    auto verifier = Ed25519PublicKey::from_bytes(a->public_key().bytes());
    REQUIRE(verifier.ok());
    CHECK(verifier->verify(message, *signature));
  }
}

TEST_CASE("Ed25519 rejects keys of the wrong size", "[identity][ed25519]") {
  auto short_seed = Ed25519PrivateKey::from_seed(std::string(31, 'x'));
  REQUIRE_FALSE(short_seed.ok());
  CHECK(short_seed.error().code == errc::invalid_argument);
  CHECK_THAT(short_seed.error().message,
             Catch::Contains("32-byte seed") && Catch::Contains("got 31"));

  auto long_seed = Ed25519PrivateKey::from_seed(std::string(64, 'x'));
  REQUIRE_FALSE(long_seed.ok());
  CHECK_THAT(long_seed.error().message, Catch::Contains("got 64"));

  auto short_public = Ed25519PublicKey::from_bytes(std::string(36, 'x'));
  REQUIRE_FALSE(short_public.ok());
  CHECK(short_public.error().code == errc::invalid_argument);
  CHECK_THAT(short_public.error().message,
             Catch::Contains("expected 32") && Catch::Contains("got 36"));
}
