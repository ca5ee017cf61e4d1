#pragma once
/// ProtoReader: reads the fields of a serialized protobuf message one by one, without
/// protobuf, for the fast paths that decode big float arrays straight from the wire
/// (core/averaging/allreduce_fastwire.cpp, core/ps/wire.cpp); with the wire types and
/// varint_size, which those paths also use to write messages. Anything it cannot read
/// (a truncated varint or field, a tag or length varint longer than 5 bytes, which
/// protobuf refuses, a field number of 0, a group) makes field() return false; those
/// paths then fall back to protobuf, which says why. A tag is read as protobuf reads it:
/// 32 bits, so that both see the same fields.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace apiary::core {

/// Protobuf wire types.
inline constexpr std::uint32_t k_wire_varint = 0;
inline constexpr std::uint32_t k_wire_fixed64 = 1;
inline constexpr std::uint32_t k_wire_len = 2;
inline constexpr std::uint32_t k_wire_fixed32 = 5;

/// Bytes of `v` as a base-128 varint (1 to 10).
inline std::size_t varint_size(std::uint64_t v) {
  std::size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

/// Reads fields from [p, end).
struct ProtoReader {
  const char* p;
  const char* end;

  /// A base-128 varint of at most `max_bytes` bytes (10: any 64-bit value; 5: a 32-bit
  /// tag or length, as protobuf reads them); false when it runs past the end or that.
  bool varint(std::uint64_t& v, int max_bytes = 10) {
    v = 0;
    for (int shift = 0; shift < 7 * max_bytes && p < end; shift += 7) {
      const auto byte = static_cast<unsigned char>(*p++);
      v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }

  /// The next field: its number and wire type; for k_wire_len its bytes, else its value.
  bool field(std::uint32_t& number, std::uint32_t& wire, std::string_view& bytes, std::uint64_t& value) {
    std::uint64_t tag = 0;
    if (!varint(tag, 5)) return false;
    tag &= 0xffffffffU;  // a tag is a 32-bit varint: protobuf drops the bits of a 5th byte past 32
    if ((tag >> 3) == 0) return false;
    number = static_cast<std::uint32_t>(tag >> 3);
    wire = static_cast<std::uint32_t>(tag & 7);
    switch (wire) {
      case k_wire_varint: return varint(value);
      case k_wire_fixed64:
        if (end - p < 8) return false;
        std::memcpy(&value, p, 8);
        p += 8;
        return true;
      case k_wire_fixed32: {
        if (end - p < 4) return false;
        std::uint32_t v32 = 0;
        std::memcpy(&v32, p, 4);
        value = v32;
        p += 4;
        return true;
      }
      case k_wire_len: {
        std::uint64_t size = 0;
        if (!varint(size, 5) || size > static_cast<std::uint64_t>(end - p)) return false;
        bytes = std::string_view(p, size);
        p += size;
        return true;
      }
      default: return false;  // groups
    }
  }
};

}  // namespace apiary::core
