// Golden bytes: small tensors whose encodings were worked out by hand from the layouts of
// shared/reference/hivemind.md section 4 (all little-endian).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "messages/tensor/codec.hpp"
#include "messages/tensor/codecs.hpp"
#include "tests/messages/tensor_codec_helpers.hpp"

namespace msg = apiary::messages;
namespace pb = apiary::pb;
using apiary::testing::float_tensor;
using apiary::testing::hex;
using apiary::testing::values_of;

namespace {

std::string bytes(std::initializer_list<int> list) {
  std::string out;
  for (int b : list) out += static_cast<char>(b);
  return out;
}

// Codebook of 256 float32 entries, all zero but the listed (index, 4 LE bytes) ones.
std::string codebook(const std::vector<std::pair<std::size_t, std::string>>& entries) {
  std::string out(256 * 4, '\0');
  for (const auto& [index, value] : entries) out.replace(index * 4, 4, value);
  return out;
}

pb::Tensor encoded(const msg::Tensor& t, pb::CompressionType codec) {
  auto r = msg::encode(t, codec);
  REQUIRE(r.ok());
  CHECK(r->dtype() == "float32");
  CHECK(r->compression() == codec);
  return *r;
}

}  // namespace

TEST_CASE("FLOAT16 golden bytes: clamped, rounded halves") {
  // 1, -2, 0.5, 1e5 (clamped to 65504 = 0x7bff), 2^-24 (smallest subnormal), 3.
  const msg::Tensor t = float_tensor({1.0f, -2.0f, 0.5f, 1e5f, 0x1p-24f, 3.0f}, {2, 3});
  const pb::Tensor wire = encoded(t, pb::FLOAT16);
  CHECK(hex(wire.buffer()) ==
        hex(bytes({0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x42})));
  CHECK(wire.size_size() == 2);
  CHECK(values_of(*msg::decode(wire)) == std::vector<double>{1, -2, 0.5, 65504, 0x1p-24, 3});
}

TEST_CASE("MEANSTD_16BIT golden bytes: halves, then means, then stds") {
  // Row [1, 3]: mean 2, centred [-1, 1], std sqrt(2 / 2) = 1 -> halves -1, 1.
  // Row [5, 5]: mean 5, centred [0, 0], std 0 clamped to 2^-23 -> halves 0, 0.
  const msg::Tensor t = float_tensor({1.0f, 3.0f, 5.0f, 5.0f}, {2, 2});
  const pb::Tensor wire = encoded(t, pb::MEANSTD_16BIT);
  const std::string halves = bytes({0x00, 0xbc, 0x00, 0x3c, 0x00, 0x00, 0x00, 0x00});
  const std::string means = bytes({0, 0, 0, 0x40, 0, 0, 0xa0, 0x40});   // 2.0f, 5.0f
  const std::string stds = bytes({0, 0, 0x80, 0x3f, 0, 0, 0, 0x34});    // 1.0f, 2^-23
  CHECK(hex(wire.buffer()) == hex(halves + means + stds));
  CHECK(values_of(*msg::decode(wire)) == std::vector<double>{1, 3, 5, 5});
}

TEST_CASE("MEANSTD_16BIT decodes float64 and float16 as hivemind does, not through float32") {
  // One row of one element: the half 0x3c01 = 1.0009765625, std 3, the given mean.
  auto wire = [](const char* dtype, float mean) {
    pb::Tensor t;
    t.add_size(1);
    t.add_size(1);
    t.set_dtype(dtype);
    t.set_compression(pb::MEANSTD_16BIT);
    const float std = 3.0f;
    std::string buffer = bytes({0x01, 0x3c});
    buffer.append(reinterpret_cast<const char*>(&mean), sizeof mean);
    buffer.append(reinterpret_cast<const char*>(&std), sizeof std);
    t.set_buffer(buffer);
    return t;
  };
  // float64 (hivemind: the halves as float64, then * std and + mean in float64):
  // 1.0009765625 * 3 = 3.0029296875, + float64(0.1f) = 0.100000001490116119384765625,
  // exact in float64. Through float32 it would be 3.1029295921325684.
  auto wide = msg::decode(wire("float64", 0.1f));
  REQUIRE(wide.ok());
  CHECK(values_of(*wide) == std::vector<double>{3.102929688990116119384765625});
  // float16 (hivemind: torch's in-place mul_ and add_ on a float16 tensor round to float16
  // after each): 3.0029296875 lies halfway between the halves 3.001953125 and 3.00390625
  // and rounds to the even one, 3.00390625 (0x4202); minus 2^-11 it is 3.00341796875,
  // which rounds to 0x4202 again. Rounding once, 3.00244140625 would give 0x4201.
  auto half = msg::decode(wire("float16", -0x1p-11f));
  REQUIRE(half.ok());
  CHECK(values_of(*half) == std::vector<double>{3.00390625});
  // float32 keeps its one rounding: 3.0029296875 - 2^-11 = 3.00244140625 exactly.
  auto single = msg::decode(wire("float32", -0x1p-11f));
  REQUIRE(single.ok());
  CHECK(values_of(*single) == std::vector<double>{3.00244140625});
}

TEST_CASE("UNIFORM_8BIT golden bytes: codebook of ORIGINAL values, not centred ones") {
  // mean 10; centred -3, -1, 1, 3; unbiased std sqrt(20 / 3) = 2.58199;
  // scale = 6 * std / 256 = 0.0605154; c / scale = -49.57, -16.52, 16.52, 49.57
  // -> rounded -50, -17, 17, 50 -> indices 78, 111, 145, 178.
  const msg::Tensor t = float_tensor({7.0f, 9.0f, 11.0f, 13.0f}, {4});
  const pb::Tensor wire = encoded(t, pb::UNIFORM_8BIT);
  const std::string length = bytes({0, 1, 0, 0, 0, 0, 0, 0});  // 256
  const std::string book = codebook({{78, bytes({0, 0, 0xe0, 0x40})},     // 7.0f
                                     {111, bytes({0, 0, 0x10, 0x41})},    // 9.0f
                                     {145, bytes({0, 0, 0x30, 0x41})},    // 11.0f
                                     {178, bytes({0, 0, 0x50, 0x41})}});  // 13.0f
  const std::string idx = bytes({78, 111, 145, 178});
  CHECK(hex(wire.buffer()) == hex(length + book + idx));
  CHECK(values_of(*msg::decode(wire)) == std::vector<double>{7, 9, 11, 13});
}

TEST_CASE("QUANTILE_8BIT golden bytes: borders at exact quantiles, bucket means") {
  // Sorted [7, 9, 11, 13]: the k/256 quantile is 7 + 6k/256 (linear interpolation), so
  // borders below 9 are k = 1..85, below 11 k = 1..170, below 13 all 255
  // -> indices 0, 85, 170, 255.
  const msg::Tensor t = float_tensor({9.0f, 7.0f, 13.0f, 11.0f}, {2, 2});
  const pb::Tensor wire = encoded(t, pb::QUANTILE_8BIT);
  const std::string length = bytes({0, 1, 0, 0, 0, 0, 0, 0});
  const std::string book = codebook({{0, bytes({0, 0, 0xe0, 0x40})},
                                     {85, bytes({0, 0, 0x10, 0x41})},
                                     {170, bytes({0, 0, 0x30, 0x41})},
                                     {255, bytes({0, 0, 0x50, 0x41})}});
  const std::string idx = bytes({85, 0, 255, 170});
  CHECK(hex(wire.buffer()) == hex(length + book + idx));
  CHECK(values_of(*msg::decode(wire)) == std::vector<double>{9, 7, 13, 11});
}

TEST_CASE("the dynamic code table follows create_dynamic_map(signed, 7, 8)") {
  const std::vector<float>& code = msg::dynamic_code_table();
  REQUIRE(code.size() == 256);
  for (std::size_t k = 1; k < code.size(); ++k) CHECK(code[k - 1] < code[k]);
  CHECK(code[127] == 0.0f);     // 127 negative values below it
  CHECK(code[255] == 1.0f);
  CHECK(code[0] == Approx(-0.99296875).epsilon(1e-7));   // -(0.1 + 0.9 * 63.5 / 64)
  CHECK(code[128] == Approx(0.55e-6).epsilon(1e-6));     // 10^-6 * (0.1 + 1) / 2
  CHECK(code[191] == Approx(0.10703125).epsilon(1e-7));  // first of the last decade
  CHECK(code[201] == Approx(0.24765625).epsilon(1e-7));  // 0.1 + 0.9 * 10.5 / 64
  CHECK(code[254] == Approx(0.99296875).epsilon(1e-7));
}

TEST_CASE("BLOCKWISE_8BIT golden bytes: absmax, code table, nearest codes") {
  // absmax 4; x / 4 = 1, -1, 0, 0.25 -> nearest codes 1 (255), -0.99296875 (0),
  // 0 (127), 0.24765625 (201).
  const msg::Tensor t = float_tensor({4.0f, -4.0f, 0.0f, 1.0f}, {4});
  const pb::Tensor wire = encoded(t, pb::BLOCKWISE_8BIT);
  const std::vector<float>& code = msg::dynamic_code_table();
  const std::string header = bytes({1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0});
  const std::string absmax = bytes({0, 0, 0x80, 0x40});  // 4.0f
  const std::string table(reinterpret_cast<const char*>(code.data()), 256 * 4);
  const std::string q = bytes({255, 0, 127, 201});
  CHECK(hex(wire.buffer()) == hex(header + absmax + table + q));
  const auto back = values_of(*msg::decode(wire));
  CHECK(back[0] == 4.0);
  CHECK(back[1] == Approx(-4 * 0.99296875));
  CHECK(back[2] == 0.0);
  CHECK(back[3] == Approx(4 * 0.24765625));
}

TEST_CASE("BLOCKWISE_8BIT uses one absmax per 4096 elements") {
  // Block 0: 4096 ones (absmax 1, code 1.0); block 1: -8, 8, 0 (absmax 8 = |-8|).
  std::vector<float> values(4096 + 3, 1.0f);
  values[4096] = -8.0f;
  values[4097] = 8.0f;
  values[4098] = 0.0f;
  const pb::Tensor wire = encoded(float_tensor(values, {4099}), pb::BLOCKWISE_8BIT);
  REQUIRE(wire.buffer().size() == 16 + 2 * 4 + 1024 + 4099);
  CHECK(hex(wire.buffer().substr(0, 24)) ==
        hex(bytes({2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x41})));
  CHECK(hex(wire.buffer().substr(wire.buffer().size() - 4)) == hex(bytes({255, 0, 255, 127})));
  const auto back = values_of(*msg::decode(wire));
  CHECK(std::vector<double>(back.begin(), back.begin() + 4096) == std::vector<double>(4096, 1.0));
  CHECK(back[4096] == Approx(-8 * 0.99296875));
  CHECK(back[4097] == 8.0);
  CHECK(back[4098] == 0.0);
}
