// Strategy I/O: AutoDist's id format, the path a file carries, and byte-exact binary
// and text round trips; decoding errors.
#include <catch2/catch.hpp>

#include <google/protobuf/util/message_differencer.h>

#include "core/strategy/builders.hpp"
#include "core/strategy/strategy_io.hpp"
#include "support.hpp"

namespace {

using namespace apiary::core::strategy;
using Strategy = apiary::pb::autodist::Strategy;
using Catch::Matchers::Contains;
using google::protobuf::util::MessageDifferencer;

Strategy sample() {
  BuilderOptions o;
  o.chunk_size = 2;
  auto s = build_strategy(BuilderKind::partitioned_ar, o, strategy_test::golden_item(), strategy_test::golden_spec(),
                          format_strategy_id(1709210096789012));
  REQUIRE(s.ok());
  return *s;
}

}  // namespace

TEST_CASE("strategy ids are UTC timestamps %Y%m%dT%H%M%SM%f") {
  CHECK(format_strategy_id(0) == "19700101T000000M000000");
  CHECK(format_strategy_id(1580515199000123) == "20200131T235959M000123");
  CHECK(format_strategy_id(1709210096789012) == "20240229T123456M789012");
  CHECK(format_strategy_id(-5) == "19700101T000000M000000");
  CHECK(default_strategy_path("20240229T123456M789012") == "/tmp/autodist/strategies/20240229T123456M789012");
}

TEST_CASE("binary round trip is byte-exact and keeps id, path, nodes and graph config") {
  Strategy s = sample();
  auto bytes = serialize_strategy(s, "/tmp/autodist/strategies/x", StrategyFormat::binary);
  REQUIRE(bytes.ok());
  CHECK(s.path() == "/tmp/autodist/strategies/x");
  auto back = parse_strategy(*bytes, StrategyFormat::binary, "x");
  REQUIRE(back.ok());
  CHECK(back->id() == "20240229T123456M789012");
  CHECK(back->path() == "/tmp/autodist/strategies/x");
  CHECK(MessageDifferencer::Equals(*back, s));
  CHECK(back->SerializeAsString() == *bytes);
}

TEST_CASE("text round trip") {
  Strategy s = sample();
  auto text = serialize_strategy(s, "out.txt", StrategyFormat::text);
  REQUIRE(text.ok());
  CHECK_THAT(*text, Contains("partitioner: \"2,1\"") && Contains("AllReduceSynchronizer {") &&
                        Contains("path: \"out.txt\""));
  auto back = parse_strategy(*text, StrategyFormat::text, "out.txt");
  REQUIRE(back.ok());
  CHECK(MessageDifferencer::Equals(*back, s));
  CHECK(to_text(*back) == *text);
}

TEST_CASE("strategy decoding errors") {
  auto text = parse_strategy("id: \"x\"\nnode_config { var_nam: \"v\" }\n", StrategyFormat::text, "s.txt");
  REQUIRE_FALSE(text.ok());
  CHECK(text.error().code == apiary::errc::malformed);
  CHECK_THAT(text.error().message, Contains("s.txt:2:") && Contains("var_nam"));
  auto binary = parse_strategy(std::string("\xff\xff\xff", 3), StrategyFormat::binary, "s.bin");
  REQUIRE_FALSE(binary.ok());
  CHECK_THAT(binary.error().message, Contains("s.bin: expected a binary Strategy message"));
}
