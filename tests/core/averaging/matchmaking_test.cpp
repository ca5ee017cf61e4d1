// core::averaging::Matchmaking run as a small swarm (tests/core/averaging/matchmaking_harness.hpp):
// the reference's happy path, groups of a target size, min_group_size at the leader's
// expiration, too few peers, a disbanded group following its suggested leader, client
// mode, the Moshpit update, and determinism under a seed.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/core/averaging/matchmaking_harness.hpp"

namespace {

using apiary::core::TimePoint;
using apiary::test::Swarm;
using std::chrono::milliseconds;
using std::chrono::seconds;
namespace mm = apiary::core::averaging;

/// A step whose declaration expires at `at_s` seconds of virtual time.
mm::StepParams step(double at_s, const std::string& gather, const std::string& key = "run.0b") {
  mm::StepParams p;
  p.scheduled_time = Swarm::k_epoch + at_s;
  p.deadline = Swarm::k_epoch + 30;
  p.gather = gather;
  p.min_matchmaking_time = seconds(1);
  p.request_timeout = milliseconds(500);
  p.schema_hash = "schema-1";
  p.group_key = key;
  return p;
}

/// Group id -> members, from every successful outcome; fails the test on a missing one.
std::map<std::string, std::vector<std::string>> groups_of(Swarm& swarm) {
  std::map<std::string, std::vector<std::string>> groups;
  for (std::size_t n = 0; n < swarm.size(); ++n) {
    const auto& out = swarm.outcome(n);
    REQUIRE(out.has_value());
    INFO(swarm.node(n).peer_id() << ": " << (out->second.ok() ? "" : out->second.error().what()));
    REQUIRE(out->second.ok());
    const mm::GroupInfo& g = out->second.value();
    auto [it, fresh] = groups.emplace(g.group_id, g.peers);
    if (!fresh) CHECK(it->second == g.peers);  // every member sees the same order
  }
  return groups;
}

}  // namespace

TEST_CASE("three peers: the earliest-expiring one leads and all get the same group", "[matchmaking]") {
  Swarm swarm(7);
  for (const char* id : {"A", "B", "C"}) swarm.add(id);
  swarm.start_at(TimePoint{}, 0, step(5, "gA"));
  swarm.start_at(TimePoint{}, 1, step(6, "gB"));
  swarm.start_at(TimePoint{}, 2, step(7, "gC"));
  swarm.run_until(seconds(40));

  auto groups = groups_of(swarm);
  REQUIRE(groups.size() == 1);
  const auto& peers = groups.begin()->second;
  CHECK(std::set<std::string>(peers.begin(), peers.end()) == std::set<std::string>{"A", "B", "C"});
  CHECK(groups.begin()->first.size() == mm::k_group_id_bytes);
  for (std::size_t n = 0; n < 3; ++n) {
    const auto& out = *swarm.outcome(n);
    const mm::GroupInfo& g = out.second.value();
    CHECK(g.leader == "A");
    CHECK(g.peers[g.my_index] == swarm.node(n).peer_id());
    // No target size: A assembles at its own expiration (5 s), not before.
    CHECK(out.first >= seconds(5));
    CHECK(out.first < milliseconds(5100));
    // The gathered bytes follow the member order.
    for (std::size_t i = 0; i < g.peers.size(); ++i) CHECK(g.gathered[i] == "g" + g.peers[i]);
  }
  // B and C were accepted, then told to begin; nobody was rejected.
  for (const auto& m : swarm.leader_messages()) {
    CHECK(m.from == "A");
    CHECK((m.code == apiary::pb::ACCEPTED || m.code == apiary::pb::BEGIN_ALLREDUCE));
  }
  // Everyone left: the last declaration of each peer says `false`.
  for (const char* id : {"A", "B", "C"}) {
    CHECK_FALSE(swarm.dht().table.at("run.0b").at(id).first);
  }
}

TEST_CASE("eight peers with target size 4 form two full groups at once", "[matchmaking]") {
  Swarm swarm(11);
  for (int i = 0; i < 8; ++i) {
    swarm.add(std::string("P") + static_cast<char>('0' + i));
    auto p = step(5 + 0.1 * i, "g");
    p.target_group_size = 4;
    swarm.start_at(TimePoint{}, static_cast<std::size_t>(i), p);
  }
  swarm.run_until(seconds(40));
  auto groups = groups_of(swarm);
  REQUIRE(groups.size() == 2);
  std::set<std::string> everyone;
  for (const auto& [id, peers] : groups) {
    CHECK(peers.size() == 4);
    everyone.insert(peers.begin(), peers.end());
  }
  CHECK(everyone.size() == 8);
  // Full groups start without waiting for the leaders' expirations.
  for (std::size_t n = 0; n < 8; ++n) CHECK(swarm.outcome(n)->first < seconds(5));
}

TEST_CASE("a group meeting min_group_size forms at the leader's expiration", "[matchmaking]") {
  Swarm swarm(3);
  for (const char* id : {"A", "B", "C"}) swarm.add(id);
  for (std::size_t n = 0; n < 3; ++n) {
    auto p = step(4 + static_cast<double>(n), "g");
    p.target_group_size = 4;
    p.min_group_size = 3;
    swarm.start_at(TimePoint{}, n, p);
  }
  swarm.run_until(seconds(40));
  auto groups = groups_of(swarm);
  REQUIRE(groups.size() == 1);
  CHECK(groups.begin()->second.size() == 3);
  CHECK(swarm.outcome(0)->first >= seconds(4));
  CHECK(swarm.outcome(0)->first < milliseconds(4100));
}

TEST_CASE("a peer that asked the leader before its store was confirmed joins it later", "[matchmaking]") {
  // Each store is visible to readers 10 ms after it is sent but confirmed to its peer
  // only 100 ms later. D reads A's declaration and asks A before A knows it is declared
  // (NOT_DECLARED); B and C ask later and are accepted. D asks A again rather than leave
  // it for this declaration (it would be alone when A's group of three forms).
  Swarm swarm(5);
  swarm.delay_store_acks(milliseconds(100));
  for (const char* id : {"A", "B", "C", "D"}) swarm.add(id);
  const TimePoint starts[] = {TimePoint{}, milliseconds(150), milliseconds(150), milliseconds(5)};
  for (std::size_t n = 0; n < 4; ++n) {
    auto p = step(2, "g");
    p.target_group_size = 4;
    swarm.start_at(starts[n], n, p);
  }
  swarm.run_until(seconds(40));
  bool not_declared = false;
  for (const auto& m : swarm.leader_messages()) not_declared |= m.code == apiary::pb::NOT_DECLARED && m.to == "D";
  CHECK(not_declared);
  auto groups = groups_of(swarm);
  REQUIRE(groups.size() == 1);
  CHECK(groups.begin()->second.size() == 4);
  // The group is full before A's expiration.
  CHECK(swarm.outcome(0)->first < seconds(2));
}

TEST_CASE("a leader that was not declared yet is asked again before its expiration", "[matchmaking]") {
  // No follower names A to D here: D reads the queue again and asks A once more.
  Swarm swarm(6);
  swarm.delay_store_acks(milliseconds(100));
  for (const char* id : {"A", "D"}) swarm.add(id);
  for (std::size_t n = 0; n < 2; ++n) {
    auto p = step(2, "g");
    p.target_group_size = 2;
    swarm.start_at(milliseconds(5 * n), n, p);
  }
  swarm.run_until(seconds(40));
  REQUIRE(swarm.leader_messages().size() >= 2);
  CHECK(swarm.leader_messages().front().code == apiary::pb::NOT_DECLARED);
  auto groups = groups_of(swarm);
  REQUIRE(groups.size() == 1);
  CHECK(swarm.outcome(1)->first < seconds(2));
}

TEST_CASE("too few peers fail clearly at the deadline", "[matchmaking]") {
  SECTION("two peers, three needed") {
    Swarm swarm(5);
    for (const char* id : {"A", "B"}) swarm.add(id);
    for (std::size_t n = 0; n < 2; ++n) {
      auto p = step(2 + static_cast<double>(n), "g");
      p.min_group_size = 3;
      p.deadline = Swarm::k_epoch + 8;
      swarm.start_at(TimePoint{}, n, p);
    }
    swarm.run_until(seconds(40));
    for (std::size_t n = 0; n < 2; ++n) {
      const auto& out = swarm.outcome(n);
      REQUIRE(out.has_value());
      REQUIRE_FALSE(out->second.ok());
      CHECK(out->second.error().code == apiary::errc::deadline_exceeded);
      CHECK_THAT(out->second.error().message, Catch::Contains("could not find a group"));
      CHECK(out->first <= seconds(8));
      CHECK(out->first >= milliseconds(7900));
      CHECK_FALSE(swarm.node(n).searching());
    }
    // A disbanded B at its expiration (no suggestion) and declared again, later each time.
    bool disbanded = false;
    for (const auto& m : swarm.leader_messages()) {
      if (m.from == "A" && m.code == apiary::pb::GROUP_DISBANDED) {
        CHECK(m.suggested_leader.empty());
        disbanded = true;
      }
    }
    CHECK(disbanded);
    std::vector<double> a_declared;
    for (const auto& d : swarm.dht().stores) {
      if (d.peer == "A" && d.looking) a_declared.push_back(d.expiration);
    }
    REQUIRE(a_declared.size() >= 3);
    for (std::size_t i = 1; i < a_declared.size(); ++i) CHECK(a_declared[i] > a_declared[i - 1]);
    CHECK(a_declared.back() == Approx(Swarm::k_epoch + 8));  // capped by the deadline
  }
  SECTION("four peers in four different buckets (the reference's test_too_few_peers)") {
    Swarm swarm(5);
    const char* keys[] = {"run.0b000", "run.0b001", "run.0b010", "run.0b011"};
    for (std::size_t n = 0; n < 4; ++n) {
      swarm.add(std::string("P") + static_cast<char>('0' + n));
      auto p = step(1, "g", keys[n]);
      p.target_group_size = 2;
      p.deadline = Swarm::k_epoch + 2;
      swarm.start_at(TimePoint{}, n, p);
    }
    swarm.run_until(seconds(40));
    for (std::size_t n = 0; n < 4; ++n) {
      REQUIRE(swarm.outcome(n).has_value());
      CHECK_FALSE(swarm.outcome(n)->second.ok());
    }
  }
}

TEST_CASE("unreachable and silent leaders are skipped", "[matchmaking]") {
  Swarm swarm(19);
  for (const char* id : {"A", "B", "M"}) swarm.add(id);
  // "G" is declared in the DHT but is no peer (calls to it fail); M expires first but
  // never answers (the follower's request timeout gives up on it).
  swarm.dht_mut().store(mm::DhtDeclare{0, "run.0b", "G", true, Swarm::k_epoch + 1});
  swarm.mute(2);
  auto hung = step(2, "gM");
  hung.deadline = Swarm::k_epoch + 2.5;  // M leaves before A forms its group
  swarm.start_at(TimePoint{}, 2, hung);
  swarm.start_at(TimePoint{}, 0, step(4, "gA"));
  swarm.start_at(TimePoint{}, 1, step(5, "gB"));
  swarm.run_until(seconds(40));
  for (std::size_t n = 0; n < 2; ++n) {
    const auto& out = swarm.outcome(n);
    REQUIRE(out.has_value());
    REQUIRE(out->second.ok());
    CHECK(out->second.value().leader == "A");
    CHECK(out->second.value().peers.size() == 2);
  }
  // Both gave up on M by cancelling their calls after the request timeout.
  std::set<std::size_t> cancelled_by;
  for (const auto& c : swarm.cancelled()) cancelled_by.insert(c.first);
  CHECK(cancelled_by == std::set<std::size_t>{0, 1});
  REQUIRE(swarm.outcome(2).has_value());
  CHECK_FALSE(swarm.outcome(2)->second.ok());
}

TEST_CASE("a disbanded follower follows the suggested leader", "[matchmaking]") {
  Swarm swarm(9);
  for (const char* id : {"C", "D", "A"}) swarm.add(id);
  // C and D start first; D (later expiration) joins C. A appears at 2 s expiring at 3 s:
  // C joins A, hands D over (GROUP_DISBANDED + suggested A), and D follows.
  swarm.start_at(TimePoint{}, 0, step(5, "gC"));
  swarm.start_at(TimePoint{}, 1, step(6, "gD"));
  swarm.start_at(seconds(2), 2, step(3, "gA"));
  swarm.run_until(seconds(40));

  bool handed_over = false;
  for (const auto& m : swarm.leader_messages()) {
    if (m.from == "C" && m.to == "D" && m.code == apiary::pb::GROUP_DISBANDED) {
      CHECK(m.suggested_leader == "A");
      handed_over = true;
    }
  }
  CHECK(handed_over);
  auto groups = groups_of(swarm);
  REQUIRE(groups.size() == 1);
  const auto& peers = groups.begin()->second;
  CHECK(std::set<std::string>(peers.begin(), peers.end()) == std::set<std::string>{"A", "C", "D"});
  CHECK(swarm.outcome(1)->second.value().leader == "A");
  CHECK(swarm.outcome(0)->first >= seconds(3));  // A assembled at its expiration
}

TEST_CASE("a client-mode follower joins a leader without ever declaring", "[matchmaking]") {
  Swarm swarm(13);
  for (const char* id : {"L", "X"}) swarm.add(id);
  swarm.start_at(TimePoint{}, 0, step(3, "gL"));
  auto client = step(4, "gX");
  client.client_mode = true;
  swarm.start_at(TimePoint{}, 1, client);
  swarm.run_until(seconds(40));
  auto groups = groups_of(swarm);
  REQUIRE(groups.size() == 1);
  CHECK(groups.begin()->second.size() == 2);
  CHECK(swarm.outcome(1)->second.value().leader == "L");
  for (const auto& d : swarm.dht().stores) CHECK(d.peer != "X");
}

TEST_CASE("the Moshpit update sends groupmates to distinct buckets", "[matchmaking]") {
  Swarm swarm(17);
  for (int i = 0; i < 4; ++i) {
    swarm.add(std::string("P") + static_cast<char>('0' + i));
    auto p = step(3 + 0.1 * i, "g", "run.0b10");
    p.target_group_size = 4;
    swarm.start_at(TimePoint{}, static_cast<std::size_t>(i), p);
  }
  swarm.run_until(seconds(40));
  REQUIRE(groups_of(swarm).size() == 1);
  std::set<std::string> bits;
  for (std::size_t n = 0; n < 4; ++n) {
    const mm::GroupInfo& g = swarm.outcome(n)->second.value();
    CHECK(g.next_group_bits.size() == 2);
    CHECK(g.next_group_key == "run.0b" + g.next_group_bits);
    bits.insert(g.next_group_bits);
  }
  CHECK(bits.size() == 4);
}

TEST_CASE("the same seed gives the same groups", "[matchmaking]") {
  auto run = [](std::uint64_t seed) {
    Swarm swarm(seed);
    for (int i = 0; i < 8; ++i) {
      swarm.add(std::string("P") + static_cast<char>('0' + i));
      auto p = step(5, "g");  // equal expirations: ties broken by PeerID bytes
      p.target_group_size = 4;
      swarm.start_at(milliseconds(i), static_cast<std::size_t>(i), p);
    }
    swarm.run_until(seconds(40));
    return std::make_pair(groups_of(swarm), swarm.delivered());
  };
  const auto a = run(21), b = run(21), c = run(22);
  CHECK(a.first == b.first);
  CHECK(a.second == b.second);
  CHECK(a.first != c.first);  // other group ids
}

TEST_CASE("a crowd of 32 peers forms consistent groups of at most the target size", "[matchmaking]") {
  Swarm swarm(23);
  std::mt19937_64 gen(23);
  for (int i = 0; i < 32; ++i) {
    swarm.add("peer-" + std::to_string(100 + i));
    auto p = step(2 + static_cast<double>(gen() % 3000) / 1000.0, "g");
    p.target_group_size = 4;
    swarm.start_at(milliseconds(gen() % 500), static_cast<std::size_t>(i), p);
  }
  swarm.run_until(seconds(40));
  std::map<std::string, std::string> group_of;  // peer -> group id
  std::map<std::string, std::vector<std::string>> members;
  std::size_t grouped = 0;
  for (std::size_t n = 0; n < swarm.size(); ++n) {
    const auto& out = swarm.outcome(n);
    REQUIRE(out.has_value());
    if (!out->second.ok()) continue;
    ++grouped;
    const mm::GroupInfo& g = out->second.value();
    group_of[swarm.node(n).peer_id()] = g.group_id;
    members[g.group_id] = g.peers;
    CHECK(g.peers.size() <= 4);
    CHECK(g.peers.size() >= 2);
  }
  // Every member of a group reports that same group.
  for (const auto& [id, peers] : members) {
    for (const auto& p : peers) CHECK(group_of[p] == id);
  }
  CHECK(grouped >= 30);
}
