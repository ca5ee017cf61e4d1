// The log facade: levels filter events, fields keep their order, text and JSON lines
// are well formed, levels parse with a clear error, the sink and clock are injected.
#include <catch2/catch.hpp>

#include "messages/log/log.hpp"

using namespace apiary;
using namespace apiary::log;

namespace {

struct Captured {
  Level level;
  double time;
  std::string event;
  std::vector<Field> fields;
};

}  // namespace

TEST_CASE("a logger writes events at its level and above to its sink, stamped by its clock", "[log]") {
  std::vector<Captured> seen;
  double t = 12.5;
  Logger logger([&](const Record& r) { seen.push_back({r.level, r.time, std::string(r.event), r.fields}); },
                Level::info, [&] { return t; });
  logger.log(Level::debug, "dropped", "k", 1);
  logger.log(Level::info, "dht.store", "key", "abc", "replicas", 3, "ok", true);
  t = 13.0;
  logger.log(Level::error, "gateway.peer_down", "peer", "127.0.0.1:4100");
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].event == "dht.store");
  CHECK(seen[0].time == 12.5);
  REQUIRE(seen[0].fields.size() == 3);
  CHECK(seen[0].fields[0].key == "key");
  CHECK(seen[0].fields[1].value == "3");
  CHECK(seen[0].fields[2].value == "true");
  CHECK(seen[1].level == Level::error);
  CHECK(seen[1].time == 13.0);

  logger.set_level(Level::off);
  logger.log(Level::error, "silenced");
  CHECK(seen.size() == 2);
  CHECK(!logger.enabled(Level::error));
  logger.set_level(Level::trace);
  CHECK(logger.enabled(Level::trace));
}

TEST_CASE("events format as text and as JSON lines, values quoted and escaped", "[log]") {
  std::vector<Field> fields{{"peer", "127.0.0.1:4100"}, {"why", "connection \"reset\" by peer"}, {"n", "2"}};
  Record r{Level::warn, 1.25, "gateway.peer_down", fields};
  CHECK(format_text(r) == R"(1.250000 warn gateway.peer_down peer=127.0.0.1:4100 why="connection \"reset\" by peer" n=2)");
  CHECK(format_json(r) ==
        R"({"time":1.250000,"level":"warn","event":"gateway.peer_down","peer":"127.0.0.1:4100","why":"connection \"reset\" by peer","n":"2"})");
  std::vector<Field> control{{"line", "a\nb\x01"}};
  CHECK(format_json(Record{Level::info, 0, "x", control}) == R"({"time":0.000000,"level":"info","event":"x","line":"a\nb\u0001"})");
}

TEST_CASE("levels parse by name, anything else is refused naming the accepted levels", "[log]") {
  CHECK(*parse_level("debug") == Level::debug);
  CHECK(*parse_level("warning") == Level::warn);
  CHECK(*parse_level("off") == Level::off);
  auto bad = parse_level("loud");
  REQUIRE(!bad.ok());
  CHECK(bad.error().code == errc::invalid_argument);
  CHECK(bad.error().message.find("'loud'") != std::string::npos);
  CHECK(bad.error().message.find("trace, debug, info, warn, error, off") != std::string::npos);
  CHECK(!set_process_level("loud").ok());
  REQUIRE(set_process_level("error").ok());
  CHECK(process_logger().level() == Level::error);
}
