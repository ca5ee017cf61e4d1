// Tensor encoding with CompressionType NONE (hivemind's runtime.proto Tensor) and
// chunked streaming of serialized tensors.
#include <catch2/catch.hpp>

#include <cmath>
#include <complex>
#include <cstring>
#include <string>
#include <vector>

#include "messages/tensor/bfloat16.hpp"
#include "messages/tensor/codec.hpp"
#include "messages/tensor/dtype.hpp"
#include "messages/tensor/streaming.hpp"
#include "messages/tensor/tensor.hpp"

namespace msg = apiary::messages;
namespace pb = apiary::pb;
using apiary::errc;

namespace {

// A tensor whose bytes are a deterministic pattern valid for every dtype (bool: 0/1;
// bfloat16: finite values, so the legacy float32 round trip is exact).
msg::Tensor patterned(msg::dtype type, msg::Shape shape, bool requires_grad = false) {
  auto zeros = msg::Tensor::zeros(type, shape);
  REQUIRE(zeros.ok());
  apiary::Buffer bytes = apiary::Buffer::allocate(zeros->byte_size());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    std::uint8_t b = static_cast<std::uint8_t>(i * 37 + 11);
    if (type == msg::dtype::bool_) b &= 1;
    if (type == msg::dtype::bfloat16 && i % 2 == 1) b &= 0x3f;  // exponent well below max
    bytes.data()[i] = std::byte{b};
  }
  auto t = msg::Tensor::make(type, std::move(shape), bytes, requires_grad);
  REQUIRE(t.ok());
  return *t;
}

pb::Tensor wire(const std::string& dtype, std::vector<std::uint32_t> shape, std::string buffer) {
  pb::Tensor t;
  t.set_dtype(dtype);
  for (auto extent : shape) t.add_size(extent);
  t.set_buffer(std::move(buffer));
  return t;
}

}  // namespace

TEST_CASE("dtype names and element sizes follow torch") {
  const std::vector<std::pair<std::string, std::size_t>> expected = {
      {"float32", 4}, {"float16", 2}, {"bfloat16", 2}, {"float64", 8},
      {"int64", 8},   {"int32", 4},   {"int16", 2},    {"int8", 1},
      {"uint8", 1},   {"bool", 1},    {"complex64", 8}, {"complex128", 16}};
  REQUIRE(std::size(msg::all_dtypes) == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const msg::dtype type = msg::all_dtypes[i];
    CHECK(msg::to_string(type) == expected[i].first);
    CHECK(msg::element_size(type) == expected[i].second);
    auto parsed = msg::parse_dtype(expected[i].first);
    REQUIRE(parsed.ok());
    CHECK(*parsed == type);
  }
  CHECK(msg::parse_dtype("torch.float32").error().code == errc::unsupported);
  CHECK(msg::parse_dtype("float8_e4m3fn").error().code == errc::unsupported);
  CHECK(msg::parse_dtype("").error().code == errc::malformed);
}

TEST_CASE("every dtype round-trips through NONE over many shapes") {
  const std::vector<msg::Shape> shapes = {{}, {1}, {0}, {3, 0, 5}, {7, 1, 3}, {3, 5, 7, 2}, {1000}};
  for (msg::dtype type : msg::all_dtypes) {
    for (const msg::Shape& shape : shapes) {
      for (bool legacy : {true, false}) {
        INFO(msg::to_string(type) << " " << msg::format_shape(shape) << " legacy=" << legacy);
        const msg::Tensor original = patterned(type, shape, /*requires_grad=*/legacy);
        const pb::Tensor encoded = msg::encode_none(original, {legacy});
        CHECK(encoded.dtype() == msg::to_string(type));
        CHECK(encoded.compression() == pb::NONE);
        CHECK(encoded.chunks() == 0);
        CHECK(encoded.requires_grad() == legacy);
        CHECK(msg::Shape(encoded.size().begin(), encoded.size().end()) == shape);
        const std::size_t wide = type == msg::dtype::bfloat16 && legacy ? 2 : 1;
        CHECK(encoded.buffer().size() == original.byte_size() * wide);
        auto decoded = msg::decode(encoded);
        REQUIRE(decoded.ok());
        CHECK(*decoded == original);
      }
    }
  }
}

TEST_CASE("0-d and empty tensors") {
  const msg::Tensor scalar = patterned(msg::dtype::float64, {});
  CHECK(scalar.numel() == 1);
  CHECK(scalar.byte_size() == 8);
  const pb::Tensor encoded = msg::encode_none(scalar);
  CHECK(encoded.size_size() == 0);
  CHECK(encoded.buffer().size() == 8);

  const msg::Tensor empty = patterned(msg::dtype::int32, {4, 0});
  CHECK(empty.numel() == 0);
  CHECK(msg::encode_none(empty).buffer().empty());
  CHECK(msg::Tensor().numel() == 0);
  CHECK(msg::Tensor().shape() == msg::Shape{0});
}

TEST_CASE("bfloat16: legacy float32 bytes and native 2-byte bytes both decode") {
  const float values[] = {1.0f, -2.5f, 0.0f, 3.140625f};
  std::vector<std::uint16_t> halves;
  for (float v : values) halves.push_back(msg::float_to_bfloat16(v));
  auto t = msg::Tensor::copy_of(msg::dtype::bfloat16, {2, 2}, halves.data(), halves.size() * 2);
  REQUIRE(t.ok());

  const pb::Tensor legacy = msg::encode_none(*t);
  REQUIRE(legacy.buffer().size() == 16);
  CHECK(std::memcmp(legacy.buffer().data(), values, 16) == 0);  // exactly the float32 values

  const pb::Tensor native = msg::encode_none(*t, {/*legacy_bfloat16=*/false});
  REQUIRE(native.buffer().size() == 8);
  CHECK(std::memcmp(native.buffer().data(), halves.data(), 8) == 0);

  for (const pb::Tensor* m : {&legacy, &native}) {
    auto decoded = msg::decode(*m);
    REQUIRE(decoded.ok());
    CHECK(*decoded == *t);
  }
}

TEST_CASE("bfloat16: legacy float32 values round to nearest, ties to even") {
  // 1 + 2^-8 lies halfway between 1.0 (0x3f80) and 1.0078125 (0x3f81): even is 0x3f80.
  // 1 + 3*2^-8 lies halfway between 0x3f81 and 0x3f82: even is 0x3f82.
  // 1 + 2^-8 + 2^-20 lies above the half: rounds up to 0x3f81.
  const float values[] = {1.00390625f, 1.01171875f, 1.0039072f};
  std::string buffer(reinterpret_cast<const char*>(values), sizeof values);
  auto decoded = msg::decode(wire("bfloat16", {3}, buffer));
  REQUIRE(decoded.ok());
  const std::uint16_t* out = decoded->data<std::uint16_t>();
  CHECK(out[0] == 0x3f80);
  CHECK(out[1] == 0x3f82);
  CHECK(out[2] == 0x3f81);
  CHECK(msg::bfloat16_to_float(0x3f80) == 1.0f);
  CHECK(std::isnan(msg::bfloat16_to_float(msg::float_to_bfloat16(std::nanf("")))));
}

TEST_CASE("complex64 keeps real and imaginary parts") {
  const std::complex<float> values[] = {{1.5f, -2.0f}, {0.0f, 3.25f}, {-7.0f, 0.5f}};
  auto t = msg::Tensor::copy_of(msg::dtype::complex64, {3}, values, sizeof values);
  REQUIRE(t.ok());
  const pb::Tensor encoded = msg::encode_none(*t);
  CHECK(encoded.dtype() == "complex64");
  CHECK(encoded.buffer().size() == 24);
  auto decoded = msg::decode(encoded);
  REQUIRE(decoded.ok());
  CHECK(decoded->data<std::complex<float>>()[2] == std::complex<float>(-7.0f, 0.5f));
}

TEST_CASE("malformed and unsupported tensors are rejected with a clear error") {
  SECTION("buffer shorter than the shape") {
    auto r = msg::decode(wire("float32", {2, 3}, std::string(20, '\0')));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::malformed);
    CHECK(r.error().message.find("expected 24") != std::string::npos);
  }
  SECTION("buffer longer than the shape") {
    CHECK(msg::decode(wire("int8", {2}, "abc")).error().code == errc::malformed);
  }
  SECTION("0-d tensor without its element") {
    CHECK(msg::decode(wire("int64", {}, "")).error().code == errc::malformed);
  }
  SECTION("bfloat16 with neither 2 nor 4 bytes per element") {
    CHECK(msg::decode(wire("bfloat16", {2}, "abcdef")).error().code == errc::malformed);
  }
  SECTION("unknown dtype") {
    auto r = msg::decode(wire("float128", {1}, std::string(16, '\0')));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::unsupported);
    CHECK(r.error().message.find("float128") != std::string::npos);
  }
  SECTION("missing dtype (a later stream chunk)") {
    CHECK(msg::decode(wire("", {1}, "a")).error().code == errc::malformed);
  }
  SECTION("compression that does not apply to the dtype") {
    pb::Tensor t = wire("int64", {1}, std::string(2, '\0'));
    t.set_compression(pb::FLOAT16);
    auto r = msg::decode(t);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::unsupported);
    CHECK(r.error().message.find("FLOAT16") != std::string::npos);
  }
  SECTION("compression number outside the enum") {
    pb::Tensor t = wire("float32", {1}, std::string(4, '\0'));
    t.set_compression(static_cast<pb::CompressionType>(42));
    CHECK(msg::decode(t).error().code == errc::malformed);
  }
  SECTION("shape whose element count overflows") {
    const std::uint32_t big = 0xffffffffu;
    CHECK(msg::decode(wire("float64", {big, big, big}, "")).error().code == errc::too_large);
  }
  SECTION("Tensor::make with bytes that do not match the shape") {
    auto r = msg::Tensor::make(msg::dtype::int16, {3}, apiary::Buffer::allocate(5));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::invalid_argument);
  }
}

TEST_CASE("a shape parses from comma-separated extents, and anything else is refused", "[tensor]") {
  CHECK(*msg::parse_shape("") == msg::Shape{});
  CHECK(*msg::parse_shape("7") == msg::Shape{7});
  CHECK(*msg::parse_shape("128,64,3") == msg::Shape{128, 64, 3});
  CHECK(*msg::parse_shape("4294967295") == msg::Shape{4294967295u});
  for (const char* bad : {",", "3,", ",3", "3,,4", "-1", "+3", "3 ", "x", "4294967296", "12345678901", "3;4"}) {
    INFO(bad);
    auto r = msg::parse_shape(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::invalid_argument);
  }
}
