// The compressors of messages/tensor/compressors.hpp: fp16 round trips, and error
// feedback keeping the running sum of what was sent close to the exact sum.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "messages/tensor/compressors.hpp"
#include "messages/tensor/float16.hpp"

using namespace apiary;
using namespace apiary::messages;

namespace {

Tensor floats(const std::vector<float>& v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<std::uint32_t>(v.size())};
  auto t = Tensor::copy_of(dtype::float32, shape, v.data(), v.size() * sizeof(float));
  REQUIRE(t.ok());
  return *t;
}

std::vector<float> values(const Tensor& t) {
  REQUIRE(t.type() == dtype::float32);
  return {t.data<float>(), t.data<float>() + t.numel()};
}

}  // namespace

TEST_CASE("NoneCompressor returns its input", "[unit]") {
  NoneCompressor c;
  const Tensor x = floats({1.5f, -2.25f, 1e-9f});
  auto wire = c.compress("w", x);
  REQUIRE(wire.ok());
  CHECK(*wire == x);
  auto back = c.decompress(*wire);
  REQUIRE(back.ok());
  CHECK(*back == x);
}

TEST_CASE("HorovodCompressor sends float16 and returns float32", "[unit]") {
  HorovodCompressor c;
  const Tensor x = floats({1.0f, 0.1f, -3.5f, 1e6f, -1e6f, 1e-3f}, {2, 3});
  auto wire = c.compress("w", x);
  REQUIRE(wire.ok());
  CHECK(wire->type() == dtype::float16);
  CHECK(wire->shape() == Shape{2, 3});
  CHECK(wire->byte_size() == 6 * 2);
  auto back = c.decompress(*wire);
  REQUIRE(back.ok());
  CHECK(back->shape() == Shape{2, 3});
  const auto v = values(*back);
  CHECK(v[0] == 1.0f);
  CHECK(v[1] == half_to_float(float_to_half(0.1f)));
  CHECK(v[2] == -3.5f);
  CHECK(v[3] == 65504.0f);  // clamped, not infinity
  CHECK(v[4] == -65504.0f);
  CHECK(std::abs(v[5] - 1e-3f) < 1e-6f);

  SECTION("other dtypes pass through") {
    auto ints = Tensor::zeros(dtype::int64, {4});
    REQUIRE(ints.ok());
    auto same = c.compress("i", *ints);
    REQUIRE(same.ok());
    CHECK(*same == *ints);
    auto back_ints = c.decompress(*same);
    REQUIRE(back_ints.ok());
    CHECK(*back_ints == *ints);
  }
}

TEST_CASE("HorovodCompressorEF tracks the exact sum far better than plain fp16", "[unit]") {
  // Adding 1e-4 to 1.0: fp16's step near 1.0 is ~1e-3, so plain fp16 sends 1.0 every
  // time and loses all of the increment; error feedback carries it over.
  HorovodCompressor plain;
  HorovodCompressorEF ef;
  const int steps = 10000;
  const float x = 1.0001f;
  double exact = 0.0, sum_plain = 0.0, sum_ef = 0.0;
  for (int i = 0; i < steps; ++i) {
    exact += static_cast<double>(x);
    auto p = plain.compress("g", floats({x}));
    auto e = ef.compress("g", floats({x}));
    REQUIRE(p.ok());
    REQUIRE(e.ok());
    sum_plain += values(*plain.decompress(*p))[0];
    sum_ef += values(*ef.decompress(*e))[0];
  }
  const double err_plain = std::abs(sum_plain - exact);
  const double err_ef = std::abs(sum_ef - exact);
  INFO("exact " << exact << " plain " << sum_plain << " ef " << sum_ef);
  CHECK(err_plain > 0.9);     // ~1.0 lost: 10000 * 1e-4
  CHECK(err_ef < 1e-2);       // bounded by one fp16 step, not growing with steps
  CHECK(err_ef * 100 < err_plain);
}

TEST_CASE("HorovodCompressorEF keeps what rounding lost as the residual", "[unit]") {
  HorovodCompressorEF ef;
  const float x = 0.1f;
  auto wire = ef.compress("a", floats({x, 2.0f}));
  REQUIRE(wire.ok());
  const auto sent = values(*ef.decompress(*wire));
  const auto& r = ef.residual("a");
  REQUIRE(r.size() == 2);
  CHECK(r[0] == x - sent[0]);
  CHECK(r[0] != 0.0f);
  CHECK(r[1] == 0.0f);  // 2.0 is exact in fp16
}

TEST_CASE("HorovodCompressorEF round_in_place gives compress and decompress's bits and residual, block by block",
          "[unit]") {
  // More values than a block, with NaN, infinities, values past the fp16 range and
  // subnormals among them; three steps, so the residual carries.
  std::vector<float> x(5000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * std::pow(10.0f, (i % 13) - 6.0f);
  x[7] = std::nanf("");
  x[8] = INFINITY;
  x[9] = -INFINITY;
  x[10] = 70000.0f;
  x[11] = 1e-7f;
  HorovodCompressorEF tensors, in_place;
  for (int step = 0; step < 3; ++step) {
    auto wire = tensors.compress("g", floats(x));
    REQUIRE(wire.ok());
    const auto expected = values(*tensors.decompress(*wire));
    std::vector<float> got = x;
    REQUIRE(in_place.round_in_place("g", got.data(), got.size()).ok());
    CHECK(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)) == 0);
    const auto& r = in_place.residual("g");
    const auto& want = tensors.residual("g");
    REQUIRE(r.size() == want.size());
    CHECK(std::memcmp(r.data(), want.data(), r.size() * sizeof(float)) == 0);
  }
  // Another count under the same key is refused, naming it; nothing changes.
  std::vector<float> shorter(3, 1.0f);
  auto refused = in_place.round_in_place("g", shorter.data(), shorter.size());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == errc::invalid_argument);
  CHECK(refused.error().message.find("'g'") != std::string::npos);
  CHECK(shorter == std::vector<float>(3, 1.0f));
}

TEST_CASE("HorovodCompressorEF residuals are per key and can be reset", "[unit]") {
  HorovodCompressorEF ef;
  REQUIRE(ef.compress("a", floats({0.1f})).ok());
  const float ra = ef.residual("a")[0];
  // A different key starts from zero: its first step equals plain fp16.
  auto b = ef.compress("b", floats({0.3f}));
  REQUIRE(b.ok());
  CHECK(values(*ef.decompress(*b))[0] == half_to_float(float_to_half(0.3f)));
  CHECK(ef.residual("a")[0] == ra);  // untouched by "b"
  CHECK(ef.size() == 2);

  SECTION("reset of one key") {
    ef.reset("a");
    CHECK(ef.residual("a").empty());
    CHECK_FALSE(ef.residual("b").empty());
    auto again = ef.compress("a", floats({0.1f}));
    REQUIRE(again.ok());
    CHECK(ef.residual("a")[0] == ra);  // same as the very first step
  }
  SECTION("reset of all keys") {
    ef.reset();
    CHECK(ef.size() == 0);
    CHECK(ef.residual("b").empty());
  }
}

TEST_CASE("HorovodCompressorEF rejects what it cannot take", "[unit]") {
  HorovodCompressorEF ef;
  auto ints = Tensor::zeros(dtype::int32, {3});
  REQUIRE(ints.ok());
  auto bad = ef.compress("i", *ints);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == errc::unsupported);
  CHECK(bad.error().message.find("float32") != std::string::npos);

  REQUIRE(ef.compress("s", floats({1.0f, 2.0f})).ok());
  auto reshaped = ef.compress("s", floats({1.0f, 2.0f, 3.0f}));
  REQUIRE_FALSE(reshaped.ok());
  CHECK(reshaped.error().code == errc::invalid_argument);
  CHECK(reshaped.error().message.find("reset") != std::string::npos);
  ef.reset("s");
  CHECK(ef.compress("s", floats({1.0f, 2.0f, 3.0f})).ok());

  auto not_half = ef.decompress(floats({1.0f}));
  REQUIRE_FALSE(not_half.ok());
  CHECK(not_half.error().code == errc::unsupported);
}
