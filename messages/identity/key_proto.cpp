#include "messages/identity/key_proto.hpp"

#include <openssl/crypto.h>

#include <optional>

namespace apiary::messages {
namespace {

constexpr std::uint64_t wire_varint = 0;
constexpr std::uint64_t wire_fixed64 = 1;
constexpr std::uint64_t wire_bytes = 2;
constexpr std::uint64_t wire_fixed32 = 5;

/// The two fields of a libp2p PublicKey or PrivateKey message.
struct key_fields {
  std::optional<std::uint64_t> key_type;
  std::optional<std::string_view> data;
};

/// Reads a protobuf varint at `pos`, advancing it; nullopt if truncated or over 64 bits.
std::optional<std::uint64_t> read_varint(std::string_view in, std::size_t& pos) {
  std::uint64_t value = 0;
  for (int shift = 0; shift < 64 && pos < in.size(); shift += 7) {
    auto byte = static_cast<unsigned char>(in[pos++]);
    value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return value;
  }
  return std::nullopt;
}

const char* key_type_name(std::uint64_t type) {
  switch (type) {
    case 0: return "RSA";
    case 1: return "Ed25519";
    case 2: return "Secp256k1";
    case 3: return "ECDSA";
    default: return "unknown";
  }
}

/// Parses the key_type and data fields of `what` ("PublicKey" or "PrivateKey"),
/// skipping unknown fields as protobuf does, and checks the key type is Ed25519.
Result<std::string_view> parse_ed25519_data(std::string_view in, const char* what) {
  key_fields fields;
  std::size_t pos = 0;
  auto malformed = [&](std::string_view problem) {
    return make_error(errc::malformed,
                      "libp2p {}: expected a protobuf message with key_type (field 1) and data "
                      "(field 2), but {} at byte {} of {}; the bytes are not a libp2p key",
                      what, problem, pos, in.size());
  };
  while (pos < in.size()) {
    auto tag = read_varint(in, pos);
    if (!tag) return malformed("a field tag is truncated");
    std::uint64_t field = *tag >> 3;
    std::uint64_t wire = *tag & 7;
    if (field == 0) return malformed("found field number 0");
    if ((field == 1 && wire != wire_varint) || (field == 2 && wire != wire_bytes))
      return malformed(fmt::format("field {} has wire type {}", field, wire));
    if (wire == wire_varint) {
      auto value = read_varint(in, pos);
      if (!value) return malformed("a varint is truncated");
      if (field == 1) fields.key_type = *value;
    } else if (wire == wire_bytes) {
      auto length = read_varint(in, pos);
      if (!length || *length > in.size() - pos)
        return malformed("a length-delimited field overruns the input");
      if (field == 2) fields.data = in.substr(pos, *length);
      pos += *length;
    } else if (wire == wire_fixed64 || wire == wire_fixed32) {
      std::size_t width = wire == wire_fixed64 ? 8 : 4;
      if (width > in.size() - pos) return malformed("a fixed-width field overruns the input");
      pos += width;
    } else {
      return malformed(fmt::format("field {} has unsupported wire type {}", field, wire));
    }
  }
  if (!fields.key_type || !fields.data)
    return malformed(!fields.key_type ? "key_type is missing" : "data is missing");
  if (*fields.key_type != static_cast<std::uint64_t>(libp2p_key_type::ed25519)) {
    return make_error(errc::unsupported,
                      "libp2p {}: expected key type Ed25519 (1), got {} ({}); apiary identities "
                      "are Ed25519 keys, create a new one",
                      what, key_type_name(*fields.key_type), *fields.key_type);
  }
  return *fields.data;
}

std::string encode_key(std::string_view data) {
  std::string out;
  out.reserve(4 + data.size());
  out.push_back(0x08);  // field 1, varint
  out.push_back(static_cast<char>(libp2p_key_type::ed25519));
  out.push_back(0x12);                            // field 2, length-delimited
  out.push_back(static_cast<char>(data.size()));  // < 128: one varint byte
  out.append(data);
  return out;
}

}  // namespace

std::string encode_public_key_proto(const Ed25519PublicKey& key) { return encode_key(key.bytes()); }

Result<Ed25519PublicKey> decode_public_key_proto(std::string_view bytes) {
  auto data = parse_ed25519_data(bytes, "PublicKey");
  if (!data) return data.error();
  if (data->size() != ed25519_public_key_size) {
    return make_error(errc::malformed,
                      "libp2p PublicKey: expected {} bytes of Ed25519 key data, got {}",
                      ed25519_public_key_size, data->size());
  }
  return Ed25519PublicKey::from_bytes(*data);
}

std::string encode_private_key_proto(const Ed25519PrivateKey& key) {
  std::string data = key.seed() + key.public_key().bytes();
  std::string out = encode_key(data);
  OPENSSL_cleanse(data.data(), data.size());
  return out;
}

Result<Ed25519PrivateKey> decode_private_key_proto(std::string_view bytes) {
  auto data = parse_ed25519_data(bytes, "PrivateKey");
  if (!data) return data.error();
  if (data->size() != ed25519_seed_size + ed25519_public_key_size) {
    return make_error(errc::malformed,
                      "libp2p PrivateKey: expected {} bytes of Ed25519 key data (seed then public "
                      "key), got {}",
                      ed25519_seed_size + ed25519_public_key_size, data->size());
  }
  auto key = Ed25519PrivateKey::from_seed(data->substr(0, ed25519_seed_size));
  if (!key) return key.error();
  if (key->public_key().bytes() != data->substr(ed25519_seed_size)) {
    return make_error(errc::malformed,
                      "libp2p PrivateKey: the stored public key does not match the one derived "
                      "from the seed; the key is corrupted, restore it from a backup or create "
                      "a new identity");
  }
  return key;
}

}  // namespace apiary::messages
