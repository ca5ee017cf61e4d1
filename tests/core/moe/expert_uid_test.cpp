// Expert uids and prefixes against hivemind's grammar (reference §6.2, test_uid_patterns),
// and uid patterns: their expansion, and sampling distinct uids from them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/moe/expert_uid.hpp"

namespace {

namespace moe = apiary::core::moe;
using apiary::core::Rng;

}  // namespace

TEST_CASE("uids and prefixes follow hivemind's grammar", "[moe]") {
  const std::vector<std::string> uids{"expert.1",         "expert.0",       "expert.0.0.1",          "expert.1337",
                                      "ffn.12.34.56.78.90", "transformer.3.2.1.0", "transformer_encoder.2",
                                      "transformer::encoder.2", "T\xc2\xae@nsf0rmE\xc2\xae\xf0\x9f\xa4\x97.2",
                                      "\xf0\x9f\xa4\x97.321", "0.1.2", "00.1.2", "7070.3.2.1.0", "block2.1.23"};
  for (const std::string& uid : uids) {
    INFO(uid);
    CHECK(moe::is_valid_uid(uid));
    CHECK_FALSE(moe::is_valid_prefix(uid));
    CHECK(moe::is_valid_prefix(uid + "."));
    auto split = moe::split_uid(uid);
    REQUIRE(split);
    CHECK(moe::is_valid_prefix(split->prefix));
  }
  for (const std::string prefix : {"expert.", "e.1.", "e.2.", "e.1.2.3.", "ololo.123.456.789.10."}) {
    INFO(prefix);
    CHECK(moe::is_valid_prefix(prefix));
    CHECK_FALSE(moe::is_valid_uid(prefix));
  }
  const std::vector<std::string> neither{"",        ".",       "expert.-1", "xxx.a",      "expert.1x",
                                         "expert_ffn.1.abc1",  "some.123.01", "expert.123.01", "e1",
                                         "e..1",    "e",       "e.1.2.3..4", "ffn.1..1",   ".123",
                                         ".1.2.3.", ".expert", "transformer.encoder.2",
                                         "T\xc2\xae@nsf0rmE\xc2\xae.\xf0\x9f\xa4\x97.2", "e.1 ", "e.1\n", "e.+1"};
  for (const std::string& text : neither) {
    INFO(text);
    CHECK_FALSE(moe::is_valid_uid(text));
    CHECK_FALSE(moe::is_valid_prefix(text));
  }
  CHECK_FALSE(moe::is_valid_prefix("e.01."));
  CHECK_FALSE(moe::is_valid_prefix("e.1.."));
}

TEST_CASE("split_uid and parse_uid take a uid apart", "[moe]") {
  for (const std::string text : {"e.1.2.3", "e.1.2.3."}) {
    auto split = moe::split_uid(text);
    REQUIRE(split);
    CHECK(split->prefix == "e.1.2.");
    CHECK(split->coordinate == 3);
  }
  auto flat = moe::split_uid("expert.5");
  REQUIRE(flat);
  CHECK(flat->prefix == "expert.");
  CHECK(flat->coordinate == 5);

  auto root = moe::split_uid("ffn.");
  REQUIRE_FALSE(root);
  CHECK(root.error().code == apiary::errc::invalid_argument);
  CHECK(root.error().message.find("'ffn.'") != std::string::npos);

  auto parts = moe::parse_uid("ffn.12.0.7");
  REQUIRE(parts);
  CHECK(parts->root == "ffn");
  CHECK(parts->coordinates == std::vector<std::int64_t>{12, 0, 7});
  CHECK(moe::parse_uid("e.9223372036854775807"));
  auto overflow = moe::parse_uid("e.9223372036854775808");
  REQUIRE_FALSE(overflow);
  CHECK(overflow.error().message.find("64 bits") != std::string::npos);
  auto bad = moe::parse_uid("transformer.encoder.2");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("'transformer.encoder.2' is not a valid expert uid") != std::string::npos);
}

TEST_CASE("a uid pattern expands to every uid of its ranges", "[moe]") {
  auto grid = moe::UidPattern::parse("expert.[0:4].[0:4]");
  REQUIRE(grid);
  CHECK(grid->size() == 16);
  auto all = grid->expand();
  REQUIRE(all);
  REQUIRE(all->size() == 16);
  CHECK(all->front() == "expert.0.0");
  CHECK((*all)[1] == "expert.0.1");
  CHECK((*all)[4] == "expert.1.0");
  CHECK(all->back() == "expert.3.3");
  for (const std::string& uid : *all) CHECK(moe::is_valid_uid(uid));

  auto ffn = moe::UidPattern::parse("ffn.[0:256]");
  REQUIRE(ffn);
  CHECK(ffn->expand()->size() == 256);
  CHECK(ffn->expand()->back() == "ffn.255");

  auto fixed = moe::UidPattern::parse("ffn.3.[10:12]");
  REQUIRE(fixed);
  CHECK(*fixed->expand() == std::vector<std::string>{"ffn.3.10", "ffn.3.11"});
  auto plain = moe::UidPattern::parse("ffn.3.14");
  REQUIRE(plain);
  CHECK(plain->size() == 1);
  CHECK(*plain->expand() == std::vector<std::string>{"ffn.3.14"});

  auto big = moe::UidPattern::parse("e.[0:1000].[0:1000].[0:1000]");
  REQUIRE(big);
  CHECK(big->size() == 1000000000);
  auto refused = big->expand(1000);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().code == apiary::errc::too_large);
}

TEST_CASE("malformed uid patterns are refused naming the block", "[moe]") {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"ffn.[4:2]", "[4:2]"}, {"ffn.[a:3]", "[a:3]"}, {"ffn.[0:3", "[0:3"}, {"ffn.[-1:3]", "[-1:3]"},
      {"ffn.x.[0:3]", "'x'"}, {"ffn.03", "'03'"},    {"ffn..1", "''"},     {"[x].1", "[x]"},
      {"ffn.[0:2]x", "[0:2]x"}};
  for (const auto& [pattern, block] : cases) {
    INFO(pattern);
    auto parsed = moe::UidPattern::parse(pattern);
    REQUIRE_FALSE(parsed);
    CHECK(parsed.error().code == apiary::errc::invalid_argument);
    CHECK(parsed.error().message.find(block) != std::string::npos);
  }
  auto no_coordinate = moe::UidPattern::parse("ffn");
  REQUIRE_FALSE(no_coordinate);
  CHECK(no_coordinate.error().message.find("no coordinate block") != std::string::npos);
  Rng rng(1);
  CHECK_FALSE(moe::generate_uids_from_pattern(4, "ffn.[2:2]", rng));
}

TEST_CASE("uids sampled from a pattern are distinct members of it and repeat with the seed", "[moe]") {
  const std::string pattern = "expert.[0:4].[0:4]";
  const auto members = *moe::UidPattern::parse(pattern)->expand();
  const std::set<std::string> universe(members.begin(), members.end());
  Rng a(42);
  auto first = moe::generate_uids_from_pattern(10, pattern, a);
  REQUIRE(first);
  REQUIRE(first->size() == 10);
  CHECK(std::set<std::string>(first->begin(), first->end()).size() == 10);
  for (const std::string& uid : *first) CHECK(universe.count(uid) == 1);
  Rng again(42);
  CHECK(*moe::generate_uids_from_pattern(10, pattern, again) == *first);
  Rng other(43);
  CHECK(*moe::generate_uids_from_pattern(10, pattern, other) != *first);

  // More than the pattern holds: every one of its 16 uids, then the attempts run out.
  Rng c(7);
  auto everything = moe::generate_uids_from_pattern(20, pattern, c);
  REQUIRE(everything);
  CHECK(std::set<std::string>(everything->begin(), everything->end()) == universe);

  // No pattern: expert.0, expert.1, ...
  auto plain = moe::generate_uids_from_pattern(3, "", c);
  CHECK(*plain == std::vector<std::string>{"expert.0", "expert.1", "expert.2"});
}

TEST_CASE("the uid sampler drops uids the DHT holds and draws again", "[moe]") {
  moe::UidSampler sampler(*moe::UidPattern::parse("e.[0:6]"), 3);
  Rng rng(5);
  const auto round1 = sampler.next_candidates(rng);
  REQUIRE(round1.size() == 3);
  const std::set<std::string> taken{round1[0], round1[2]};
  sampler.accept(round1, taken);
  CHECK_FALSE(sampler.done());
  CHECK(sampler.found() == std::vector<std::string>{round1[1]});
  const auto round2 = sampler.next_candidates(rng);
  REQUIRE(round2.size() == 2);
  for (const std::string& uid : round2) CHECK(std::find(round1.begin(), round1.end(), uid) == round1.end());
  sampler.accept(round2, {});
  CHECK(sampler.done());
  CHECK(sampler.found().size() == 3);
  for (const std::string& uid : sampler.found()) CHECK(taken.count(uid) == 0);
}
