// core::dht msgpack values: hivemind's ext 0x40 tuples and ext 0x50 dictionary values,
// checked against golden bytes, round-tripped, and fed malformed input.
#include <catch2/catch.hpp>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/dht/msgpack_value.hpp"

namespace {

using apiary::errc;
using namespace apiary::core::dht;

constexpr double k_t = 1700000000.0;

std::string hex(const std::string& bytes) {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : bytes) {
    out.push_back(k_digits[c >> 4]);
    out.push_back(k_digits[c & 0x0f]);
  }
  return out;
}

std::string unhex(const std::string& h) {
  std::string out;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  }
  return out;
}

}  // namespace

TEST_CASE("scalars encode as Python msgpack does", "[dht][msgpack]") {
  CHECK(hex(pack_str("key")) == "a36b6579");
  CHECK(hex(pack_str(std::string(40, 'x'))).substr(0, 4) == "d928");
  CHECK(hex(pack_bin("yes")) == "c403796573");
  CHECK(hex(pack_float(k_t)) == "cb41d954fc40000000");
  CHECK(hex(pack_float(2.0)) == "cb4000000000000000");  // whole floats stay float64
}

TEST_CASE("tuples are ext 0x40 around an array", "[dht][msgpack]") {
  const std::string packed = pack_tuple({pack_str("expert.5"), pack_str("QmX")});
  CHECK(hex(packed) == "c70e4092a86578706572742e35a3516d58");
  auto elements = unpack_tuple(packed);
  REQUIRE(elements.ok());
  REQUIRE(elements->size() == 2);
  CHECK((*elements)[0] == pack_str("expert.5"));
  CHECK((*elements)[1] == pack_str("QmX"));
  // A list is not a tuple.
  auto list = unpack_tuple(unhex("92a16101"));
  REQUIRE_FALSE(list.ok());
  CHECK(list.error().code == errc::malformed);
  CHECK(list.error().message.find("tuple") != std::string::npos);
  // Nested tuples and an empty one.
  const std::string nested = pack_tuple({pack_tuple({}), pack_bin("")});
  auto back = unpack_tuple(nested);
  REQUIRE(back.ok());
  CHECK((*back)[0] == pack_tuple({}));
  // Floats inside keep their width, whole-valued or not.
  const std::vector<std::string> floats = {pack_float(2.0), std::string("\xca\x40\x00\x00\x00", 5),
                                           "\x92" + pack_float(-1.0) + pack_float(0.5)};
  auto float_back = unpack_tuple(pack_tuple(floats));
  REQUIRE(float_back.ok());
  CHECK(*float_back == floats);
  CHECK(hex(pack_tuple({})) == "d44090");  // one-byte payload: fixext1
}

TEST_CASE("a dictionary value matches the golden FOUND_DICTIONARY bytes", "[dht][msgpack]") {
  DictionaryValue d;
  REQUIRE(d.store(k_t - 10, pack_str("alice"), pack_str("yes"), k_t));
  CHECK(hex(pack_dictionary(k_t - 10, d)) ==
        "c72a5093cb7ff0000000000000cb41d954fc400000009193a5616c696365c404a3796573cb41d954fc"
        "40000000");
}

TEST_CASE("dictionary values round-trip, expired entries included", "[dht][msgpack]") {
  DictionaryValue d;
  REQUIRE(d.store(k_t, pack_str("a"), "1", k_t + 5));
  REQUIRE(d.store(k_t, pack_bin("b"), "2", k_t + 9));
  REQUIRE(d.store(k_t, unhex("cd3039"), "", k_t + 1));  // an int subkey, empty value
  auto back = unpack_dictionary(pack_dictionary(k_t, d));
  REQUIRE(back.ok());
  CHECK(back->latest_expiration_time() == k_t + 9);
  CHECK(back->items(k_t) == d.items(k_t));
  // Entries the sender had are kept until accessed after their expiration.
  CHECK(back->size(k_t + 6) == 1);
  CHECK(back->latest_expiration_time() == k_t + 9);
  // An empty dictionary keeps its latest expiration.
  DictionaryValue empty;
  auto e = unpack_dictionary(pack_dictionary(k_t, empty));
  REQUIRE(e.ok());
  CHECK(e->size(k_t) == 0);
  CHECK(e->latest_expiration_time() == -std::numeric_limits<double>::infinity());
}

TEST_CASE("an array of dictionaries and an int round-trips", "[dht][msgpack]") {
  DictionaryValue d1;
  DictionaryValue d2;
  REQUIRE(d1.store(k_t, pack_str("x"), "1", k_t + 1));
  REQUIRE(d2.store(k_t, pack_str("y"), "2", k_t + 2));
  REQUIRE(d2.store(k_t, pack_str("z"), "3", k_t + 3));
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> p(buffer);
  p.pack_array(3);
  const std::string e1 = pack_dictionary(k_t, d1);
  const std::string e2 = pack_dictionary(k_t, d2);
  buffer.write(e1.data(), e1.size());
  buffer.write(e2.data(), e2.size());
  p.pack(123321);
  auto handle = apiary::core::dht::unpack_one(std::string(buffer.data(), buffer.size()));
  REQUIRE(handle.ok());
  const msgpack::object& array = handle->get();
  REQUIRE(array.type == msgpack::type::ARRAY);
  REQUIRE(array.via.array.size == 3);
  auto b1 = apiary::core::dht::dictionary_from_object(array.via.array.ptr[0]);
  auto b2 = apiary::core::dht::dictionary_from_object(array.via.array.ptr[1]);
  REQUIRE(b1.ok());
  REQUIRE(b2.ok());
  CHECK(b1->items(k_t) == d1.items(k_t));
  CHECK(b2->items(k_t) == d2.items(k_t));
  CHECK(array.via.array.ptr[2].via.u64 == 123321);
}

TEST_CASE("malformed dictionary values are errors, not crashes", "[dht][msgpack]") {
  const auto ext50 = [](const std::string& payload) {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer>(buffer)
        .pack_ext(payload.size(), k_ext_dictionary)
        .pack_ext_body(payload.data(), static_cast<std::uint32_t>(payload.size()));
    return std::string(buffer.data(), buffer.size());
  };
  const std::vector<std::string> bad = {
      "",                                                   // nothing
      unhex("c7"),                                          // truncated header
      unhex("a3796573"),                                    // a str, not an ext
      pack_tuple({pack_str("a")}),                          // the wrong ext type
      ext50(unhex("92cb7ff0000000000000cb41d954fc40000000")),  // two fields
      ext50(unhex("93a178cb41d954fc4000000090")),             // maxsize not a number
      ext50(unhex("93cb7ff0000000000000cb41d954fc40000000a178")),  // entries not an array
      ext50(unhex("93cb7ff0000000000000cb41d954fc400000009193a178a179cb41d954fc40000000")),
      // value is a str, not bin
      ext50(unhex("93cb7ff0000000000000cb41d954fc400000009193a178c40179a27a7a")),
      // expiration not a number
      unhex("dd7fffffff"),                                  // array of 2^31 elements, no data
      pack_dictionary(0, *std::make_unique<DictionaryValue>()) + std::string(1, '\0'),  // trailing
  };
  for (const auto& bytes : bad) {
    INFO("input " << hex(bytes));
    auto r = unpack_dictionary(bytes);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::malformed);
    CHECK_FALSE(r.error().message.empty());
  }
  CHECK_FALSE(apiary::core::dht::check_packed(unhex("a3796")).ok());
  CHECK(apiary::core::dht::check_packed(pack_str("ok")).ok());
}

TEST_CASE("describe_packed shows a str quoted, a bin in hex, other values as msgpack-c prints them",
          "[dht][msgpack]") {
  using apiary::core::dht::describe_packed;
  CHECK(describe_packed(pack_str("ps.ps.localhost:CPU:0")) == "\"ps.ps.localhost:CPU:0\"");
  CHECK(describe_packed(pack_bin(std::string("\x01\xab", 2))) == "0x01ab");
  CHECK(describe_packed(pack_float(0.5)) == "0.5");
  CHECK(describe_packed(unhex("c1")) == "0xc1 (not msgpack)");
}
