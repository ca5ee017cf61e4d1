#pragma once
/// The msgpack forms of DHT values, byte-compatible with hivemind's MSGPackSerializer
/// (reference §1b): tuples are ext 0x40 wrapping a msgpack array, dictionary values are
/// ext 0x50 wrapping [maxsize, latest_expiration_time, [[subkey, value, expiration]...]].
/// Built on msgpack-c++; every decoder takes untrusted bytes and returns a Result.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "core/dht/storage.hpp"
#include "messages/result.hpp"

namespace apiary::core::dht {

/// Ext type code of a tuple (payload: the tuple's elements as a msgpack array).
inline constexpr std::int8_t k_ext_tuple = 0x40;
/// Ext type code of a dictionary value.
inline constexpr std::int8_t k_ext_dictionary = 0x50;

/// StoreRequest subkey tag of a regular value: msgpack nil.
inline const std::string k_subkey_regular("\xc0", 1);
/// StoreRequest subkey tag of a whole dictionary value (all its entries merged): empty.
inline const std::string k_subkey_dictionary;

/// msgpack of a str (what a Python `str` key, subkey or value becomes).
[[nodiscard]] std::string pack_str(std::string_view text);
/// msgpack of a bin (what a Python `bytes` value becomes).
[[nodiscard]] std::string pack_bin(std::string_view bytes);
/// msgpack of a float64 (every Python float).
[[nodiscard]] std::string pack_float(double value);

/// Checks that `packed` is exactly one msgpack object, nothing missing or trailing
/// (e.g. a subkey before it is stored or re-embedded).
[[nodiscard]] Status check_packed(std::string_view packed);

/// Unpacks exactly one msgpack object from untrusted bytes, with sizes bounded by the
/// input length and nesting by `max_depth`; the handle owns the object's memory.
[[nodiscard]] Result<msgpack::object_handle> unpack_one(std::string_view packed,
                                                        std::size_t max_depth = 64);

/// A tuple of already-packed elements as ext 0x40; e.g. ("expert.5", "QmX") from
/// {pack_str("expert.5"), pack_str("QmX")} is c70e4092a86578706572742e35a3516d58.
/// Every element must be one msgpack object (see check_packed).
[[nodiscard]] std::string pack_tuple(const std::vector<std::string>& packed_elements);
/// The packed elements of an ext 0x40 tuple; an error for anything else.
[[nodiscard]] Result<std::vector<std::string>> unpack_tuple(std::string_view packed);

/// The ext 0x50 form of `dictionary`'s entries alive at `now` (ordered by subkey bytes;
/// decoders do not depend on the order): [inf, latest_expiration_time,
/// [[subkey, bin(value), expiration], ...]] with floats as float64 and each subkey
/// embedded as its stored msgpack bytes.
[[nodiscard]] std::string pack_dictionary(DhtTime now, DictionaryValue& dictionary);
/// Decodes an ext 0x50 dictionary value. Every entry is kept, expired ones included
/// (the next access at a given `now` drops them); latest_expiration_time is the
/// larger of the encoded one and the newest entry's.
[[nodiscard]] Result<DictionaryValue> unpack_dictionary(std::string_view packed);
/// As unpack_dictionary, for an object already unpacked (e.g. an element of an array).
[[nodiscard]] Result<DictionaryValue> dictionary_from_object(const msgpack::object& object);

/// A msgpack value as text for people: a str quoted, a bin as hex (0x...), anything else
/// as msgpack-c prints it; bytes that are not one msgpack object as hex with
/// " (not msgpack)".
[[nodiscard]] std::string describe_packed(std::string_view packed);

}  // namespace apiary::core::dht
