// The streamed forms of ExpertRequest and ExpertResponse: tensors split into chunks of at
// most k_stream_chunk_bytes, one chunk per message, joined back whole; cut, over-long,
// mixed-uid, oversized and junk streams are errors that say so.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/moe/stream_chunks.hpp"
#include "messages/tensor/codec.hpp"
#include "tests/core/moe/expert_tensors.hpp"

namespace moe = apiary::core::moe;
using apiary::Buffer;
using apiary::errc;
using apiary::pb::Tensor;
using expert_test::random_floats;
using expert_test::rows_of;

namespace {

/// `rows` x 4 float32 values from `seed`, encoded with NONE.
Tensor wire_rows(std::uint32_t rows, std::uint64_t seed) {
  return apiary::messages::encode_none(rows_of(random_floats(rows * 4, seed), 4));
}

std::vector<Buffer> buffers(const std::vector<std::string>& messages) {
  std::vector<Buffer> out;
  for (const auto& m : messages) out.push_back(Buffer::copy_of(m));
  return out;
}

/// The stream's messages fed to a RequestJoiner; the first error, if any.
apiary::Status feed(moe::RequestJoiner& joiner, const std::vector<std::string>& messages) {
  for (const auto& m : messages) {
    if (auto added = joiner.add(Buffer::copy_of(m)); !added) return added;
  }
  return apiary::ok_status();
}

}  // namespace

TEST_CASE("a request stream carries each chunk in its own message with the uid and joins back whole", "[moe]") {
  const std::vector<Tensor> tensors = {wire_rows(10, 1), wire_rows(3, 2)};  // 160 and 48 buffer bytes
  const auto messages = moe::request_stream("ffn.3", tensors, 64);
  REQUIRE(messages.size() == 3 + 1);
  std::vector<int> chunk_counts;
  for (const auto& m : messages) {
    apiary::pb::ExpertRequest r;
    REQUIRE(r.ParseFromString(m));
    CHECK(r.uid() == "ffn.3");
    REQUIRE(r.tensors_size() == 1);
    CHECK(r.tensors(0).buffer().size() <= 64);
    chunk_counts.push_back(r.tensors(0).chunks());
  }
  CHECK(chunk_counts == std::vector<int>{3, 0, 0, 1});  // the count rides on a tensor's first chunk

  moe::RequestJoiner joiner;
  REQUIRE(feed(joiner, messages));
  CHECK(joiner.uid() == "ffn.3");
  auto joined = joiner.finish();
  REQUIRE(joined.ok());
  CHECK(joined->uid() == "ffn.3");
  REQUIRE(joined->tensors_size() == 2);
  for (int i = 0; i < 2; ++i) {
    auto got = apiary::messages::decode(joined->tensors(i));
    auto want = apiary::messages::decode(tensors[static_cast<std::size_t>(i)]);
    REQUIRE(got.ok());
    REQUIRE(want.ok());
    CHECK(*got == *want);
  }
}

TEST_CASE("the default chunk is hivemind's 4 MiB and a response stream joins back", "[moe]") {
  CHECK(moe::k_stream_chunk_bytes == 4u * 1024 * 1024);
  CHECK(moe::k_max_unary_payload == 2u * 1024 * 1024);
  // 2^20 x 4 float32 = 16 MiB: four chunks of 4 MiB.
  const Tensor big = wire_rows(1u << 20, 3);
  const Tensor empty = apiary::messages::encode_none(rows_of({}, 4));
  const auto messages = moe::response_stream({big, empty});
  REQUIRE(messages.size() == 4 + 1);
  auto joined = moe::join_response(buffers(messages));
  REQUIRE(joined.ok());
  REQUIRE(joined->size() == 2);
  CHECK((*joined)[0].buffer() == big.buffer());
  CHECK((*joined)[0].chunks() == 0);
  CHECK((*joined)[1].buffer().empty());
  CHECK((*joined)[1].dtype() == "float32");
}

TEST_CASE("a stream cut before its announced chunks is truncated", "[moe]") {
  auto messages = moe::request_stream("ffn.0", {wire_rows(10, 4)}, 64);
  messages.pop_back();
  moe::RequestJoiner joiner;
  REQUIRE(feed(joiner, messages));
  auto joined = joiner.finish();
  REQUIRE_FALSE(joined.ok());
  CHECK(joined.error().code == errc::truncated);
  CHECK_THAT(joined.error().message, Catch::Contains("tensor 0") && Catch::Contains("2 of 3"));
}

TEST_CASE("a chunk past the announced count or a new tensor started early is refused", "[moe]") {
  auto messages = moe::response_stream({wire_rows(10, 5)}, 64);
  auto extra = buffers(messages);
  extra.push_back(extra.back());  // a buffer-only chunk after the last one
  auto over = moe::join_response(extra);
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().code == errc::malformed);
  CHECK_THAT(over.error().message, Catch::Contains("without a dtype"));

  auto early = buffers(messages);
  early[1] = early[0];  // the second chunk carries a first chunk's metadata
  auto mixed = moe::join_response(early);
  REQUIRE_FALSE(mixed.ok());
  CHECK(mixed.error().code == errc::protocol);
  CHECK_THAT(mixed.error().message, Catch::Contains("tensor 0") && Catch::Contains("metadata"));
}

TEST_CASE("a later message naming another expert is refused and one naming none is taken", "[moe]") {
  auto messages = moe::request_stream("ffn.1", {wire_rows(10, 6)}, 64);
  apiary::pb::ExpertRequest second;
  REQUIRE(second.ParseFromString(messages[1]));
  second.clear_uid();
  messages[1] = second.SerializeAsString();
  moe::RequestJoiner ok_joiner;
  REQUIRE(feed(ok_joiner, messages));
  REQUIRE(ok_joiner.finish().ok());

  second.set_uid("ffn.2");
  messages[1] = second.SerializeAsString();
  moe::RequestJoiner joiner;
  auto fed = feed(joiner, messages);
  REQUIRE_FALSE(fed.ok());
  CHECK(fed.error().code == errc::invalid_argument);
  CHECK_THAT(fed.error().message, Catch::Contains("'ffn.2'") && Catch::Contains("'ffn.1'"));
}

TEST_CASE("junk bytes and a stream over the byte limit are refused", "[moe]") {
  moe::RequestJoiner joiner;
  auto junk = joiner.add(Buffer::copy_of(std::string("\xff\xff", 2)));
  REQUIRE_FALSE(junk.ok());
  CHECK(junk.error().code == errc::malformed);
  CHECK_THAT(junk.error().message, Catch::Contains("not an ExpertRequest"));

  moe::RequestJoiner small(100);
  auto big = feed(small, moe::request_stream("ffn.0", {wire_rows(10, 7)}, 64));
  REQUIRE_FALSE(big.ok());
  CHECK(big.error().code == errc::too_large);
  CHECK_THAT(big.error().message, Catch::Contains("100 bytes"));

  auto not_response = moe::join_response({Buffer::copy_of(std::string("\xff\xff", 2))});
  REQUIRE_FALSE(not_response.ok());
  CHECK(not_response.error().code == errc::malformed);
}
