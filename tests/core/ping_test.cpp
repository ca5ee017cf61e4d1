// core::ping::Pinger driven by hand: every input is a direct call, every output an
// inspected effect.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/ping/pinger.hpp"
#include "ping.pb.h"
#include "tests/core/effects_of.hpp"
#include "tests/support/peer_addr.hpp"

namespace {
using apiary::test::operator""_addr;

using namespace std::chrono_literals;
using apiary::errc;
using namespace apiary::core;
using apiary::testing::all_of;
namespace ping = apiary::core::ping;
namespace pb = apiary::pb;

const PeerAddr k_self = "/ip4/10.0.0.1/tcp/4100"_addr;
const PeerAddr k_a = "/ip4/10.0.0.2/tcp/4100"_addr;
const PeerAddr k_b = "/ip4/10.0.0.3/tcp/4100"_addr;
const PeerAddr k_c = "/ip4/10.0.0.4/tcp/4100"_addr;

// `message` (a probe or an ack, its address set) with `seq` and the `known` peers, serialized.
template <typename Message>
std::string with_known(Message message, std::uint64_t seq, const std::vector<PeerAddr>& known) {
  message.set_seq(seq);
  for (const auto& k : known) message.add_known_peers(k.multiaddr());
  return message.SerializeAsString();
}

std::string probe_bytes(std::uint64_t seq, const PeerAddr& sender,
                        const std::vector<PeerAddr>& known) {
  pb::PingProbe probe;
  probe.set_sender_addr(sender.multiaddr());
  return with_known(std::move(probe), seq, known);
}

std::string ack_bytes(std::uint64_t seq, const PeerAddr& responder,
                      const std::vector<PeerAddr>& known) {
  pb::PingAck ack;
  ack.set_responder_addr(responder.multiaddr());
  return with_known(std::move(ack), seq, known);
}

pb::PingProbe parse_probe(const Call& call) {
  pb::PingProbe probe;
  REQUIRE(probe.ParseFromString(call.request));
  return probe;
}

std::vector<PeerAddr> known(const ping::Pinger& p) {
  std::vector<PeerAddr> out;
  for (const auto& [addr, stats] : p.peers()) out.push_back(addr);
  return out;
}

// Bytes that are not a protobuf message: field 2 announces 5 bytes, only 2 follow.
const std::string k_garbage = std::string("\x12\x05" "ab", 4);

}  // namespace

TEST_CASE("start learns the bootstrap peers and arms the first round now") {
  ping::Pinger p(k_self, {});
  const Effects out = p.start(5s, {k_b, k_a, k_self, PeerAddr{}, k_a});
  CHECK(known(p) == std::vector<PeerAddr>{k_a, k_b});
  REQUIRE(out.size() == 1);
  const auto timers = all_of<SetTimer>(out);
  REQUIRE(timers.size() == 1);
  CHECK(timers[0].id == ping::k_round_timer);
  CHECK(timers[0].at == TimePoint(5s));
  CHECK(p.rounds() == 0);
}

TEST_CASE("a round calls every known peer in address order and re-arms the timer") {
  ping::Config config;
  config.interval = 3s;
  config.timeout = 700ms;
  ping::Pinger p(k_self, config);
  (void)p.start(0s, {k_c, k_a, k_b});

  const Effects out = p.on_timer(10s, ping::k_round_timer);
  const auto calls = all_of<Call>(out);
  REQUIRE(calls.size() == 3);
  CHECK(calls[0].peer == k_a);
  CHECK(calls[1].peer == k_b);
  CHECK(calls[2].peer == k_c);
  for (const auto& call : calls) {
    CHECK(call.handle == ping::k_handle);
    CHECK(call.timeout == Duration(700ms));
    const auto probe = parse_probe(call);
    CHECK(probe.sender_addr() == k_self);
    CHECK(std::vector<std::string>(probe.known_peers().begin(), probe.known_peers().end()) ==
          apiary::messages::multiaddrs_of({k_a, k_b, k_c}));
  }
  // Call ids and seqs are distinct.
  CHECK(calls[0].id != calls[1].id);
  CHECK(calls[1].id != calls[2].id);
  CHECK(parse_probe(calls[0]).seq() != parse_probe(calls[1]).seq());
  // The re-arm comes last.
  REQUIRE(std::holds_alternative<SetTimer>(out.back()));
  CHECK(std::get<SetTimer>(out.back()).at == TimePoint(13s));
  CHECK(p.rounds() == 1);
  CHECK(p.in_flight() == 3);
  CHECK(p.peers().at(k_b).sent == 1);

  SECTION("an unknown timer id is ignored") {
    CHECK(p.on_timer(11s, ping::k_round_timer + 1).empty());
    CHECK(p.rounds() == 1);
  }
}

TEST_CASE("a probe teaches the responder the sender and its view, and gets an ack") {
  ping::Pinger p(k_self, {});
  (void)p.start(0s, {k_a});
  const Effects out = p.on_request(1s, 77, probe_bytes(9, k_b, {k_c, k_self, k_a}));
  CHECK(known(p) == std::vector<PeerAddr>{k_a, k_b, k_c});

  const auto replies = all_of<Reply>(out);
  REQUIRE(replies.size() == 1);
  CHECK(replies[0].request == 77);
  REQUIRE(replies[0].response.ok());
  pb::PingAck ack;
  REQUIRE(ack.ParseFromString(replies[0].response.value()));
  CHECK(ack.seq() == 9);
  CHECK(ack.responder_addr() == k_self);
  CHECK(std::vector<std::string>(ack.known_peers().begin(), ack.known_peers().end()) ==
        apiary::messages::multiaddrs_of({k_a, k_b, k_c}));
}

TEST_CASE("an ack records the RTT since the call and teaches the caller its view") {
  ping::Pinger p(k_self, {});
  (void)p.start(0s, {k_a});
  const auto calls = all_of<Call>(p.on_timer(2s, ping::k_round_timer));
  REQUIRE(calls.size() == 1);
  const auto seq = parse_probe(calls[0]).seq();

  CHECK(p.on_response(TimePoint(2s) + 13ms, calls[0].id, ack_bytes(seq, k_a, {k_b, k_self}))
            .empty());
  const auto& stats = p.peers().at(k_a);
  CHECK(stats.answered == 1);
  CHECK(stats.failed == 0);
  CHECK(stats.last_rtt == Duration(13ms));
  CHECK(stats.rtts == std::vector<Duration>{13ms});
  CHECK(known(p) == std::vector<PeerAddr>{k_a, k_b});
  CHECK(p.in_flight() == 0);

  SECTION("a second answer to the same call is ignored") {
    CHECK(p.on_response(3s, calls[0].id, ack_bytes(seq, k_a, {})).empty());
    CHECK(p.peers().at(k_a).answered == 1);
  }
  SECTION("an answer to a call never made is ignored") {
    CHECK(p.on_response(3s, calls[0].id + 100, ack_bytes(seq, k_a, {k_c})).empty());
    CHECK(known(p) == std::vector<PeerAddr>{k_a, k_b});
  }
}

TEST_CASE("RTT history keeps the newest samples only") {
  ping::Config config;
  config.history = 3;
  ping::Pinger p(k_self, config);
  (void)p.start(0s, {k_a});
  for (int round = 1; round <= 5; ++round) {
    const TimePoint at = TimePoint(std::chrono::seconds(round));
    const auto calls = all_of<Call>(p.on_timer(at, ping::k_round_timer));
    REQUIRE(calls.size() == 1);
    (void)p.on_response(at + std::chrono::milliseconds(round), calls[0].id,
                        ack_bytes(parse_probe(calls[0]).seq(), k_a, {}));
  }
  const auto& stats = p.peers().at(k_a);
  CHECK(stats.answered == 5);
  CHECK(stats.rtts == std::vector<Duration>{3ms, 4ms, 5ms});
  CHECK(stats.last_rtt == Duration(5ms));
}

TEST_CASE("a malformed probe gets a malformed error and teaches nothing") {
  ping::Pinger p(k_self, {});
  const auto replies = all_of<Reply>(p.on_request(0s, 5, k_garbage));
  REQUIRE(replies.size() == 1);
  CHECK(replies[0].request == 5);
  REQUIRE_FALSE(replies[0].response.ok());
  CHECK(replies[0].response.error().code == errc::malformed);
  CHECK_THAT(replies[0].response.error().message, Catch::Contains("PingProbe"));
  CHECK(p.peers().empty());
}

TEST_CASE("a bad ack is recorded as a failure for that peer") {
  ping::Pinger p(k_self, {});
  (void)p.start(0s, {k_a});
  const auto calls = all_of<Call>(p.on_timer(0s, ping::k_round_timer));
  REQUIRE(calls.size() == 1);

  SECTION("unparsable bytes") {
    (void)p.on_response(1ms, calls[0].id, k_garbage);
    const auto& stats = p.peers().at(k_a);
    CHECK(stats.failed == 1);
    CHECK(stats.answered == 0);
    CHECK(stats.rtts.empty());
    CHECK_THAT(stats.last_error, Catch::StartsWith("malformed"));
  }
  SECTION("an ack echoing another seq") {
    (void)p.on_response(1ms, calls[0].id, ack_bytes(parse_probe(calls[0]).seq() + 1, k_a, {k_b}));
    const auto& stats = p.peers().at(k_a);
    CHECK(stats.failed == 1);
    CHECK(stats.answered == 0);
    CHECK_THAT(stats.last_error, Catch::StartsWith("protocol"));
    CHECK(known(p) == std::vector<PeerAddr>{k_a});  // nothing learned from it
  }
  CHECK(p.in_flight() == 0);
}

TEST_CASE("a failed call counts as failed and keeps its message") {
  ping::Pinger p(k_self, {});
  (void)p.start(0s, {k_a, k_b});
  const auto calls = all_of<Call>(p.on_timer(0s, ping::k_round_timer));
  REQUIRE(calls.size() == 2);
  (void)p.on_response(2s, calls[1].id,
                      apiary::make_error(errc::deadline_exceeded, "no reply from {}", k_b));
  CHECK(p.peers().at(k_b).failed == 1);
  CHECK(p.peers().at(k_b).last_error == "deadline_exceeded: no reply from " + k_b.multiaddr());
  CHECK(p.peers().at(k_a).failed == 0);
  CHECK(p.in_flight() == 1);
}

TEST_CASE("a pinger never adds itself") {
  ping::Pinger p(k_self, {});
  (void)p.start(0s, {k_self});
  CHECK(p.peers().empty());
  (void)p.on_request(0s, 1, probe_bytes(1, k_self, {k_self}));
  CHECK(p.peers().empty());
  CHECK(all_of<Call>(p.on_timer(0s, ping::k_round_timer)).empty());

  (void)p.start(0s, {k_a});
  const auto calls = all_of<Call>(p.on_timer(1s, ping::k_round_timer));
  REQUIRE(calls.size() == 1);
  (void)p.on_response(1s, calls[0].id, ack_bytes(parse_probe(calls[0]).seq(), k_self, {k_self}));
  CHECK(known(p) == std::vector<PeerAddr>{k_a});
}

TEST_CASE("the peer table is bounded by max_peers") {
  ping::Config config;
  config.max_peers = 3;
  ping::Pinger p(k_self, config);
  std::vector<PeerAddr> many;
  for (int i = 0; i < 10; ++i) many.push_back(apiary::test::addr_of("/ip4/10.1.0." + std::to_string(i) + "/tcp/1"));
  (void)p.on_request(0s, 1, probe_bytes(1, many[9], many));
  REQUIRE(p.peers().size() == 3);
  // The first three learned stay: the sender, then the probe's list in order.
  CHECK(known(p) == std::vector<PeerAddr>{many[0], many[1], many[9]});
  (void)p.start(0s, {k_a});
  CHECK(p.peers().size() == 3);
  CHECK(all_of<Call>(p.on_timer(0s, ping::k_round_timer)).size() == 3);
}

TEST_CASE("PeerStats summarises its kept RTTs") {
  ping::PeerStats stats;
  CHECK(stats.min_rtt() == Duration::zero());
  CHECK(stats.median_rtt() == Duration::zero());
  stats.rtts = {40ms, 10ms, 30ms, 20ms};
  CHECK(stats.min_rtt() == Duration(10ms));
  CHECK(stats.median_rtt() == Duration(30ms));
  CHECK(stats.max_rtt() == Duration(40ms));
  stats.rtts = {5ms, 1ms, 3ms};
  CHECK(stats.median_rtt() == Duration(3ms));
}

TEST_CASE("validate rejects configs that cannot run") {
  CHECK(ping::validate(ping::Config{}).ok());
  ping::Config bad;
  bad.interval = Duration::zero();
  CHECK(ping::validate(bad).error().code == errc::invalid_argument);
  bad = {};
  bad.timeout = -1ms;
  CHECK_THAT(ping::validate(bad).error().message, Catch::Contains("timeout"));
  bad = {};
  bad.max_peers = 0;
  CHECK_THAT(ping::validate(bad).error().message, Catch::Contains("max_peers"));
}
