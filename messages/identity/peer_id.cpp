#include "messages/identity/peer_id.hpp"

#include "messages/identity/base58.hpp"
#include "messages/identity/key_proto.hpp"

namespace apiary::messages {
namespace {

/// Hex of the first bytes of `bytes`, for error messages.
std::string hex_prefix(std::string_view bytes) {
  std::string out;
  for (std::size_t i = 0; i < bytes.size() && i < 8; ++i)
    out += fmt::format("{:02x}", static_cast<unsigned char>(bytes[i]));
  if (bytes.size() > 8) out += "...";
  return out;
}

}  // namespace

PeerId PeerId::from_public_key(const Ed25519PublicKey& key) {
  std::string key_proto = encode_public_key_proto(key);
  std::string bytes;
  bytes.reserve(2 + key_proto.size());
  bytes.push_back(static_cast<char>(multihash_identity));
  bytes.push_back(static_cast<char>(key_proto.size()));  // 36 < 128: one varint byte
  bytes += key_proto;
  return PeerId(std::move(bytes));
}

Result<PeerId> PeerId::from_bytes(std::string_view bytes) {
  auto malformed = [&](std::string_view problem) {
    return make_error(errc::malformed,
                      "PeerID: expected a multihash (identity 0x00 <len> <key>, or sha2-256 0x12 "
                      "0x20 <32 bytes>), but {} in the {} bytes {}; the id is corrupted or not a "
                      "libp2p PeerID",
                      problem, bytes.size(), hex_prefix(bytes));
  };
  if (bytes.size() < 2) return malformed("there are fewer than 2 bytes");
  auto code = static_cast<unsigned char>(bytes[0]);
  auto length = static_cast<unsigned char>(bytes[1]);
  std::size_t digest_size = bytes.size() - 2;
  if (code == multihash_identity) {
    if (length == 0 || length > max_inline_key_size)
      return malformed(fmt::format("the identity digest length is {} (expected 1-{})", length,
                                   max_inline_key_size));
    if (digest_size != length)
      return malformed(
          fmt::format("the identity digest announces {} bytes and {} follow", length, digest_size));
  } else if (code == multihash_sha2_256) {
    if (length != 32 || digest_size != 32)
      return malformed(
          fmt::format("the sha2-256 digest announces {} bytes and {} follow "
                      "(expected 32)",
                      length, digest_size));
  } else {
    return malformed(fmt::format("the hash code is 0x{:02x}", code));
  }
  return PeerId(std::string(bytes));
}

Result<PeerId> PeerId::from_string(std::string_view text) {
  if (text.empty()) {
    return make_error(errc::malformed,
                      "PeerID: expected base58btc text such as \"12D3KooW...\" "
                      "or \"Qm...\", got an empty string");
  }
  auto bytes = base58_decode(text);
  if (!bytes) {
    return make_error(errc::malformed, "PeerID: {}", bytes.error().message);
  }
  auto id = from_bytes(*bytes);
  if (!id) {
    return make_error(errc::malformed, "PeerID \"{}\": {}", text.substr(0, 80), id.error().message);
  }
  return id;
}

std::string PeerId::to_string() const { return base58_encode(bytes_); }

Result<Ed25519PublicKey> PeerId::public_key() const {
  if (bytes_.empty() || static_cast<unsigned char>(bytes_[0]) != multihash_identity) {
    return make_error(errc::unsupported,
                      "PeerID {}: expected an id with an inlined key (identity multihash, "
                      "\"12D3KooW...\"), got a hashed id; obtain the peer's public key from "
                      "the peer itself",
                      empty() ? std::string("(empty)") : to_string());
  }
  auto key = decode_public_key_proto(std::string_view(bytes_).substr(2));
  if (!key) return make_error(key.error().code, "PeerID {}: {}", to_string(), key.error().message);
  return key;
}

}  // namespace apiary::messages
