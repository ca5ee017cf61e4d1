#include "core/dht/msgpack_value.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <sstream>
#include <type_traits>
#include <utility>

namespace apiary::core::dht {
namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

std::string to_string(const msgpack::sbuffer& buffer) {
  return std::string(buffer.data(), buffer.size());
}

std::uint32_t size32(std::size_t n) { return static_cast<std::uint32_t>(n); }

/// Writes `value` as the msgpack float of its width: 0xca (float32) or 0xcb (float64),
/// then the IEEE-754 bits big-endian.
template <class Float>
void write_float(msgpack::sbuffer& out, Float value) {
  static_assert(sizeof(Float) == 4 || sizeof(Float) == 8, "expected float or double");
  using Bits = std::conditional_t<sizeof(Float) == 8, std::uint64_t, std::uint32_t>;
  Bits bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  char bytes[1 + sizeof bits];
  bytes[0] = static_cast<char>(sizeof bits == 8 ? 0xcb : 0xca);
  for (std::size_t i = 0; i < sizeof bits; ++i) {
    bytes[1 + i] = static_cast<char>(bits >> (8 * (sizeof bits - 1 - i)));
  }
  out.write(bytes, sizeof bytes);
}

/// Writes `value` as msgpack float64 (0xcb, then the IEEE-754 bits big-endian), as
/// Python's msgpack does for every float. msgpack-c++ 4.1's pack_double writes whole
/// numbers as integers instead, which would change the bytes and hence the hashes and
/// signatures computed over them.
void write_float64(msgpack::sbuffer& out, double value) { write_float(out, value); }

/// The number in `o` (any msgpack int or float), or nothing.
std::optional<double> number_of(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::POSITIVE_INTEGER: return static_cast<double>(o.via.u64);
    case msgpack::type::NEGATIVE_INTEGER: return static_cast<double>(o.via.i64);
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return o.via.f64;
    default: return std::nullopt;
  }
}

/// Appends the msgpack bytes of an unpacked object. Floats keep their width (msgpack-c++
/// would write whole-valued ones as integers); everything else is packed as is.
void repack_into(msgpack::sbuffer& out, const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::FLOAT64:
      write_float64(out, o.via.f64);
      return;
    case msgpack::type::FLOAT32:
      write_float(out, static_cast<float>(o.via.f64));
      return;
    case msgpack::type::ARRAY:
      Packer(out).pack_array(o.via.array.size);
      for (std::uint32_t i = 0; i < o.via.array.size; ++i) repack_into(out, o.via.array.ptr[i]);
      return;
    case msgpack::type::MAP:
      Packer(out).pack_map(o.via.map.size);
      for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
        repack_into(out, o.via.map.ptr[i].key);
        repack_into(out, o.via.map.ptr[i].val);
      }
      return;
    default:
      msgpack::pack(out, o);
  }
}

/// The msgpack bytes of an unpacked object.
std::string repack(const msgpack::object& o) {
  msgpack::sbuffer buffer;
  repack_into(buffer, o);
  return to_string(buffer);
}

/// The ext object of type `code` in `o`, or an error naming what came instead.
Status expect_ext(const msgpack::object& o, std::int8_t code, const char* what) {
  if (o.type != msgpack::type::EXT || o.via.ext.type() != code) {
    return make_error(errc::malformed,
                      "expected a {} (msgpack ext type 0x{:02x}), got msgpack type {}{}; "
                      "the sender must encode it as hivemind's MSGPackSerializer does",
                      what, code, static_cast<int>(o.type),
                      o.type == msgpack::type::EXT
                          ? fmt::format(" with ext type 0x{:02x}", o.via.ext.type())
                          : std::string());
  }
  return ok_status();
}

Error malformed_dictionary(const char* detail) {
  return make_error(errc::malformed,
                    "a dictionary value must be ext 0x50 of [maxsize, latest_expiration_time, "
                    "[[subkey, bin value, expiration], ...]]; {}; re-encode the value",
                    detail);
}

}  // namespace

std::string pack_str(std::string_view text) {
  msgpack::sbuffer buffer;
  Packer(buffer).pack_str(size32(text.size())).pack_str_body(text.data(), size32(text.size()));
  return to_string(buffer);
}

std::string pack_bin(std::string_view bytes) {
  msgpack::sbuffer buffer;
  Packer(buffer).pack_bin(size32(bytes.size())).pack_bin_body(bytes.data(),
                                                              size32(bytes.size()));
  return to_string(buffer);
}

std::string pack_float(double value) {
  msgpack::sbuffer buffer;
  write_float64(buffer, value);
  return to_string(buffer);
}

Result<msgpack::object_handle> unpack_one(std::string_view packed, std::size_t max_depth) {
  // No container or string can declare more elements or bytes than the input holds.
  const std::size_t n = packed.size();
  const msgpack::unpack_limit limit(n, n, n, n, n, max_depth);
  std::size_t offset = 0;
  msgpack::object_handle handle;
  try {
    handle = msgpack::unpack(packed.data(), n, offset, nullptr, nullptr, limit);
  } catch (const std::exception& e) {
    return make_error(errc::malformed,
                      "expected one msgpack object, could not parse {} bytes ({}); check the "
                      "value's encoding",
                      n, e.what());
  }
  if (offset != n) {
    return make_error(errc::malformed,
                      "expected exactly one msgpack object, got {} trailing bytes after the "
                      "first {}; send one value per field",
                      n - offset, offset);
  }
  return handle;
}

Status check_packed(std::string_view packed) {
  auto handle = unpack_one(packed);
  if (!handle.ok()) return handle.error();
  return ok_status();
}

std::string pack_tuple(const std::vector<std::string>& packed_elements) {
  msgpack::sbuffer payload;
  Packer(payload).pack_array(size32(packed_elements.size()));
  for (const auto& element : packed_elements) payload.write(element.data(), element.size());
  msgpack::sbuffer buffer;
  Packer(buffer).pack_ext(payload.size(), k_ext_tuple).pack_ext_body(payload.data(),
                                                                     size32(payload.size()));
  return to_string(buffer);
}

Result<std::vector<std::string>> unpack_tuple(std::string_view packed) {
  auto handle = unpack_one(packed);
  if (!handle.ok()) return handle.error();
  const msgpack::object& o = handle->get();
  if (auto s = expect_ext(o, k_ext_tuple, "tuple"); !s.ok()) return s.error();
  auto inner = unpack_one(std::string_view(o.via.ext.data(), o.via.ext.size));
  if (!inner.ok()) return inner.error();
  const msgpack::object& array = inner->get();
  if (array.type != msgpack::type::ARRAY) {
    return make_error(errc::malformed,
                      "a tuple's ext 0x40 payload must be a msgpack array, got msgpack type "
                      "{}; encode the tuple's elements as a list inside the ext",
                      static_cast<int>(array.type));
  }
  std::vector<std::string> out;
  out.reserve(array.via.array.size);
  for (std::uint32_t i = 0; i < array.via.array.size; ++i) {
    out.push_back(repack(array.via.array.ptr[i]));
  }
  return out;
}

std::string pack_dictionary(DhtTime now, DictionaryValue& dictionary) {
  const auto entries = dictionary.items(now);
  msgpack::sbuffer payload;
  Packer p(payload);
  p.pack_array(3);
  write_float64(payload, DictionaryValue::maxsize());
  write_float64(payload, dictionary.latest_expiration_time());
  p.pack_array(size32(entries.size()));
  for (const auto& [subkey, entry] : entries) {
    // [subkey as stored (already msgpack), bin(value), float64 expiration]
    p.pack_array(3);
    payload.write(subkey.data(), subkey.size());
    p.pack_bin(size32(entry.value.size()));
    p.pack_bin_body(entry.value.data(), size32(entry.value.size()));
    write_float64(payload, entry.expiration_time);
  }
  msgpack::sbuffer buffer;
  Packer(buffer).pack_ext(payload.size(), k_ext_dictionary)
      .pack_ext_body(payload.data(), size32(payload.size()));
  return to_string(buffer);
}

Result<DictionaryValue> unpack_dictionary(std::string_view packed) {
  auto handle = unpack_one(packed);
  if (!handle.ok()) return handle.error();
  return dictionary_from_object(handle->get());
}

Result<DictionaryValue> dictionary_from_object(const msgpack::object& object) {
  if (auto s = expect_ext(object, k_ext_dictionary, "dictionary value"); !s.ok()) {
    return s.error();
  }
  auto inner = unpack_one(std::string_view(object.via.ext.data(), object.via.ext.size));
  if (!inner.ok()) return inner.error();
  const msgpack::object& top = inner->get();
  if (top.type != msgpack::type::ARRAY || top.via.array.size != 3) {
    return malformed_dictionary("the payload is not a 3-element array");
  }
  const msgpack::object* fields = top.via.array.ptr;
  const auto latest = number_of(fields[1]);
  if (!number_of(fields[0]) || !latest || std::isnan(*latest)) {
    return malformed_dictionary("maxsize or latest_expiration_time is not a number");
  }
  if (fields[2].type != msgpack::type::ARRAY) {
    return malformed_dictionary("the entries are not an array");
  }
  DictionaryValue out;
  // Frozen: expired entries are kept, as the sender had them; access will drop them.
  out.freeze();
  for (std::uint32_t i = 0; i < fields[2].via.array.size; ++i) {
    const msgpack::object& e = fields[2].via.array.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size != 3) {
      return malformed_dictionary("an entry is not a 3-element array");
    }
    const msgpack::object& value = e.via.array.ptr[1];
    const auto expiration = number_of(e.via.array.ptr[2]);
    if (value.type != msgpack::type::BIN) {
      return malformed_dictionary("an entry's value is not bin (bytes)");
    }
    if (!expiration || std::isnan(*expiration)) {
      return malformed_dictionary("an entry's expiration is not a number");
    }
    // A repeated subkey: newest wins, as for any store.
    (void)out.store(*expiration, repack(e.via.array.ptr[0]),
                    std::string(value.via.bin.ptr, value.via.bin.size), *expiration);
  }
  out.unfreeze();
  out.raise_latest_expiration_time(*latest);
  return out;
}

std::string describe_packed(std::string_view packed) {
  auto handle = unpack_one(packed);
  if (!handle) {
    std::string hex = "0x";
    for (unsigned char c : packed) hex += fmt::format("{:02x}", c);
    return hex + " (not msgpack)";
  }
  const msgpack::object& o = handle->get();
  if (o.type == msgpack::type::STR) return "\"" + std::string(o.via.str.ptr, o.via.str.size) + "\"";
  if (o.type == msgpack::type::BIN) {
    std::string hex = "0x";
    for (std::uint32_t i = 0; i < o.via.bin.size; ++i) hex += fmt::format("{:02x}", static_cast<unsigned char>(o.via.bin.ptr[i]));
    return hex;
  }
  std::ostringstream out;
  out << o;
  return out.str();
}

}  // namespace apiary::core::dht
