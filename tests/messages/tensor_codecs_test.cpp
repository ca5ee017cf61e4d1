// The lossy tensor codecs: error bounds on random data, zeros, every dtype, and decoders
// refusing buffers that do not hold their layout.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "messages/tensor/codec.hpp"
#include "messages/tensor/codecs.hpp"
#include "messages/tensor/float16.hpp"
#include "tests/messages/tensor_codec_helpers.hpp"

namespace msg = apiary::messages;
namespace pb = apiary::pb;
using apiary::errc;
using apiary::testing::all_compressions;
using apiary::testing::float_tensor;
using apiary::testing::randn;
using apiary::testing::values_of;

namespace {

double mse_after_round_trip(const msg::Tensor& t, pb::CompressionType codec) {
  auto encoded = msg::encode(t, codec);
  REQUIRE(encoded.ok());
  auto decoded = msg::decode(*encoded);
  REQUIRE(decoded.ok());
  REQUIRE(decoded->shape() == t.shape());
  REQUIRE(decoded->type() == t.type());
  const auto a = values_of(t);
  const auto b = values_of(*decoded);
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += (a[i] - b[i]) * (a[i] - b[i]);
  return sum / static_cast<double>(a.size());
}

bool lossy_applies(pb::CompressionType codec, msg::dtype type) {
  if (codec == pb::NONE) return true;
  if (codec == pb::FLOAT16 || codec == pb::MEANSTD_16BIT) {
    return type == msg::dtype::float32 || type == msg::dtype::float16 || type == msg::dtype::float64;
  }
  return msg::is_floating_point(type);
}

}  // namespace

TEST_CASE("codecs keep the error of randn(128, 128, 64) within hivemind's bounds") {
  const msg::Tensor t = float_tensor(randn(128 * 128 * 64), {128, 128, 64});
  CHECK(mse_after_round_trip(t, pb::FLOAT16) < 5e-8);
  CHECK(mse_after_round_trip(t, pb::MEANSTD_16BIT) < 5e-8);
  CHECK(mse_after_round_trip(t, pb::UNIFORM_8BIT) < 8e-4);
  CHECK(mse_after_round_trip(t, pb::QUANTILE_8BIT) < 8e-4);
  CHECK(mse_after_round_trip(t, pb::BLOCKWISE_8BIT) < 8e-4);
  CHECK(mse_after_round_trip(t, pb::NONE) == 0.0);
}

TEST_CASE("zeros decode to finite zeros with every codec") {
  const msg::Tensor t = float_tensor(std::vector<float>(25, 0.0f), {5, 5});
  for (auto codec : all_compressions()) {
    INFO(msg::compression_name(codec));
    auto encoded = msg::encode(t, codec);
    REQUIRE(encoded.ok());
    auto decoded = msg::decode(*encoded);
    REQUIRE(decoded.ok());
    for (double v : values_of(*decoded)) CHECK(v == 0.0);
  }
}

TEST_CASE("tensors with no elements round-trip through every codec") {
  // Found by fuzz_tensor: MEANSTD_16BIT of a shape with a 0 extent copied its (null)
  // statistics with memcpy, undefined behaviour even for 0 bytes.
  for (const msg::Shape& shape : {msg::Shape{0, 5}, msg::Shape{5, 0}, msg::Shape{0}}) {
    const msg::Tensor t = float_tensor({}, shape);
    for (auto codec : all_compressions()) {
      INFO(msg::compression_name(codec) << " of " << shape.size() << "-d shape");
      auto encoded = msg::encode(t, codec);
      REQUIRE(encoded.ok());
      auto decoded = msg::decode(*encoded);
      REQUIRE(decoded.ok());
      CHECK(decoded->shape() == shape);
      CHECK(decoded->numel() == 0);
    }
  }
}

TEST_CASE("a constant tensor survives the 8-bit codecs exactly") {
  const msg::Tensor t = float_tensor(std::vector<float>(10000, 2.5f), {100, 100});
  for (auto codec : {pb::UNIFORM_8BIT, pb::QUANTILE_8BIT, pb::BLOCKWISE_8BIT}) {
    INFO(msg::compression_name(codec));
    CHECK(mse_after_round_trip(t, codec) == 0.0);
  }
}

TEST_CASE("every dtype and codec pair round-trips or is unsupported, naming both") {
  const std::vector<float> values = {0.5f, -1.25f, 3.0f, 0.0f, 7.5f, -2.0f};
  for (msg::dtype type : msg::all_dtypes) {
    auto zeros = msg::Tensor::zeros(type, {2, 3}, true);
    REQUIRE(zeros.ok());
    msg::Tensor t = *zeros;
    if (msg::is_floating_point(type)) {
      // The same values in `type` (all exact in every floating-point dtype).
      std::vector<std::byte> bytes(6 * msg::element_size(type));
      for (std::size_t i = 0; i < 6; ++i) {
        const float v = values[i];
        if (type == msg::dtype::float64) {
          const double d = v;
          std::memcpy(bytes.data() + 8 * i, &d, 8);
        } else if (type == msg::dtype::float16) {
          const std::uint16_t h = msg::float_to_half(v);
          std::memcpy(bytes.data() + 2 * i, &h, 2);
        } else if (type == msg::dtype::bfloat16) {
          const std::uint16_t h = msg::float_to_bfloat16(v);
          std::memcpy(bytes.data() + 2 * i, &h, 2);
        } else {
          std::memcpy(bytes.data() + 4 * i, &v, 4);
        }
      }
      t = *msg::Tensor::copy_of(type, {2, 3}, bytes.data(), bytes.size(), true);
    }
    for (auto codec : all_compressions()) {
      INFO(msg::to_string(type) << " with " << msg::compression_name(codec));
      auto encoded = msg::encode(t, codec);
      if (!lossy_applies(codec, type)) {
        REQUIRE_FALSE(encoded.ok());
        CHECK(encoded.error().code == errc::unsupported);
        CHECK(encoded.error().message.find(msg::compression_name(codec)) != std::string::npos);
        CHECK(encoded.error().message.find(std::string(msg::to_string(type))) != std::string::npos);
        continue;
      }
      REQUIRE(encoded.ok());
      CHECK(encoded->dtype() == msg::to_string(type));
      auto decoded = msg::decode(*encoded);
      REQUIRE(decoded.ok());
      CHECK(decoded->type() == type);
      CHECK(decoded->shape() == t.shape());
      CHECK(decoded->requires_grad());
      if (codec == pb::NONE) {
        CHECK(*decoded == t);
        continue;
      }
      // Every value here is exact in fp16, and each 8-bit bucket holds one value.
      const auto got = values_of(*decoded);
      for (std::size_t i = 0; i < values.size(); ++i) {
        CHECK(got[i] == Approx(values[i]).margin(codec == pb::BLOCKWISE_8BIT ? 0.06 : 1e-3));
      }
    }
  }
}

TEST_CASE("MEANSTD_16BIT refuses 0-d tensors") {
  const msg::Tensor scalar = float_tensor({3.0f}, {});
  auto encoded = msg::encode(scalar, pb::MEANSTD_16BIT);
  REQUIRE_FALSE(encoded.ok());
  CHECK(encoded.error().code == errc::unsupported);
  CHECK(encoded.error().message.find("0-d") != std::string::npos);
  pb::Tensor wire = *msg::encode(scalar, pb::FLOAT16);
  wire.set_compression(pb::MEANSTD_16BIT);
  CHECK(msg::decode(wire).error().code == errc::unsupported);
  // FLOAT16 and the 8-bit codecs take scalars.
  for (auto codec : {pb::FLOAT16, pb::UNIFORM_8BIT, pb::QUANTILE_8BIT, pb::BLOCKWISE_8BIT}) {
    auto back = msg::decode(*msg::encode(scalar, codec));
    REQUIRE(back.ok());
    CHECK(values_of(*back)[0] == Approx(3.0).margin(0.03));
  }
}

TEST_CASE("decoders reject truncated and over-long buffers") {
  // Two BLOCKWISE blocks and several MEANSTD rows.
  const msg::Tensor t = float_tensor(randn(3 * 2000), {3, 2000});
  for (auto codec : all_compressions()) {
    INFO(msg::compression_name(codec));
    const pb::Tensor good = *msg::encode(t, codec);
    const std::size_t size = good.buffer().size();
    for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8},
                            std::size_t{15}, size / 2, size - 1, size + 1}) {
      INFO("buffer of " << cut << " bytes instead of " << size);
      pb::Tensor bad = good;
      std::string buffer = good.buffer();
      buffer.resize(cut, '\0');
      bad.set_buffer(buffer);
      auto r = msg::decode(bad);
      REQUIRE_FALSE(r.ok());
      CHECK(r.error().code == errc::malformed);
    }
  }
}

TEST_CASE("8-bit decoders take any in-band codebook and check its length and indices") {
  pb::Tensor wire;
  wire.set_dtype("float32");
  wire.add_size(4);
  wire.set_compression(pb::UNIFORM_8BIT);
  std::string buffer(8 + 3 * 4 + 4, '\0');
  const std::int64_t len = 3;
  const float codebook[3] = {10.0f, -20.0f, 30.0f};
  const unsigned char idx[4] = {2, 0, 1, 2};
  std::memcpy(buffer.data(), &len, 8);
  std::memcpy(buffer.data() + 8, codebook, 12);
  std::memcpy(buffer.data() + 20, idx, 4);
  wire.set_buffer(buffer);
  for (auto codec : {pb::UNIFORM_8BIT, pb::QUANTILE_8BIT}) {
    wire.set_compression(codec);
    auto decoded = msg::decode(wire);
    REQUIRE(decoded.ok());
    CHECK(values_of(*decoded) == std::vector<double>{30, 10, -20, 30});
  }
  SECTION("an index past the codebook") {
    buffer[20] = 3;
    wire.set_buffer(buffer);
    auto r = msg::decode(wire);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::malformed);
    CHECK(r.error().message.find("outside the codebook") != std::string::npos);
  }
  SECTION("a codebook length outside 1..256") {
    for (std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, std::int64_t{257}}) {
      std::memcpy(buffer.data(), &bad, 8);
      wire.set_buffer(buffer);
      CHECK(msg::decode(wire).error().code == errc::malformed);
    }
  }
  SECTION("a blockwise code table of 2 entries and a wrong absmax count") {
    pb::Tensor b;
    b.set_dtype("float32");
    b.add_size(3);
    b.set_compression(pb::BLOCKWISE_8BIT);
    std::string body(16 + 4 + 8 + 3, '\0');
    const std::int64_t header[2] = {1, 2};
    const float absmax = 2.0f;
    const float code[2] = {-1.0f, 0.5f};
    const unsigned char q[3] = {1, 0, 1};
    std::memcpy(body.data(), header, 16);
    std::memcpy(body.data() + 16, &absmax, 4);
    std::memcpy(body.data() + 20, code, 8);
    std::memcpy(body.data() + 28, q, 3);
    b.set_buffer(body);
    auto decoded = msg::decode(b);
    REQUIRE(decoded.ok());
    CHECK(values_of(*decoded) == std::vector<double>{1.0, -2.0, 1.0});
    const std::int64_t two = 2;
    std::memcpy(body.data(), &two, 8);
    b.set_buffer(body);
    auto r = msg::decode(b);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("expected 1") != std::string::npos);
  }
}

TEST_CASE("float16 conversion is exact both ways and rounds half to even") {
  // Every non-NaN half survives half -> float -> half.
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float f = msg::half_to_float(half);
    if (std::isnan(f)) {
      CHECK(std::isnan(msg::half_to_float(msg::float_to_half(f))));
      continue;
    }
    REQUIRE(msg::float_to_half(f) == half);
  }
  CHECK(msg::float_to_half(0x1p-24f) == 0x0001);          // smallest subnormal
  CHECK(msg::float_to_half(0x1p-25f) == 0x0000);          // tie -> even (0)
  CHECK(msg::float_to_half(0x1.8p-24f) == 0x0002);        // tie -> even (2)
  CHECK(msg::float_to_half(1.0f + 0x1p-11f) == 0x3c00);   // tie -> even
  CHECK(msg::float_to_half(1.0f + 0x1.8p-10f) == 0x3c02); // tie -> even (up)
  CHECK(msg::float_to_half(65519.0f) == 0x7bff);
  CHECK(msg::float_to_half(65520.0f) == 0x7c00);          // overflow -> infinity
  CHECK(msg::float_to_half(-INFINITY) == 0xfc00);
  CHECK(msg::float_to_half(-0.0f) == 0x8000);
}
