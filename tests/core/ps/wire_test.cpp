// The direct float32 path of core/ps/wire.hpp: the same bytes as protobuf, read back
// without copies, and anything unusual or malformed left to protobuf's judgement.
#include "core/ps/wire.hpp"

#include <cstring>

#include <catch2/catch.hpp>

#include "core/ps/server.hpp"

using namespace apiary;
using namespace apiary::core::ps;

namespace {

std::string direct_push(const std::string& shard, std::int32_t replica, std::int64_t step, double samples,
                        const std::vector<float>& g, float lr) {
  std::string out(dense_push_size(shard, replica, step, samples, g.size(), lr), '\0');
  CHECK(encode_dense_push(out.data(), shard, replica, step, samples, g.data(), g.size(), lr) == out.size());
  return out;
}

std::string protobuf_push(const std::string& shard, std::int32_t replica, std::int64_t step, double samples,
                          const std::vector<float>& g, float lr) {
  return to_pb(shard, Push{replica, step, g, samples, lr}).SerializeAsString();
}

std::vector<float> floats_of(DenseBytes d) {
  std::vector<float> v(d.count);
  if (d.count > 0) std::memcpy(v.data(), d.bytes, d.count * sizeof(float));
  return v;
}

}  // namespace

TEST_CASE("a dense push written directly is byte for byte protobuf's, and reads back in place") {
  struct Case {
    std::string shard;
    std::int32_t replica;
    std::int64_t step;
    double samples;
    std::vector<float> g;
    float lr;
  };
  const std::vector<Case> cases = {
      {"emb/part_1:0", 3, 17, 2.5, {1.0F, -2.0F, 0.25F}, 0.0F},
      {"w", 0, 0, 0.0, {}, 0.0F},                      // every field at its default: left out
      {"", -1, -5, -0.0, {0.0F}, -0.0F},               // negative ints; -0.0 is not the default
      {std::string(300, 'x'), 1, 1LL << 40, 1.0, std::vector<float>(70000, 0.5F), 0.0F},  // multi-byte lengths
      {"b", 2, 9, 4.0, {3.0F}, 0.125F},                // a schedule's learning rate
  };
  for (const auto& c : cases) {
    const auto bytes = direct_push(c.shard, c.replica, c.step, c.samples, c.g, c.lr);
    CHECK(bytes == protobuf_push(c.shard, c.replica, c.step, c.samples, c.g, c.lr));
    DensePushView v;
    REQUIRE(scan_dense_push(bytes, v));
    CHECK(v.shard == c.shard);
    CHECK(v.replica == c.replica);
    CHECK(v.step == c.step);
    CHECK(std::memcmp(&v.samples, &c.samples, sizeof(double)) == 0);
    CHECK(floats_of(v.gradient) == c.g);
    CHECK(std::memcmp(&v.learning_rate, &c.lr, sizeof(float)) == 0);
    if (c.g.empty()) continue;
    // Sent in pieces, the values left where they lie: head + values + tail, the same bytes.
    const auto [head, tail] = dense_push_framing(c.shard, c.replica, c.step, c.samples, c.g.size(), c.lr);
    const std::string values(reinterpret_cast<const char*>(c.g.data()), c.g.size() * sizeof(float));
    CHECK(head + values + tail == bytes);
  }
}

TEST_CASE("the direct push reader leaves sparse, repeated and malformed pushes to protobuf") {
  DensePushView v;
  SparseGradient sparse{{1, 1}, {1.0F, 2.0F}};
  CHECK_FALSE(scan_dense_push(to_pb("e", Push{0, 0, sparse, 1.0}).SerializeAsString(), v));
  const auto good = protobuf_push("w", 1, 2, 1.0, {1.0F, 2.0F}, 0.0F);
  CHECK_FALSE(scan_dense_push(good + good, v));                      // every field twice
  CHECK_FALSE(scan_dense_push(good.substr(0, good.size() - 3), v));  // cut short
  // A packed run of 5 bytes is not whole floats.
  const std::string odd = std::string("\x2a\x05", 2) + std::string(5, '\x01');
  CHECK_FALSE(scan_dense_push(odd, v));
  pb::PsPushRequest m;
  CHECK_FALSE(m.ParseFromString(odd));  // and protobuf refuses it too
}

TEST_CASE("a pull response written directly is protobuf's and decodes to the same reply") {
  const std::vector<float> values = {0.5F, -1.0F, 3.0F, 1e-30F};
  const auto bytes = encode_pull_response("w:0", 2, 7, 6, values.data(), values.size());
  CHECK(bytes == to_pb("w:0", PullReply{2, 7, 6, values}).SerializeAsString());
  auto reply = decode_pull_response(bytes);
  REQUIRE(reply.ok());
  CHECK(reply->replica == 2);
  CHECK(reply->step == 7);
  CHECK(reply->version == 6);
  CHECK(reply->values == values);
  // Sent in pieces: the head, then the values where they lie.
  const std::string raw(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  CHECK(pull_response_head("w:0", 2, 7, 6, values.size()) + raw == bytes);
  // Into a reply whose vector has the size already: written in place.
  PullReply reused{9, 9, 9, std::vector<float>(values.size(), 7.0F)};
  const float* storage = reused.values.data();
  REQUIRE(decode_pull_response_into(bytes, reused).ok());
  CHECK(reused.values.data() == storage);
  CHECK(reused.values == values);
  CHECK(reused.replica == 2);
  CHECK(reused.version == 6);
  auto empty = decode_pull_response(encode_pull_response("w:0", 0, 0, 0, nullptr, 0));
  REQUIRE(empty.ok());
  CHECK(empty->values.empty());
}

TEST_CASE("the head of a pull response whose values landed elsewhere decodes, and only that head") {
  const std::size_t landed = 1000 * sizeof(float);  // a two-byte length
  const std::string head = pull_response_head("w:0", 3, 300, 299, 1000);
  PullReply reply{0, 0, 0, std::vector<float>(1000, 2.5F)};
  REQUIRE(decode_landed_pull_response(head, landed, reply).ok());
  CHECK(reply.replica == 3);
  CHECK(reply.step == 300);
  CHECK(reply.version == 299);
  CHECK(reply.values == std::vector<float>(1000, 2.5F));  // left where they landed
  // Refused: another length, bytes after the length, no values field, an unknown field,
  // a repeated field, and the whole message instead of its head.
  const std::vector<float> one = {1.0F};
  const std::vector<std::pair<std::string, std::size_t>> bad = {
      {head, landed - 4},
      {head + "x", landed},
      {pull_response_head("w:0", 3, 300, 299, 0), landed},
      {"\x30\x01" + head, landed},
      {"\x10\x01" + head, landed},
      {encode_pull_response("w:0", 1, 1, 1, one.data(), one.size()), sizeof(float)},
  };
  for (const auto& [bytes, size] : bad) {
    INFO(bytes.size() << " bytes, " << size << " landed");
    const auto s = decode_landed_pull_response(bytes, size, reply);
    REQUIRE_FALSE(s.ok());
    CHECK(s.error().code == errc::malformed);
    CHECK_THAT(s.error().message, Catch::Contains("landed value bytes"));
  }
}

TEST_CASE("a pull response in another valid encoding is read through protobuf, garbage is refused") {
  // Field 5 as unpacked fixed32 floats (valid protobuf, not what apiary writes).
  std::string unpacked = "\x10\x01";  // replica = 1
  for (float f : {1.5F, -2.0F}) {
    unpacked += '\x2d';
    char b[4];
    std::memcpy(b, &f, 4);
    unpacked.append(b, 4);
  }
  auto reply = decode_pull_response(unpacked);
  REQUIRE(reply.ok());
  CHECK(reply->replica == 1);
  CHECK(reply->values == std::vector<float>{1.5F, -2.0F});
  auto bad = decode_pull_response(std::string("\x2a\x09\x01\x02", 4));  // says 9 bytes, has 2
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == errc::malformed);
  CHECK_THAT(bad.error().message, Catch::Contains("expected a PsPullResponse"));
}

TEST_CASE("the server sums a direct push in place and refuses a wrong-sized one with the sizes") {
  ShardConfig c;
  c.variable = "w:0";
  c.layout.shape = {3};
  c.optimizer.learning_rate = 1.0F;
  c.replica_hosts = {0};
  auto shard = Shard::create(c, {0.0F, 0.0F, 0.0F});
  REQUIRE(shard.ok());
  std::map<std::string, Shard> shards;
  shards.emplace("w:0", std::move(*shard));
  ShardServer server("localhost:CPU:0", std::move(shards));
  const core::TimePoint now{};
  auto wrong = server.on_request(now, 1, k_ps_push_handle, apiary::core::PeerAddr{}, direct_push("w:0", 0, 0, 1.0, {1.0F, 2.0F}, 0.0F));
  REQUIRE(wrong.size() == 1);
  const auto& refused = std::get<core::Reply>(wrong[0]).response;
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("expected a gradient of 3 values, got 2"));
  auto fx = server.on_request(now, 2, k_ps_push_handle, apiary::core::PeerAddr{}, direct_push("w:0", 0, 0, 1.0, {1.0F, 2.0F, 4.0F}, 0.0F));
  REQUIRE(fx.size() == 1);
  CHECK(std::get<core::Reply>(fx[0]).response.ok());
  CHECK(server.shard("w:0")->values() == std::vector<float>{-1.0F, -2.0F, -4.0F});
  // Pull answers are encoded from the shard's values.
  pb::PsPullRequest pull;
  pull.set_shard("w:0");
  pull.set_step(1);
  auto answer = server.on_request(now, 3, k_ps_pull_handle, apiary::core::PeerAddr{}, pull.SerializeAsString());
  REQUIRE(answer.size() == 1);
  auto reply = decode_pull_response(*std::get<core::Reply>(answer[0]).response);
  REQUIRE(reply.ok());
  CHECK(reply->version == 1);
  CHECK(reply->values == std::vector<float>{-1.0F, -2.0F, -4.0F});
}

TEST_CASE("a tag or length varint padded past 5 bytes is malformed on the direct paths, as protobuf has it") {
  // Field 1 (shard "w"): its tag 0x0a, then its length 1, one of them padded to 6 bytes.
  const std::string padded_tag("\x8a\x80\x80\x80\x80\x00\x01w", 8);
  const std::string padded_length("\x0a\x81\x80\x80\x80\x80\x00w", 8);
  pb::PsPushRequest m;
  DensePushView v;
  for (const auto& bad : {padded_tag, padded_length}) {
    CHECK_FALSE(m.ParseFromString(bad));
    CHECK_FALSE(scan_dense_push(bad, v));
    auto reply = decode_pull_response(bad);
    REQUIRE_FALSE(reply.ok());
    CHECK(reply.error().code == errc::malformed);
  }
  // Padded to 5 bytes each, the most a 32-bit varint takes: valid, and read directly.
  const std::string five("\x8a\x80\x80\x80\x00\x81\x80\x80\x80\x00w", 11);
  REQUIRE(m.ParseFromString(five));
  REQUIRE(scan_dense_push(five, v));
  CHECK(v.shard == "w");
  // A landed pull response's head whose values tag is padded past 5 bytes.
  PullReply out;
  CHECK_FALSE(decode_landed_pull_response(std::string("\xaa\x80\x80\x80\x80\x00\x04", 7), 4, out).ok());
  CHECK(decode_landed_pull_response(std::string("\x2a\x04", 2), 4, out).ok());
}
