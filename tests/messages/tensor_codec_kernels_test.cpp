// The codec loops against plain reference computations.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "messages/tensor/codec.hpp"
#include "messages/tensor/codec_kernels.hpp"
#include "messages/tensor/codecs.hpp"
#include "tests/messages/tensor_codec_helpers.hpp"

namespace msg = apiary::messages;
namespace kernels = apiary::messages::kernels;
namespace pb = apiary::pb;

namespace {

std::vector<std::uint8_t> reference_search(const std::vector<float>& x, float divisor,
                                           const std::vector<float>& borders) {
  std::vector<std::uint8_t> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float v = x[i] / divisor;
    out[i] = static_cast<std::uint8_t>(
        std::count_if(borders.begin(), borders.end(), [v](float b) { return b < v; }));
  }
  return out;
}

}  // namespace

TEST_CASE("border searches count the borders below each value, both ways") {
  std::vector<float> x = apiary::testing::randn(100003, 7);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = INFINITY;
  x[3] = -INFINITY;
  for (float divisor : {1.0f, 3.5f}) {
    SECTION("quantile borders of the data, divisor " + std::to_string(divisor)) {
      const std::vector<float> borders = msg::quantile_borders(x.data(), x.size());
      const auto expected = reference_search(x, divisor, borders);
      std::vector<std::uint8_t> got(x.size());
      kernels::search_borders(got.data(), x.data(), x.size(), divisor, borders.data());
      CHECK(got == expected);
      kernels::BinnedBorders binned;
      REQUIRE(binned.build(borders.data()));
      std::fill(got.begin(), got.end(), 0);
      binned.search(got.data(), x.data(), x.size(), divisor);
      CHECK(got == expected);
    }
  }
  SECTION("borders with ties and zeros: the table refuses, the search still counts") {
    std::vector<float> borders(255, 0.0f);
    for (std::size_t k = 0; k < 100; ++k) borders[k] = -1.0f + 0.001f * static_cast<float>(k);
    for (std::size_t k = 200; k < 255; ++k) borders[k] = 0.5f + 0.01f * static_cast<float>(k);
    borders[150] = -0.0f;
    std::sort(borders.begin(), borders.end());
    kernels::BinnedBorders binned;
    CHECK_FALSE(binned.build(borders.data()));
    std::vector<std::uint8_t> got(x.size());
    kernels::search_borders(got.data(), x.data(), x.size(), 1.0f, borders.data());
    CHECK(got == reference_search(x, 1.0f, borders));
  }
}

TEST_CASE("encode_into a reused message gives the bytes of a fresh encode") {
  const msg::Tensor big = apiary::testing::float_tensor(apiary::testing::randn(70000, 3), {7, 10000});
  const msg::Tensor small = apiary::testing::float_tensor({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});
  pb::Tensor reused;
  for (const msg::Tensor* t : {&big, &small, &big}) {
    for (auto codec : apiary::testing::all_compressions()) {
      INFO(msg::compression_name(codec) << " of " << t->numel() << " elements");
      REQUIRE(msg::encode_into(*t, codec, reused).ok());
      auto fresh = msg::encode(*t, codec);
      REQUIRE(fresh.ok());
      CHECK(reused.SerializeAsString() == fresh->SerializeAsString());
    }
  }
}

TEST_CASE("float64 and bfloat16 conversions round to nearest even") {
  const std::vector<double> wide = {1.0 + 0x1p-24, 1.0 + 0x1.8p-23, -3.0, 1e300};
  std::vector<float> narrow(wide.size());
  kernels::doubles_to_floats(narrow.data(), wide.data(), wide.size());
  CHECK(narrow[0] == 1.0f);                  // tie -> even
  CHECK(narrow[1] == 1.0f + 0x1p-22f);       // tie -> even (up)
  CHECK(narrow[2] == -3.0f);
  CHECK(std::isinf(narrow[3]));
  const std::vector<float> f = {1.0f + 0x1p-8f, 1.0f + 0x1.8p-7f};
  std::vector<std::uint16_t> b(f.size());
  kernels::floats_to_bfloat16s(b.data(), f.data(), f.size());
  CHECK(b[0] == 0x3f80);
  CHECK(b[1] == 0x3f82);
}

TEST_CASE("the clamped float16 conversion matches the scalar reference on any bits") {
  // Random bit patterns (every class: NaN, infinities, subnormals, overflow) and edges.
  std::mt19937 rng(11);
  std::vector<std::uint32_t> bits(1 << 20);
  for (auto& b : bits) b = rng();
  const std::vector<std::uint32_t> edges = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                            0x7fc00001u, 0xffa00000u, 0x477fe000u, 0x477fefffu,
                                            0x477ff000u, 0xc77ff000u, 0x33000000u, 0x33000001u,
                                            0x387fc000u, 0x38800000u, 0x00000001u, 0x7f7fffffu};
  for (std::size_t i = 0; i < edges.size(); ++i) bits[i] = edges[i];
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * sizeof(float));
  std::vector<std::uint16_t> got(x.size());
  kernels::floats_to_halves_clamped(got.data(), x.data(), x.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    float v = x[i];
    if (!std::isnan(v)) v = std::min(std::max(v, -msg::half_max), msg::half_max);
    mismatches += got[i] != msg::float_to_half(v) ? 1 : 0;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("the mirrored search of the dynamic code table's midpoints counts like the plain one") {
  const std::vector<float>& code = msg::dynamic_code_table();
  std::vector<float> mids(code.size() - 1);
  for (std::size_t k = 0; k + 1 < code.size(); ++k) {
    mids[k] = static_cast<float>((static_cast<double>(code[k]) + code[k + 1]) / 2.0);
  }
  kernels::MirroredBorders mirrored;
  REQUIRE(mirrored.build(mids.data()));
  // Values on, next to and between every border, both signs; zeros, infinities, NaN,
  // subnormals, 1 and beyond; then randn. 4099 values per copy leave a scalar tail.
  std::vector<float> x;
  for (float m : mids) {
    for (float v : {m, std::nextafter(m, 0.0f), std::nextafter(m, 2.0f * m), -m,
                    std::nextafter(-m, 0.0f), std::nextafter(-m, -2.0f * m)}) {
      x.push_back(v);
    }
  }
  for (float v : {0.0f, -0.0f, 1.0f, -1.0f, 1.5f, -1.5f, 1e-30f, -1e-30f, 1e-42f, -1e-42f,
                  INFINITY, -INFINITY, NAN, -NAN, 3e38f, -3e38f}) {
    x.push_back(v);
  }
  const std::vector<float> noise = apiary::testing::randn(4099 * 3, 11);
  x.insert(x.end(), noise.begin(), noise.end());
  for (float divisor : {1.0f, 3.5f, 1e-20f}) {
    auto expected = reference_search(x, divisor, mids);
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i] / divisor)) expected[i] = 0;
    }
    for (std::size_t offset : {std::size_t{0}, std::size_t{13}}) {
      std::vector<std::uint8_t> got(x.size() - offset, 0xAA);
      mirrored.search(got.data(), x.data() + offset, x.size() - offset, divisor);
      CHECK(got == std::vector<std::uint8_t>(expected.begin() + static_cast<std::ptrdiff_t>(offset), expected.end()));
    }
  }
}

TEST_CASE("the mirrored search refuses borders that are not mirrored about zero") {
  const std::vector<float> x = apiary::testing::randn(100003, 7);
  const std::vector<float> borders = msg::quantile_borders(x.data(), x.size());
  kernels::MirroredBorders mirrored;
  CHECK_FALSE(mirrored.build(borders.data()));
  std::vector<float> shifted(255);
  for (std::size_t k = 0; k < 255; ++k) shifted[k] = static_cast<float>(k) - 100.0f;
  CHECK_FALSE(mirrored.build(shifted.data()));
}
