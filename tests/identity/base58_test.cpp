#include "messages/identity/base58.hpp"

#include <catch2/catch.hpp>
#include <string>

using apiary::errc;
using apiary::messages::base58_decode;
using apiary::messages::base58_encode;

namespace {

std::string bytes_of(std::initializer_list<unsigned char> list) {
  return std::string(list.begin(), list.end());
}

}  // namespace

TEST_CASE("base58 known vectors", "[identity][base58]") {
  struct vector {
    std::string bytes;
    std::string text;
  };
  const vector vectors[] = {
      {"", ""},
      {bytes_of({0x00}), "1"},
      {bytes_of({0x00, 0x00, 0x01}), "112"},
      {bytes_of({0x39}), "z"},
      {bytes_of({0x3a}), "21"},
      {"Hello World!", "2NEpo7TZRRrLZSi2U"},
      {"The quick brown fox jumps over the lazy dog",
       "7DdiPPYtxLjCD3wA1po2rvZHTDYjkZYiEtazrfiwJcwnKCizhGFhBGHeRdx"},
      {bytes_of({0x00, 0x00, 0x28, 0x7f, 0xb4, 0xcd}), "11233QC4"},
      {bytes_of({0xff, 0xff}), "LUv"},
  };
  for (const auto& v : vectors) {
    CAPTURE(v.text);
    CHECK(base58_encode(v.bytes) == v.text);
    auto decoded = base58_decode(v.text);
    REQUIRE(decoded.ok());
    CHECK(*decoded == v.bytes);
  }
}

TEST_CASE("base58 keeps every leading zero byte", "[identity][base58]") {
  for (std::size_t zeros = 0; zeros < 5; ++zeros) {
    std::string bytes(zeros, '\0');
    bytes += "\x01\x00\x02";
    bytes.push_back('\0');
    std::string text = base58_encode(bytes);
    CHECK(text.substr(0, zeros) == std::string(zeros, '1'));
    CHECK(text.at(zeros) != '1');
    auto back = base58_decode(text);
    REQUIRE(back.ok());
    CHECK(*back == bytes);
  }
  auto only_zeros = base58_decode("1111");
  REQUIRE(only_zeros.ok());
  CHECK(*only_zeros == std::string(4, '\0'));
}

TEST_CASE("base58 round-trips every byte value", "[identity][base58]") {
  std::string all;
  for (int i = 255; i >= 0; --i) all.push_back(static_cast<char>(i));
  auto back = base58_decode(base58_encode(all));
  REQUIRE(back.ok());
  CHECK(*back == all);
}

TEST_CASE("base58 names the first invalid character and its position", "[identity][base58]") {
  struct bad {
    std::string text;
    std::string mentions;
  };
  const bad cases[] = {
      {"abc0def", "'0' at position 3"}, {"Oxyz", "'O' at position 0"},
      {"12I", "'I' at position 2"},     {"zl", "'l' at position 1"},
      {"ab cd", "' ' at position 2"},   {std::string("ab\ncd"), "byte 0x0a at position 2"},
      {"xy+", "'+' at position 2"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    auto r = base58_decode(c.text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::malformed);
    CHECK_THAT(r.error().message, Catch::Contains(c.mentions));
    CHECK_THAT(r.error().message, Catch::Contains("bitcoin alphabet"));
  }
}
