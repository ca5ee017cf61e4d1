// Splitting serialized tensors into chunk streams and joining them back, including the
// announced-count checks that upstream lacks.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "messages/tensor/codec.hpp"
#include "messages/tensor/streaming.hpp"

namespace msg = apiary::messages;
namespace pb = apiary::pb;
using apiary::errc;

namespace {

constexpr std::size_t KiB = 1024;

pb::Tensor tensor_of_bytes(std::size_t n) {
  pb::Tensor t;
  std::string buffer(n, '\0');
  for (std::size_t i = 0; i < n; ++i) buffer[i] = static_cast<char>(i * 131 + (i >> 16));
  t.set_buffer(std::move(buffer));
  t.add_size(static_cast<std::uint32_t>(n));
  t.set_dtype("uint8");
  t.set_requires_grad(true);
  return t;
}

bool same(const pb::Tensor& a, const pb::Tensor& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

}  // namespace

TEST_CASE("split and combine at chunk boundaries") {
  struct Case { std::size_t bytes; std::size_t chunks; };
  const Case cases[] = {{0, 0}, {1, 1}, {64 * KiB, 1}, {64 * KiB + 1, 2}, {1024 * KiB, 16}};
  for (const Case& c : cases) {
    INFO(c.bytes << " bytes");
    const pb::Tensor original = tensor_of_bytes(c.bytes);
    const auto parts = msg::split_for_streaming(original);
    REQUIRE(parts.size() == std::max<std::size_t>(c.chunks, 1));
    // The first chunk carries the metadata and the count; the others only bytes.
    CHECK(parts[0].chunks() == static_cast<int>(c.chunks));
    CHECK(parts[0].dtype() == "uint8");
    CHECK(parts[0].size_size() == 1);
    CHECK(parts[0].requires_grad());
    std::size_t total = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      CHECK(parts[i].buffer().size() <= msg::default_chunk_bytes);
      if (i + 1 < parts.size()) CHECK(parts[i].buffer().size() == msg::default_chunk_bytes);
      if (i > 0) {
        CHECK(parts[i].dtype().empty());
        CHECK(parts[i].size_size() == 0);
        CHECK(parts[i].chunks() == 0);
      }
      total += parts[i].buffer().size();
    }
    CHECK(total == c.bytes);
    auto joined = msg::combine_from_streaming(parts);
    REQUIRE(joined.ok());
    CHECK(same(*joined, original));
  }
}

TEST_CASE("custom chunk sizes, and 0 meaning the default") {
  const pb::Tensor original = tensor_of_bytes(1000);
  CHECK(msg::split_for_streaming(original, 1).size() == 1000);
  CHECK(msg::split_for_streaming(original, 999).size() == 2);
  CHECK(msg::split_for_streaming(original, 1000).size() == 1);
  CHECK(msg::split_for_streaming(original, 0).size() == 1);
  auto joined = msg::combine_from_streaming(msg::split_for_streaming(original, 7));
  REQUIRE(joined.ok());
  CHECK(same(*joined, original));
}

TEST_CASE("a tensor survives encode, split, the wire, combine and decode") {
  std::vector<float> values(50000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i);
  auto t = msg::Tensor::copy_of(msg::dtype::float32, {250, 200}, values.data(),
                                values.size() * sizeof(float), true);
  REQUIRE(t.ok());
  std::vector<pb::Tensor> received;
  for (const pb::Tensor& part : msg::split_for_streaming(msg::encode_none(*t))) {
    pb::Tensor copy;
    REQUIRE(copy.ParseFromString(part.SerializeAsString()));
    received.push_back(std::move(copy));
  }
  CHECK(received.size() == 4);  // 200000 bytes in 64 KiB chunks
  auto joined = msg::combine_from_streaming(std::move(received));
  REQUIRE(joined.ok());
  auto decoded = msg::decode(*joined);
  REQUIRE(decoded.ok());
  CHECK(*decoded == *t);
}

TEST_CASE("a cut or over-long stream is an error") {
  const auto parts = msg::split_for_streaming(tensor_of_bytes(200 * KiB));  // 4 chunks
  REQUIRE(parts.size() == 4);

  SECTION("empty stream") {
    CHECK(msg::combine_from_streaming({}).error().code == errc::truncated);
  }
  SECTION("last chunk missing") {
    auto r = msg::combine_from_streaming({parts.begin(), parts.end() - 1});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == errc::truncated);
    CHECK(r.error().message.find("3 of 4") != std::string::npos);
  }
  SECTION("only the first chunk") {
    CHECK(msg::combine_from_streaming({parts[0]}).error().code == errc::truncated);
  }
  SECTION("one chunk too many") {
    auto longer = parts;
    longer.push_back(parts[1]);
    CHECK(msg::combine_from_streaming(longer).error().code == errc::protocol);
  }
  SECTION("a second tensor starts before the first is complete") {
    std::vector<pb::Tensor> mixed = {parts[0], parts[1], parts[0]};
    CHECK(msg::combine_from_streaming(mixed).error().code == errc::protocol);
  }
  SECTION("a negative chunk count") {
    pb::Tensor bad = parts[0];
    bad.set_chunks(-1);
    CHECK(msg::combine_from_streaming({bad}).error().code == errc::malformed);
  }
  SECTION("an empty tensor followed by bytes") {
    auto empty = msg::split_for_streaming(tensor_of_bytes(0));
    empty.push_back(parts[1]);
    CHECK(msg::combine_from_streaming(empty).error().code == errc::protocol);
  }
}

TEST_CASE("the assembler joins chunks as they arrive and can be reused") {
  const auto parts = msg::split_for_streaming(tensor_of_bytes(130 * KiB));  // 3 chunks
  msg::StreamAssembler assembler;
  CHECK_FALSE(assembler.started());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto done = assembler.push(parts[i]);
    REQUIRE(done.ok());
    CHECK(*done == (i + 1 == parts.size()));
  }
  CHECK(assembler.complete());
  auto first = assembler.finish();
  REQUIRE(first.ok());
  CHECK(same(*first, tensor_of_bytes(130 * KiB)));
  CHECK_FALSE(assembler.started());

  REQUIRE(assembler.push(parts[0]).ok());
  CHECK(assembler.finish().error().code == errc::truncated);
  CHECK_FALSE(assembler.started());
}
