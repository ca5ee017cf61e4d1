// The part stream's NONE fast path: the same bytes as the general protobuf + codec path,
// read back the same way, and anything it does not handle left to the general path.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "averaging.pb.h"
#include "core/averaging/allreduce_fastwire.hpp"
#include "messages/tensor/codec.hpp"
#include "messages/tensor/tensor.hpp"

namespace av = apiary::core::averaging;
namespace pb = apiary::pb;

namespace {

/// AveragingData through protobuf and the codec, as the general path writes it.
std::string general(pb::MessageCode code, const std::string& group, const std::string& peer,
                    const std::vector<float>& values, pb::CompressionType codec, double weight) {
  auto tensor = apiary::messages::Tensor::copy_of(apiary::messages::dtype::float32,
                                                  {static_cast<std::uint32_t>(values.size())}, values.data(),
                                                  values.size() * sizeof(float));
  REQUIRE(tensor.ok());
  pb::AveragingData data;
  data.set_code(code);
  data.set_group_id(group);
  data.set_peer_id(peer);
  data.set_weight(weight);
  REQUIRE(apiary::messages::encode_into(*tensor, codec, *data.mutable_tensor_part()).ok());
  return data.SerializeAsString();
}

const std::string k_group = "group-id";
const std::string k_peer = "/ip4/127.0.0.1/tcp/1";

/// The fields a fast path read besides the values: those the message was written with.
void check_fields(const av::PartMessage& read, pb::MessageCode code, double weight) {
  CHECK(read.code == code);
  CHECK(read.group_id == k_group);
  CHECK(read.peer_id == k_peer);
  CHECK(read.weight == weight);
}

}  // namespace

TEST_CASE("NONE parts: the fast path writes the general path's bytes and reads them back", "[unit][averaging]") {
  const std::size_t count = GENERATE(std::size_t{0}, std::size_t{1}, std::size_t{33}, std::size_t{70000});
  const double weight = GENERATE(0.0, 1.0, 2.5);
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(i) * 0.25f - 3.0f;
  const std::string want = general(pb::PART_FOR_AVERAGING, k_group, k_peer, values, pb::NONE, weight);
  const std::string got = av::encode_none_part(pb::PART_FOR_AVERAGING, k_group, k_peer, values.data(), count, weight);
  CHECK(got == want);
  av::PartMessage read;
  REQUIRE(av::decode_none_part(got, read));
  check_fields(read, pb::PART_FOR_AVERAGING, weight);
  CHECK(read.values == values);
  auto decoded = av::decode_part_message(got);
  REQUIRE(decoded.ok());
  CHECK(decoded->values == values);
}

TEST_CASE("NONE parts: codecs, code-only answers and bad bytes go to the general path", "[unit][averaging]") {
  const std::vector<float> values{1.0f, -2.0f, 0.5f};
  av::PartMessage read;
  // FLOAT16 is not the fast path's; the general path decodes it.
  const std::string half = general(pb::AVERAGED_PART, "", "", values, pb::FLOAT16, 1.0);
  CHECK_FALSE(av::decode_none_part(half, read));
  auto decoded = av::decode_part_message(half);
  REQUIRE(decoded.ok());
  CHECK(decoded->values == values);
  // A code-only answer has no tensor.
  av::PartMessage code_only;
  REQUIRE(av::decode_none_part(av::encode_code_message(pb::BAD_GROUP_ID), code_only));
  CHECK(code_only.code == pb::BAD_GROUP_ID);
  CHECK(code_only.values.empty());
  // Garbage and truncated messages: not read here, and an error from the general path.
  std::string truncated = av::encode_none_part(pb::PART_FOR_AVERAGING, "g", "", values.data(), 3, 1.0);
  truncated.resize(truncated.size() - 5);
  av::PartMessage bad;
  CHECK_FALSE(av::decode_none_part(truncated, bad));
  CHECK_FALSE(av::decode_part_message(truncated).ok());
  CHECK_FALSE(av::decode_none_part(std::string("\xff\xff\xff", 3), bad));
}

TEST_CASE("FLOAT16 parts: the fast path writes the general path's bytes and decodes them as the codec does",
          "[unit][averaging]") {
  const std::size_t count = GENERATE(std::size_t{0}, std::size_t{1}, std::size_t{33}, std::size_t{70000});
  const double weight = GENERATE(0.0, 1.0, 2.5);
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<float>(i) * 0.37f - 3.0f;
  // Values the rounding must treat as the codec does: past float16's range, NaN,
  // infinities, a subnormal, a tie.
  const float specials[] = {70000.0f, -1e9f, std::nanf(""), INFINITY, -INFINITY, 1e-7f, 1.0009765625f + 0.00048828125f};
  for (std::size_t i = 0; i < count && i < std::size(specials); ++i) values[i] = specials[i];
  const std::string want = general(pb::AVERAGED_PART, k_group, k_peer, values, pb::FLOAT16, weight);
  const std::string got = av::encode_half_part(pb::AVERAGED_PART, k_group, k_peer, values.data(), count, weight);
  CHECK(got == want);
  // The codec's own decoding of those bytes.
  pb::AveragingData data;
  REQUIRE(data.ParseFromString(want));
  std::vector<float> codec_values;
  if (data.has_tensor_part()) {
    auto tensor = apiary::messages::decode(data.tensor_part());
    REQUIRE(tensor.ok());
    codec_values.assign(tensor->data<float>(), tensor->data<float>() + tensor->numel());
  }
  av::PartMessage read;
  REQUIRE(av::decode_half_part(got, read));
  check_fields(read, pb::AVERAGED_PART, weight);
  CHECK(read.compression == pb::FLOAT16);
  REQUIRE(read.values.size() == codec_values.size());
  CHECK(std::memcmp(read.values.data(), codec_values.data(), codec_values.size() * sizeof(float)) == 0);
  // The NONE path does not take it; decode_part_message and read_part_message do, alike.
  av::PartMessage none;
  if (count > 0) CHECK_FALSE(av::decode_none_part(got, none));
  auto decoded = av::decode_part_message(got);
  REQUIRE(decoded.ok());
  CHECK(std::memcmp(decoded->values.data(), codec_values.data(), codec_values.size() * sizeof(float)) == 0);
  std::string_view floats;
  auto viewed = av::read_part_message(got, floats);
  REQUIRE(viewed.ok());
  CHECK(floats.empty());
  CHECK(viewed->values.size() == count);
}

TEST_CASE("FLOAT16 parts: a wrong size, dtype or shape, and bad bytes go to the general path", "[unit][averaging]") {
  const std::vector<float> values{1.0f, -2.0f, 0.5f};
  av::PartMessage read;
  // Another codec, and NONE parts: not the float16 path's.
  CHECK_FALSE(av::decode_half_part(general(pb::AVERAGED_PART, "", "", values, pb::UNIFORM_8BIT, 1.0), read));
  CHECK_FALSE(av::decode_half_part(av::encode_none_part(pb::AVERAGED_PART, "", "", values.data(), 3, 1.0), read));
  // A buffer one byte short of its size, and a 2-d tensor: the general path answers.
  pb::AveragingData data;
  REQUIRE(data.ParseFromString(general(pb::AVERAGED_PART, "", "", values, pb::FLOAT16, 1.0)));
  pb::AveragingData short_buffer = data;
  short_buffer.mutable_tensor_part()->mutable_buffer()->pop_back();
  CHECK_FALSE(av::decode_half_part(short_buffer.SerializeAsString(), read));
  CHECK_FALSE(av::decode_part_message(short_buffer.SerializeAsString()).ok());
  pb::AveragingData two_d = data;
  two_d.mutable_tensor_part()->clear_size();
  two_d.mutable_tensor_part()->add_size(1);
  two_d.mutable_tensor_part()->add_size(3);
  CHECK_FALSE(av::decode_half_part(two_d.SerializeAsString(), read));
  auto general_2d = av::decode_part_message(two_d.SerializeAsString());
  REQUIRE(general_2d.ok());
  CHECK(general_2d->values == values);
  pb::AveragingData f64 = data;
  f64.mutable_tensor_part()->set_dtype("float64");
  CHECK_FALSE(av::decode_half_part(f64.SerializeAsString(), read));
  std::string truncated = av::encode_half_part(pb::AVERAGED_PART, "g", "", values.data(), 3, 1.0);
  truncated.resize(truncated.size() - 5);
  CHECK_FALSE(av::decode_half_part(truncated, read));
  CHECK_FALSE(av::decode_part_message(truncated).ok());
}

TEST_CASE("NONE parts: a tag padded past 5 bytes is malformed, as protobuf has it", "[unit][averaging]") {
  const std::vector<float> values{1.0f, 2.0f};
  const std::string good = av::encode_none_part(pb::PART_FOR_AVERAGING, "g", "", values.data(), 2, 1.0);
  REQUIRE(good[0] == '\x08');  // field 1 (code), varint
  // The same message with the code's tag written in 6 bytes.
  const std::string padded = std::string("\x88\x80\x80\x80\x80\x00", 6) + good.substr(1);
  pb::AveragingData data;
  CHECK_FALSE(data.ParseFromString(padded));
  av::PartMessage read;
  CHECK_FALSE(av::decode_none_part(padded, read));
  CHECK_FALSE(av::decode_part_message(padded).ok());
  // Padded to 5 bytes it is valid.
  const std::string five = std::string("\x88\x80\x80\x80\x00", 5) + good.substr(1);
  REQUIRE(data.ParseFromString(five));
  REQUIRE(av::decode_none_part(five, read));
  CHECK(read.values == values);
}

TEST_CASE("a part's group id is read as protobuf reads it, past a 5-byte tag with bits beyond 32",
          "[unit][averaging]") {
  const std::vector<float> values{1.0f, 2.0f};
  // An unknown varint field whose 5-byte tag carries bits past 32 (protobuf drops them:
  // field 291339643), after the group id.
  const std::string message = av::encode_none_part(pb::PART_FOR_AVERAGING, "group-7", "", values.data(), 2, 1.0) +
                              std::string("\xd8\xd7\xd7\xd7\x28\x01", 6);
  pb::AveragingData data;
  REQUIRE(data.ParseFromString(message));
  CHECK(data.group_id() == "group-7");
  CHECK(av::part_group_id(message) == "group-7");
  auto decoded = av::decode_part_message(message);
  REQUIRE(decoded.ok());
  CHECK(decoded->group_id == "group-7");
  CHECK(decoded->values == values);
}

TEST_CASE("NONE parts: a second tensor part goes to the general path, which reads it as protobuf does",
          "[unit][averaging]") {
  const std::vector<float> values{1.0f, 2.0f};
  const std::string good = av::encode_none_part(pb::PART_FOR_AVERAGING, "g", "", values.data(), 2, 1.0);
  // A malformed tensor part (its buffer's length cut short) before the good message's own.
  const std::string twice = std::string("\x22\x02\x0a\xff", 4) + good;
  pb::AveragingData data;
  CHECK_FALSE(data.ParseFromString(twice));
  av::PartMessage read;
  CHECK_FALSE(av::decode_none_part(twice, read));
  auto decoded = av::decode_part_message(twice);
  REQUIRE_FALSE(decoded.ok());
  CHECK(decoded.error().code == apiary::errc::malformed);
}

TEST_CASE("NONE parts decode straight into their destination, and only when the size matches",
          "[unit][averaging]") {
  const std::vector<float> values{1.5f, -2.0f, 0.25f, 8.0f};
  const std::string bytes = av::encode_none_part(pb::AVERAGED_PART, "", "", values.data(), values.size(), 0.0);
  std::vector<float> dest(4, 7.0f);
  av::PartMessage header;
  REQUIRE(av::decode_none_part_into(bytes, header, dest.data(), dest.size()));
  CHECK(header.code == pb::AVERAGED_PART);
  CHECK(dest == values);
  std::vector<float> wrong(3, 7.0f);
  av::PartMessage other;
  CHECK_FALSE(av::decode_none_part_into(bytes, other, wrong.data(), wrong.size()));
  CHECK(wrong == std::vector<float>(3, 7.0f));
}
