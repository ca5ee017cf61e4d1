#pragma once
/// DHT identifiers: 160-bit unsigned integers stored as 20 big-endian bytes. Node ids and
/// key ids share the space; closeness is the XOR of two ids read as a number.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <cstdint>
#include <string>
#include <string_view>

#include "messages/result.hpp"

namespace apiary::core::dht {

/// Bytes in an id (SHA1's digest size).
inline constexpr std::size_t k_id_bytes = 20;
/// Bits in an id.
inline constexpr std::size_t k_id_bits = k_id_bytes * 8;

/// A 160-bit DHT id. Ordering is numeric (the big-endian bytes compared in order), so an
/// id and the XOR distance between two ids are the same type.
class NodeId {
 public:
  /// The id's 20 bytes, most significant first.
  using Bytes = std::array<std::uint8_t, k_id_bytes>;

  /// The id 0.
  NodeId() = default;
  /// The id whose big-endian bytes are `bytes`.
  explicit NodeId(const Bytes& bytes) : bytes_(bytes) {}

  /// Parses exactly 20 big-endian bytes (the wire form of NodeInfo.node_id and of keys).
  [[nodiscard]] static Result<NodeId> from_bytes(std::string_view bytes);
  /// Parses 40 hex digits (either case), most significant first.
  [[nodiscard]] static Result<NodeId> from_hex(std::string_view hex);

  /// The id of a string key: SHA1 of the key's msgpack encoding (a msgpack str), so the
  /// key names the same id as in hivemind ("key" -> 88c6f489...).
  [[nodiscard]] static NodeId of_str_key(std::string_view key);
  /// The id of a bytes key: SHA1 of the raw bytes, not msgpack-encoded (as hivemind does
  /// for Python `bytes` keys).
  [[nodiscard]] static NodeId of_bytes_key(std::string_view key);
  /// The id of a key of any type given already msgpack-encoded: SHA1 of `packed`.
  [[nodiscard]] static NodeId of_packed_key(std::string_view packed);

  /// A uniformly random id drawn from `next_u64`, any callable returning 64 random bits
  /// (a std::mt19937_64, or a lambda over the simulator's Rng). Draws three times.
  template <class NextU64>
  [[nodiscard]] static NodeId random(NextU64&& next_u64) {
    Bytes b{};
    for (std::size_t word = 0; word < 3; ++word) {
      const std::uint64_t bits = static_cast<std::uint64_t>(next_u64());
      for (std::size_t i = 0; i < 8; ++i) {
        const std::size_t at = word * 8 + i;
        if (at < k_id_bytes) b[at] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
      }
    }
    return NodeId(b);
  }

  /// The smallest id, 0.
  [[nodiscard]] static NodeId min() { return NodeId(); }
  /// The largest id, 2^160 - 1.
  [[nodiscard]] static NodeId max();

  /// The 20 big-endian bytes.
  [[nodiscard]] const Bytes& bytes() const { return bytes_; }
  /// The 20 big-endian bytes as a byte string (the wire form).
  [[nodiscard]] std::string to_bytes() const;
  /// 40 lowercase hex digits, most significant first.
  [[nodiscard]] std::string to_hex() const;

  /// Bit `index` counted from the most significant (index 0) to the least (159).
  [[nodiscard]] bool bit(std::size_t index) const;
  /// This id with bit `index` (0 = most significant) set to `value`.
  [[nodiscard]] NodeId with_bit(std::size_t index, bool value) const;
  /// This id with every bit from `index` on (0 = most significant) cleared; the
  /// smallest id sharing this id's first `index` bits.
  [[nodiscard]] NodeId prefix(std::size_t index) const;
  /// The first 64 bits as a number (most significant first): ids whose tops differ
  /// order as their tops do.
  [[nodiscard]] std::uint64_t top64() const { return word(0); }
  /// Leading bits this id shares with `other` (160 when equal).
  [[nodiscard]] std::size_t common_prefix_length(const NodeId& other) const;

  /// The XOR distance to `other`, itself an id-sized number.
  [[nodiscard]] NodeId distance(const NodeId& other) const { return *this ^ other; }
  /// Bitwise XOR.
  friend NodeId operator^(const NodeId& a, const NodeId& b) {
    Bytes out{};
    for (std::size_t i = 0; i < k_id_bytes; ++i) out[i] = a.bytes_[i] ^ b.bytes_[i];
    return NodeId(out);
  }

  /// Compared as two 8-byte words and a 4-byte tail, inline (not a memcmp call): hash
  /// sets of ids compare on every lookup.
  friend bool operator==(const NodeId& a, const NodeId& b) {
    return a.raw_word(0) == b.raw_word(0) && a.raw_word(8) == b.raw_word(8) && a.raw_tail() == b.raw_tail();
  }
  friend bool operator!=(const NodeId& a, const NodeId& b) { return !(a == b); }
  /// Big-endian order of the bytes, compared a word at a time: the routing table sorts by
  /// distance on every lookup, and a byte-wise compare (a memcmp call per comparison)
  /// was a twelfth of a DHT node's CPU.
  friend bool operator<(const NodeId& a, const NodeId& b) {
    const std::uint64_t a0 = a.word(0), b0 = b.word(0);
    if (a0 != b0) return a0 < b0;
    const std::uint64_t a1 = a.word(8), b1 = b.word(8);
    if (a1 != b1) return a1 < b1;
    return a.tail() < b.tail();
  }
  friend bool operator>(const NodeId& a, const NodeId& b) { return b < a; }
  friend bool operator<=(const NodeId& a, const NodeId& b) { return !(b < a); }
  friend bool operator>=(const NodeId& a, const NodeId& b) { return !(a < b); }

 private:
  static_assert(k_id_bytes == 20, "operator< compares two 8-byte words and a 4-byte tail");
  /// Bytes at..at+7 / 16..19 in memory order (for equality).
  [[nodiscard]] std::uint64_t raw_word(std::size_t at) const {
    std::uint64_t w;
    std::memcpy(&w, bytes_.data() + at, sizeof w);
    return w;
  }
  [[nodiscard]] std::uint32_t raw_tail() const {
    std::uint32_t w;
    std::memcpy(&w, bytes_.data() + 16, sizeof w);
    return w;
  }
  /// Bytes at..at+7 as a big-endian number.
  [[nodiscard]] std::uint64_t word(std::size_t at) const {
    std::uint64_t w;
    std::memcpy(&w, bytes_.data() + at, sizeof w);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
  }
  /// Bytes 16..19 as a big-endian number.
  [[nodiscard]] std::uint32_t tail() const {
    std::uint32_t w;
    std::memcpy(&w, bytes_.data() + 16, sizeof w);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    w = __builtin_bswap32(w);
#endif
    return w;
  }

  Bytes bytes_{};
};

/// Hash of an id, for unordered containers (ids are uniform, so the first 8 bytes do).
struct NodeIdHash {
  /// The first 8 bytes of `id` as a big-endian number (ids are uniform: no mixing needed).
  std::size_t operator()(const NodeId& id) const {
    std::size_t h = 0;
    for (std::size_t i = 0; i < sizeof h && i < k_id_bytes; ++i) h = (h << 8) | id.bytes()[i];
    return h;
  }
};

}  // namespace apiary::core::dht
