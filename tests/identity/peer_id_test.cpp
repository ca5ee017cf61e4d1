#include "messages/identity/peer_id.hpp"

#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <unordered_set>

#include "messages/identity/base58.hpp"
#include "messages/identity/key_proto.hpp"
#include "tests/identity/test_hex.hpp"

using apiary::errc;
using apiary::messages::Ed25519PrivateKey;
using apiary::messages::PeerId;
using apiary::test::from_hex;
using apiary::test::to_hex;
namespace msg = apiary::messages;

namespace {

constexpr const char* rfc8032_seed =
    "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
constexpr const char* rfc8032_public =
    "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
// Computed independently (Python: cryptography + a plain base58 encoder).
constexpr const char* rfc8032_peer_id = "12D3KooWQK1wnefoLrcVHbbnf5tLzbopUd3K3bFAoJpA7YJgL5pV";
// A well-known RSA-key PeerID (IPFS bootstrap node): sha2-256 multihash.
constexpr const char* rsa_peer_id = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N";

}  // namespace

TEST_CASE("PeerId of the RFC 8032 key is 12D3KooW... and round-trips", "[identity][peer_id]") {
  auto key = Ed25519PrivateKey::from_seed(from_hex(rfc8032_seed));
  REQUIRE(key.ok());
  PeerId id = PeerId::from_public_key(key->public_key());
  CHECK(to_hex(id.bytes()) == std::string("0024080112") + "20" + rfc8032_public);
  CHECK(id.to_string().rfind("12D3KooW", 0) == 0);
  CHECK(id.to_string() == rfc8032_peer_id);
  CHECK_FALSE(id.empty());

  auto parsed = PeerId::from_string(id.to_string());
  REQUIRE(parsed.ok());
  CHECK(*parsed == id);
  auto from_bytes = PeerId::from_bytes(id.bytes());
  REQUIRE(from_bytes.ok());
  CHECK(*from_bytes == id);

  auto inlined = parsed->public_key();
  REQUIRE(inlined.ok());
  CHECK(*inlined == key->public_key());
}

TEST_CASE("PeerIds of generated keys all start with 12D3KooW", "[identity][peer_id]") {
  for (int i = 0; i < 16; ++i) {
    auto key = Ed25519PrivateKey::generate();
    REQUIRE(key.ok());
    std::string text = PeerId::from_public_key(key->public_key()).to_string();
    CAPTURE(text);
    CHECK(text.rfind("12D3KooW", 0) == 0);
    CHECK(text.size() == 52);
  }
}

TEST_CASE("PeerId accepts sha2-256 ids (Qm...) as opaque multihashes", "[identity][peer_id]") {
  auto id = PeerId::from_string(rsa_peer_id);
  REQUIRE(id.ok());
  CHECK(to_hex(id->bytes()) ==
        "12209dff3b17d74cf4d38a50d8b6383e92d181a10395a5e73a726dcccbd21bf6f0b9");
  CHECK(id->to_string() == rsa_peer_id);
  auto key = id->public_key();
  REQUIRE_FALSE(key.ok());
  CHECK(key.error().code == errc::unsupported);
  CHECK_THAT(key.error().message, Catch::Contains(rsa_peer_id));
}

TEST_CASE("PeerId::from_bytes rejects what is not an identity or sha2-256 multihash",
          "[identity][peer_id]") {
  struct bad {
    std::string bytes;
    std::string mentions;
  };
  std::string key_proto = from_hex(std::string("08011220") + rfc8032_public);
  const bad cases[] = {
      {"", "fewer than 2 bytes"},
      {std::string(1, '\0'), "fewer than 2 bytes"},
      {from_hex("1320") + std::string(32, 'a'), "hash code is 0x13"},
      {from_hex("0025") + key_proto, "announces 37 bytes and 36 follow"},
      {from_hex("0023") + key_proto, "announces 35 bytes and 36 follow"},
      {from_hex("0000"), "digest length is 0"},
      {from_hex("002b") + std::string(43, 'k'), "digest length is 43"},
      {from_hex("1220") + std::string(31, 'a'), "announces 32 bytes and 31 follow"},
      {from_hex("1221") + std::string(33, 'a'), "announces 33 bytes and 33 follow"},
  };
  for (const auto& c : cases) {
    CAPTURE(to_hex(c.bytes));
    auto r = PeerId::from_bytes(c.bytes);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::malformed);
    CHECK_THAT(r.error().message, Catch::Contains(c.mentions) && Catch::Contains("multihash"));
  }
}

TEST_CASE("PeerId::from_string gives clear errors", "[identity][peer_id]") {
  auto empty = PeerId::from_string("");
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error().code == errc::malformed);
  CHECK_THAT(empty.error().message, Catch::Contains("empty"));

  auto bad_char = PeerId::from_string("12D3KooW0K1wnefoLrcVHbbnf5tLzbopUd3K3bFAoJpA7YJgL5pV");
  REQUIRE_FALSE(bad_char.ok());
  CHECK(bad_char.error().code == errc::malformed);
  CHECK_THAT(bad_char.error().message, Catch::Contains("'0' at position 8"));

  auto truncated = PeerId::from_string(std::string(rfc8032_peer_id).substr(0, 40));
  REQUIRE_FALSE(truncated.ok());
  CHECK(truncated.error().code == errc::malformed);
  CHECK_THAT(truncated.error().message, Catch::Contains("PeerID"));
}

TEST_CASE("PeerId orders and hashes by bytes", "[identity][peer_id]") {
  auto a = PeerId::from_bytes(from_hex("1220") + std::string(32, '\x01'));
  auto b = PeerId::from_bytes(from_hex("1220") + std::string(32, '\x02'));
  auto key = Ed25519PrivateKey::generate();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(key.ok());
  PeerId c = PeerId::from_public_key(key->public_key());  // 0x00 prefix sorts first

  CHECK(*a < *b);
  CHECK(*b > *a);
  CHECK(c < *a);
  CHECK(*a <= *a);
  CHECK(*a >= *a);
  CHECK(*a != *b);
  CHECK(PeerId() < c);

  std::set<PeerId> ordered{*b, *a, c};
  CHECK(std::vector<PeerId>(ordered.begin(), ordered.end()) == std::vector<PeerId>{c, *a, *b});

  std::unordered_set<PeerId> hashed{*a, *b, c, *a};
  CHECK(hashed.size() == 3);
  CHECK(hashed.count(*PeerId::from_string(b->to_string())) == 1);
  CHECK(std::hash<PeerId>{}(*a) == std::hash<PeerId>{}(*PeerId::from_bytes(a->bytes())));
}

TEST_CASE("libp2p PublicKey encoding of an Ed25519 key", "[identity][peer_id]") {
  auto key = Ed25519PrivateKey::from_seed(from_hex(rfc8032_seed));
  REQUIRE(key.ok());
  std::string encoded = msg::encode_public_key_proto(key->public_key());
  CHECK(to_hex(encoded) == std::string("08011220") + rfc8032_public);
  auto decoded = msg::decode_public_key_proto(encoded);
  REQUIRE(decoded.ok());
  CHECK(*decoded == key->public_key());

  // Same fields in the other order, as another protobuf encoder may write them.
  auto reordered =
      msg::decode_public_key_proto(from_hex(std::string("1220") + rfc8032_public + "0801"));
  REQUIRE(reordered.ok());
  CHECK(*reordered == key->public_key());

  auto secp = msg::decode_public_key_proto(from_hex("0802") + encoded.substr(2));
  REQUIRE_FALSE(secp.ok());
  CHECK(secp.error().code == errc::unsupported);
  CHECK_THAT(secp.error().message, Catch::Contains("Secp256k1"));

  auto truncated = msg::decode_public_key_proto(encoded.substr(0, 20));
  REQUIRE_FALSE(truncated.ok());
  CHECK(truncated.error().code == errc::malformed);

  auto no_type = msg::decode_public_key_proto(encoded.substr(2));
  REQUIRE_FALSE(no_type.ok());
  CHECK_THAT(no_type.error().message, Catch::Contains("key_type is missing"));
}
