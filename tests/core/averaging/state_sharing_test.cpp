// State sharing (reference §3.6): the DHT declaration and the donors' order, the served
// stream read back with several codecs and chunk sizes, and StateLoader falling back from
// donor to donor when one breaks, stalls, sends garbage or does not share.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cmath>
#include <string>
#include <variant>
#include <vector>

#include "core/dht/msgpack_value.hpp"
#include "messages/tensor/codec.hpp"
#include "tests/core/averaging/state_testing.hpp"

namespace {

using namespace apiary::core::averaging::testing;

apiary::core::dht::ValueWithExpiration<std::string> entry(std::string value, double expiration) {
  return {std::move(value), expiration};
}

struct State {
  std::string metadata = apiary::core::dht::pack_str("epoch 7");
  std::vector<std::vector<float>> tensors;
  std::vector<Shape> shapes;
};

State sample_state() {
  State s;
  s.shapes = {{2, 3}, {300}, {}, {0}, {4, 1, 5}};
  // Multiples of 1/8 below 64: exact in float16 too.
  s.tensors = tensors_of(s.shapes, [](std::size_t t, std::size_t i) {
    return static_cast<float>((i * 37 + t) % 512) / 8.0f - 20.0f;
  });
  return s;
}

std::vector<std::string> stream_of(const State& s, pb::CompressionType codec = pb::NONE,
                                   std::size_t chunk = 64) {
  auto stream = av::make_state_stream(s.metadata, s.tensors, s.shapes, codec, chunk);
  REQUIRE(stream.ok());
  return *stream;
}

}  // namespace

TEST_CASE("state sharing: DHT key, subkey and declared values", "[state_sharing]") {
  CHECK(av::state_sharing_key("run_state_averager") == "run_state_averager.all_averagers");
  CHECK(av::state_sharing_subkey("peer-1") == std::string("\xc4\x06peer-1", 8));
  auto nil = av::encode_sharing_priority(std::nullopt);
  REQUIRE(nil.ok());
  CHECK(*nil == std::string("\xc0", 1));
  auto two = av::encode_sharing_priority(2.0);
  REQUIRE(two.ok());
  CHECK(*two == std::string("\xcb\x40\x00\x00\x00\x00\x00\x00\x00", 9));
  auto nan = av::encode_sharing_priority(std::nan(""));
  REQUIRE_FALSE(nan.ok());
  CHECK(nan.error().code == errc::invalid_argument);
}

TEST_CASE("state sharing: donors by priority, without self, expired or non-sharing peers",
          "[state_sharing]") {
  using apiary::core::dht::pack_bin;
  using apiary::core::dht::pack_str;
  const double now = 1000;
  av::SharingDictionary d;
  d[pack_bin("b")] = entry(*av::encode_sharing_priority(5.0), now + 30);
  d[pack_bin("a")] = entry(*av::encode_sharing_priority(7.0), now + 30);
  d[pack_bin("g")] = entry(std::string("\x07", 1), now + 30);  // msgpack int 7
  d[pack_bin("c")] = entry(*av::encode_sharing_priority(std::nullopt), now + 30);
  d[pack_bin("self")] = entry(*av::encode_sharing_priority(100.0), now + 30);
  d[pack_bin("old")] = entry(*av::encode_sharing_priority(9.0), now - 0.5);
  d[pack_bin("edge")] = entry(*av::encode_sharing_priority(1.0), now);  // valid at its expiration
  d[pack_bin("s")] = entry(pack_str("high"), now + 30);
  d[pack_bin("t")] = entry(std::string("\xc3", 1), now + 30);  // true: not a priority
  d[pack_bin("x")] = entry(std::string("\xcb", 1), now + 30);  // cut float
  d[std::string("\x05", 1)] = entry(*av::encode_sharing_priority(50.0), now + 30);  // int subkey
  d[pack_str("str-peer")] = entry(*av::encode_sharing_priority(-3.0), now + 30);

  auto donors = av::order_state_donors(d, "self", now);
  std::vector<std::string> peers;
  for (const auto& donor : donors) peers.push_back(donor.peer);
  CHECK(peers == std::vector<std::string>{"a", "g", "b", "edge", "str-peer"});
  REQUIRE(donors.size() == 5);
  CHECK(donors[0].priority == 7.0);
  CHECK(donors[0].expiration == now + 30);
  CHECK(donors[4].priority == -3.0);

  SECTION("a tie seed reorders equal priorities only, reproducibly") {
    bool g_first = false, a_first = false;
    for (std::uint64_t seed = 1; seed <= 64; ++seed) {
      auto seeded = av::order_state_donors(d, "self", now, seed);
      REQUIRE(seeded.size() == 5);
      CHECK(seeded[2].peer == "b");
      CHECK(seeded[3].peer == "edge");
      CHECK(seeded[0].priority == 7.0);
      CHECK(seeded[1].priority == 7.0);
      (seeded[0].peer == "a" ? a_first : g_first) = true;
      auto again = av::order_state_donors(d, "self", now, seed);
      CHECK(again[0].peer == seeded[0].peer);
    }
    CHECK(a_first);
    CHECK(g_first);
  }
  SECTION("later, every declaration expired") {
    CHECK(av::order_state_donors(d, "self", now + 31).empty());
  }
}

TEST_CASE("state sharing: the stream reads back exactly (NONE) and closely (FLOAT16)",
          "[state_sharing]") {
  const State s = sample_state();
  const auto codec = GENERATE(pb::NONE, pb::FLOAT16);
  const std::size_t chunk = GENERATE(std::size_t{16}, std::size_t{64}, std::size_t{1} << 16);
  const auto stream = stream_of(s, codec, chunk);

  // Message layout: metadata in the first only; a dtype starts each of the 5 tensors.
  std::size_t starts = 0, expected_messages = 0;
  const std::size_t elem = codec == pb::NONE ? 4 : 2;
  for (const auto& t : s.tensors) expected_messages += std::max<std::size_t>(1, (t.size() * elem + chunk - 1) / chunk);
  REQUIRE(stream.size() == expected_messages);
  for (std::size_t i = 0; i < stream.size(); ++i) {
    pb::DownloadData data;
    REQUIRE(data.ParseFromString(stream[i]));
    CHECK(data.metadata().empty() == (i != 0));
    CHECK(data.has_tensor_part());
    if (!data.tensor_part().dtype().empty()) {
      ++starts;
      CHECK(data.tensor_part().compression() == codec);
    }
  }
  CHECK(starts == s.tensors.size());

  av::StateStreamReader reader(s.shapes);
  for (const auto& m : stream) REQUIRE(reader.push(m).ok());
  auto state = reader.finish();
  REQUIRE(state.ok());
  CHECK(state->metadata == s.metadata);
  CHECK(state->shapes == s.shapes);
  // The sample's values are exact in float16, so both codecs give them back exactly.
  CHECK(state->tensors == s.tensors);
}

TEST_CASE("state sharing: FLOAT16 rounds values it cannot hold", "[state_sharing]") {
  State s;
  s.tensors = {{0.1f, 1.0f / 3.0f, 70000.0f}};
  s.shapes = {{3}};
  av::StateStreamReader reader;
  for (const auto& m : stream_of(s, pb::FLOAT16, 2)) REQUIRE(reader.push(m).ok());
  auto state = reader.finish();
  REQUIRE(state.ok());
  REQUIRE(state->tensors.size() == 1);
  CHECK(state->tensors[0][0] == Approx(0.1f).epsilon(1e-3));
  CHECK(state->tensors[0][1] == Approx(1.0f / 3.0f).epsilon(1e-3));
  CHECK(state->tensors[0][2] == 65504.0f);  // clamped to the float16 range
  CHECK(state->tensors[0][0] != 0.1f);
}

TEST_CASE("state sharing: a state without tensors is its metadata alone", "[state_sharing]") {
  auto stream = av::make_state_stream("\x80", {}, {}, pb::NONE);
  REQUIRE(stream.ok());
  REQUIRE(stream->size() == 1);
  av::StateStreamReader reader;
  REQUIRE(reader.push((*stream)[0]).ok());
  auto state = reader.finish();
  REQUIRE(state.ok());
  CHECK(state->metadata == "\x80");
  CHECK(state->tensors.empty());
}

TEST_CASE("state sharing: bad input to the stream is refused", "[state_sharing]") {
  const State s = sample_state();
  auto code_of = [](const apiary::Result<std::vector<std::string>>& r) {
    REQUIRE_FALSE(r.ok());
    return r.error().code;
  };
  CHECK(code_of(av::make_state_stream("", s.tensors, s.shapes, pb::NONE)) == errc::invalid_argument);
  CHECK(code_of(av::make_state_stream("m", s.tensors, {{6}}, pb::NONE)) == errc::invalid_argument);
  CHECK(code_of(av::make_state_stream("m", {{1, 2, 3}}, {{2, 2}}, pb::NONE)) == errc::invalid_argument);
  CHECK(code_of(av::make_state_stream("m", s.tensors, s.shapes, pb::NONE, 0)) == errc::invalid_argument);
  CHECK(code_of(av::make_state_stream("m", {{1}}, {{}}, pb::MEANSTD_16BIT)) == errc::unsupported);
}

TEST_CASE("state sharing: serving replies message by message, then ends", "[state_sharing]") {
  auto fx = av::serve_state_stream(9, std::vector<std::string>{"one", "two"});
  auto replies = all_of<Reply>(fx);
  REQUIRE(replies.size() == 3);
  CHECK(replies[0].request == 9);
  CHECK(*replies[0].response == "one");
  CHECK_FALSE(replies[0].last);
  CHECK(*replies[1].response == "two");
  CHECK(replies[2].last);
  CHECK(replies[2].response->empty());

  auto off = all_of<Reply>(av::serve_state_stream(4, std::vector<std::string>{}));
  REQUIRE(off.size() == 1);
  CHECK(off[0].last);
  CHECK(off[0].response->empty());

  auto bad = all_of<Reply>(av::serve_state_stream(
      5, apiary::make_error(errc::internal, "no state")));
  REQUIRE(bad.size() == 1);
  CHECK(bad[0].last);
  REQUIRE_FALSE(bad[0].response.ok());
  CHECK(bad[0].response.error().code == errc::internal);
}

TEST_CASE("state sharing: malformed streams are errors the reader names", "[state_sharing]") {
  const State s = sample_state();
  const auto good = stream_of(s);
  auto failure = [&](std::vector<std::string> msgs) {
    av::StateStreamReader reader(s.shapes);
    for (const auto& m : msgs) {
      if (auto st = reader.push(m); !st.ok()) return st.error().code;
    }
    auto state = reader.finish();
    REQUIRE_FALSE(state.ok());
    return state.error().code;
  };
  CHECK(failure({}) == errc::not_found);
  CHECK(failure({std::string("\xff\xff\xff", 3)}) == errc::malformed);
  CHECK(failure(std::vector<std::string>(good.begin(), good.end() - 1)) == errc::truncated);
  // The first message without metadata.
  pb::DownloadData first;
  REQUIRE(first.ParseFromString(good[0]));
  first.clear_metadata();
  CHECK(failure({first.SerializeAsString()}) == errc::malformed);
  // Metadata again later.
  pb::DownloadData second;
  REQUIRE(second.ParseFromString(good[1]));
  second.set_metadata("again");
  CHECK(failure({good[0], second.SerializeAsString()}) == errc::protocol);
  // One chunk too many: a buffer-only chunk where a tensor should start.
  pb::DownloadData extra;
  extra.mutable_tensor_part()->set_buffer("1234");
  auto longer = good;
  longer.insert(longer.begin() + 1, extra.SerializeAsString());
  CHECK(failure(longer) == errc::protocol);
  // Shapes other than expected.
  av::StateStreamReader other(std::vector<Shape>{{6}, {300}, {}, {0}, {20}});
  apiary::Status st = apiary::ok_status();
  for (const auto& m : good) {
    st = other.push(m);
    if (!st.ok()) break;
  }
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == errc::protocol);
  CHECK(st.error().message.find("[2, 3]") != std::string::npos);
  // A byte limit.
  av::StateStreamReader small({}, 100);
  st = apiary::ok_status();
  for (const auto& m : good) {
    st = small.push(m);
    if (!st.ok()) break;
  }
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == errc::too_large);
}

TEST_CASE("state sharing: encoded tensors of any dtype stream and read back in their dtypes", "[state_sharing]") {
  namespace msg = apiary::messages;
  const std::vector<double> doubles{0.5, -1.25, 3.0, 1e300, -0.0, 7.0};
  const std::vector<std::int64_t> ints{1, -2, 1LL << 40};
  auto f64 = msg::Tensor::copy_of(msg::dtype::float64, {2, 3}, doubles.data(), doubles.size() * sizeof(double));
  auto i64 = msg::Tensor::copy_of(msg::dtype::int64, {3}, ints.data(), ints.size() * sizeof(std::int64_t));
  REQUIRE(f64.ok());
  REQUIRE(i64.ok());
  auto e0 = msg::encode(*f64, pb::NONE);
  auto e1 = msg::encode(*i64, pb::NONE);
  REQUIRE(e0.ok());
  REQUIRE(e1.ok());
  auto stream = av::make_state_stream("\x81\xa1s\x2a", std::vector<pb::Tensor>{*e0, *e1}, 16);
  REQUIRE(stream.ok());
  CHECK(stream->size() == 3 + 2);  // 48 bytes in 16-byte chunks, then 24 in two

  av::StateStreamReader float_only;  // the float32 reader refuses them
  bool refused = false;
  for (const auto& m : *stream) refused = refused || !float_only.push(m).ok();
  CHECK(refused);

  av::StateStreamReader reader(std::vector<Shape>{{2, 3}, {3}}, 0, true);
  for (const auto& m : *stream) REQUIRE(reader.push(m).ok());
  auto state = reader.finish();
  REQUIRE(state.ok());
  CHECK(state->metadata == "\x81\xa1s\x2a");
  CHECK(state->tensors.empty());
  REQUIRE(state->typed.size() == 2);
  CHECK(state->typed[0].type() == msg::dtype::float64);
  CHECK(state->typed[0].shape() == Shape{2, 3});
  CHECK(std::vector<double>(state->typed[0].data<double>(), state->typed[0].data<double>() + 6) == doubles);
  CHECK(state->typed[1].type() == msg::dtype::int64);
  CHECK(std::vector<std::int64_t>(state->typed[1].data<std::int64_t>(), state->typed[1].data<std::int64_t>() + 3) == ints);
  CHECK(state->shapes == std::vector<Shape>{{2, 3}, {3}});

  av::StateStreamReader other_shapes(std::vector<Shape>{{6}, {3}}, 0, true);
  bool mismatch = false;
  for (const auto& m : *stream) mismatch = mismatch || !other_shapes.push(m).ok();
  CHECK(mismatch);
  CHECK(av::make_state_stream("", std::vector<pb::Tensor>{}).error().code == errc::invalid_argument);
  CHECK(av::make_state_stream("m", std::vector<pb::Tensor>{*e0}, 0).error().code == errc::invalid_argument);
  auto only_metadata = av::make_state_stream("m", std::vector<pb::Tensor>{});
  REQUIRE(only_metadata.ok());
  CHECK(only_metadata->size() == 1);
}
