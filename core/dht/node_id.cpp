#include "core/dht/node_id.hpp"

#include <openssl/sha.h>

#include <cstring>
#include <msgpack.hpp>

namespace apiary::core::dht {
namespace {

/// SHA1 of `data` as an id.
NodeId sha1_id(std::string_view data) {
  NodeId::Bytes digest{};
  static_assert(SHA_DIGEST_LENGTH == k_id_bytes, "ids are SHA1 digests");
  SHA1(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest.data());
  return NodeId(digest);
}

/// Value of one hex digit, or -1.
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<NodeId> NodeId::from_bytes(std::string_view bytes) {
  if (bytes.size() != k_id_bytes) {
    return make_error(errc::invalid_argument,
                      "a DHT id must be {} bytes (big-endian SHA1 size), got {} bytes; pass "
                      "the node_id or key field exactly as sent",
                      k_id_bytes, bytes.size());
  }
  Bytes b{};
  std::memcpy(b.data(), bytes.data(), k_id_bytes);
  return NodeId(b);
}

Result<NodeId> NodeId::from_hex(std::string_view hex) {
  if (hex.size() != 2 * k_id_bytes) {
    return make_error(errc::invalid_argument,
                      "a DHT id in hex must be {} digits, got {} characters ('{}'); write "
                      "all 40 digits, leading zeros included",
                      2 * k_id_bytes, hex.size(), hex);
  }
  Bytes b{};
  for (std::size_t i = 0; i < k_id_bytes; ++i) {
    const int hi = hex_value(hex[2 * i]);
    const int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return make_error(errc::invalid_argument,
                        "a DHT id in hex must hold only 0-9a-f, got '{}' at position {}; "
                        "remove the non-hex characters",
                        hex.substr(2 * i, 2), 2 * i);
    }
    b[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return NodeId(b);
}

NodeId NodeId::of_str_key(std::string_view key) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  packer.pack_str(static_cast<std::uint32_t>(key.size()));
  packer.pack_str_body(key.data(), static_cast<std::uint32_t>(key.size()));
  return sha1_id(std::string_view(buffer.data(), buffer.size()));
}

NodeId NodeId::of_bytes_key(std::string_view key) { return sha1_id(key); }

NodeId NodeId::of_packed_key(std::string_view packed) { return sha1_id(packed); }

NodeId NodeId::max() {
  Bytes b{};
  b.fill(0xff);
  return NodeId(b);
}

std::string NodeId::to_bytes() const {
  return std::string(reinterpret_cast<const char*>(bytes_.data()), bytes_.size());
}

std::string NodeId::to_hex() const {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * k_id_bytes);
  for (const std::uint8_t byte : bytes_) {
    out.push_back(k_digits[byte >> 4]);
    out.push_back(k_digits[byte & 0x0f]);
  }
  return out;
}

bool NodeId::bit(std::size_t index) const {
  return ((bytes_[index / 8] >> (7 - index % 8)) & 1U) != 0;
}

NodeId NodeId::with_bit(std::size_t index, bool value) const {
  Bytes b = bytes_;
  const auto mask = static_cast<std::uint8_t>(1U << (7 - index % 8));
  if (value) {
    b[index / 8] = static_cast<std::uint8_t>(b[index / 8] | mask);
  } else {
    b[index / 8] = static_cast<std::uint8_t>(b[index / 8] & ~mask);
  }
  return NodeId(b);
}

NodeId NodeId::prefix(std::size_t index) const {
  Bytes b = bytes_;
  for (std::size_t i = index; i < k_id_bits; ++i) {
    if (i % 8 == 0) {
      // Whole bytes from here on are cleared at once.
      std::memset(b.data() + i / 8, 0, k_id_bytes - i / 8);
      break;
    }
    b[i / 8] = static_cast<std::uint8_t>(b[i / 8] & ~(1U << (7 - i % 8)));
  }
  return NodeId(b);
}

std::size_t NodeId::common_prefix_length(const NodeId& other) const {
  for (std::size_t i = 0; i < k_id_bytes; ++i) {
    const unsigned diff = static_cast<unsigned>(bytes_[i] ^ other.bytes_[i]);
    if (diff != 0) {
      std::size_t leading = 0;
      for (unsigned mask = 0x80; (diff & mask) == 0; mask >>= 1) ++leading;
      return i * 8 + leading;
    }
  }
  return k_id_bits;
}

}  // namespace apiary::core::dht
