// core::averaging::Matchmaking driven by hand: every rejection code of rpc_join_group
// produced by a crafted JoinRequest, in the order the checks run; acceptance; handing
// followers over with suggested_leader; the follower's messages and the deadline.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "averaging.pb.h"
#include "core/averaging/matchmaking.hpp"
#include "tests/support/peer_addr.hpp"

namespace {

namespace mm = apiary::core::averaging;
namespace pb = apiary::pb;
using apiary::core::Call;
using apiary::core::Reply;
using apiary::core::TimePoint;
using std::chrono::seconds;

constexpr double k_epoch = 1000.0;

mm::Matchmaking make_role(const std::string& id, std::uint64_t seed = 1) {
  mm::MatchmakingConfig config;
  config.peer_id = id;
  config.dht_epoch = k_epoch;
  config.address_of = [](const mm::PeerIdBytes& peer) { return apiary::test::test_peer(peer); };
  return mm::Matchmaking(config, [seed]() mutable { return seed = seed * 6364136223846793005u + 1442695040888963407u; });
}

mm::StepParams params() {
  mm::StepParams p;
  p.scheduled_time = k_epoch + 10;  // declared expiration: 10 s
  p.deadline = k_epoch + 60;
  p.schema_hash = "schema-1";
  p.group_key = "run.0b01";
  p.gather = "g";
  p.target_group_size = 3;
  return p;
}

std::string request(double expiration_s, const std::string& schema = "schema-1",
                    const std::string& key = "run.0b01") {
  pb::JoinRequest r;
  r.set_schema_hash(schema);
  r.set_expiration(expiration_s);
  r.set_group_key(key);
  r.set_gather("f");
  return r.SerializeAsString();
}

/// The replies in `fx`, decoded.
std::vector<std::pair<Reply, pb::MessageFromLeader>> replies(const mm::MatchmakingEffects& fx) {
  std::vector<std::pair<Reply, pb::MessageFromLeader>> out;
  for (const auto& e : fx.rpc) {
    if (const auto* r = std::get_if<Reply>(&e)) {
      pb::MessageFromLeader m;
      REQUIRE(r->response.ok());
      REQUIRE(m.ParseFromString(r->response.value()));
      out.emplace_back(*r, m);
    }
  }
  return out;
}

/// The single code answered to request `id`.
int code_of(const mm::MatchmakingEffects& fx) {
  auto rs = replies(fx);
  REQUIRE(rs.size() == 1);
  return rs[0].second.code();
}

mm::DhtOpId declare_op(const mm::MatchmakingEffects& fx) {
  for (const auto& op : fx.dht) {
    if (const auto* d = std::get_if<mm::DhtDeclare>(&op)) return d->op;
  }
  FAIL("no DhtDeclare in the effects");
  return 0;
}

mm::DhtOpId get_op(const mm::MatchmakingEffects& fx) {
  for (const auto& op : fx.dht) {
    if (const auto* g = std::get_if<mm::DhtGetAveragers>(&op)) return g->op;
  }
  FAIL("no DhtGetAveragers in the effects");
  return 0;
}

}  // namespace

TEST_CASE("every rejection code of rpc_join_group, in check order", "[matchmaking]") {
  auto leader = make_role("L");
  const TimePoint t0{};
  const double late = k_epoch + 20;

  // Not started: NOT_LOOKING_FOR_GROUP, whatever the request.
  CHECK(code_of(leader.on_request(t0, 1, "F1", request(late))) == pb::NOT_LOOKING_FOR_GROUP);

  auto started = leader.start(t0, params());
  REQUIRE_FALSE(started.outcome.has_value());
  // Declared with min(max(scheduled, now + min_matchmaking_time), deadline) = 10 s.
  REQUIRE(leader.declared_expiration().has_value());
  CHECK(*leader.declared_expiration() == Approx(k_epoch + 10));

  CHECK(code_of(leader.on_request(t0, 2, "F1", request(late, ""))) == pb::PROTOCOL_VIOLATION);
  CHECK(code_of(leader.on_request(t0, 3, "F1", request(std::nan("")))) == pb::PROTOCOL_VIOLATION);
  CHECK(code_of(leader.on_request(t0, 4, "F1", "\xff\xff not a JoinRequest")) == pb::PROTOCOL_VIOLATION);
  CHECK(code_of(leader.on_request(t0, 5, "F1", request(late, "schema-2"))) == pb::BAD_SCHEMA_HASH);
  CHECK(code_of(leader.on_request(t0, 6, "F1", request(late, "schema-1", "run.0b10"))) ==
        pb::BAD_GROUP_KEY);
  // The DHT has not confirmed the declaration yet.
  CHECK(code_of(leader.on_request(t0, 7, "F1", request(late))) == pb::NOT_DECLARED);
  (void)leader.on_declared(t0, declare_op(started), true);
  // A follower wanting to begin before the leader's expiration.
  CHECK(code_of(leader.on_request(t0, 8, "F1", request(k_epoch + 9))) == pb::BAD_EXPIRATION_TIME);
  CHECK(code_of(leader.on_request(t0, 9, "L", request(late))) == pb::DUPLICATE_PEER_ID);

  // Accepted: the reply keeps the stream open.
  auto accepted = replies(leader.on_request(t0, 10, "F1", request(late)));
  REQUIRE(accepted.size() == 1);
  CHECK(accepted[0].second.code() == pb::ACCEPTED);
  CHECK_FALSE(accepted[0].first.last);
  CHECK(code_of(leader.on_request(t0, 11, "F1", request(late))) == pb::DUPLICATE_PEER_ID);

  // The leader is accepted by an earlier leader M: its follower F1 is handed over, and
  // new requests hear NOT_A_LEADER naming M.
  const auto call_fx = leader.on_averagers(t0, get_op(started), {{"M", k_epoch + 5}});
  const Call* call = nullptr;
  for (const auto& e : call_fx.rpc) {
    if ((call = std::get_if<Call>(&e))) break;
  }
  REQUIRE(call != nullptr);
  CHECK(call->peer == apiary::test::test_peer("M"));
  CHECK(call->stream);
  CHECK(call->handle == mm::k_join_handle);
  pb::MessageFromLeader ok;
  ok.set_code(pb::ACCEPTED);
  auto handover = replies(leader.on_message(t0, call->id, ok.SerializeAsString()));
  REQUIRE(handover.size() == 1);
  CHECK(handover[0].first.request == 10);
  CHECK(handover[0].second.code() == pb::GROUP_DISBANDED);
  CHECK(handover[0].second.suggested_leader() == "M");
  CHECK(leader.current_leader() == std::optional<std::string>("M"));
  auto not_leader = replies(leader.on_request(t0, 12, "F2", request(late)));
  REQUIRE(not_leader.size() == 1);
  CHECK(not_leader[0].second.code() == pb::NOT_A_LEADER);
  CHECK(not_leader[0].second.suggested_leader() == "M");
}

TEST_CASE("GROUP_IS_FULL and a client leader's PROTOCOL_VIOLATION", "[matchmaking]") {
  SECTION("a group already at its target size") {
    auto leader = make_role("L");
    auto p = params();
    p.target_group_size = 1;
    p.min_group_size = 1;
    auto started = leader.start(TimePoint{}, p);
    (void)leader.on_declared(TimePoint{}, declare_op(started), true);
    CHECK(code_of(leader.on_request(TimePoint{}, 1, "F1", request(k_epoch + 20))) == pb::GROUP_IS_FULL);
  }
  SECTION("a client never leads") {
    auto client = make_role("C");
    auto p = params();
    p.client_mode = true;
    auto started = client.start(TimePoint{}, p);
    for (const auto& op : started.dht) CHECK_FALSE(std::holds_alternative<mm::DhtDeclare>(op));
    CHECK(code_of(client.on_request(TimePoint{}, 1, "F1", request(k_epoch + 20))) ==
          pb::PROTOCOL_VIOLATION);
  }
}

TEST_CASE("a full group is assembled at once and every follower begins", "[matchmaking]") {
  auto leader = make_role("L", 42);
  auto started = leader.start(TimePoint{}, params());
  (void)leader.on_declared(TimePoint{}, declare_op(started), true);
  CHECK(code_of(leader.on_request(TimePoint{}, 1, "F1", request(k_epoch + 20))) == pb::ACCEPTED);
  auto fx = leader.on_request(TimePoint{}, 2, "F2", request(k_epoch + 20));
  REQUIRE(fx.outcome.has_value());
  REQUIRE(fx.outcome->ok());
  const mm::GroupInfo& g = fx.outcome->value();
  CHECK(g.peers.size() == 3);
  CHECK(g.group_id.size() == mm::k_group_id_bytes);
  auto rs = replies(fx);
  REQUIRE(rs.size() == 3);  // ACCEPTED to F2, then BEGIN_ALLREDUCE to F1 and F2
  CHECK(rs[0].second.code() == pb::ACCEPTED);
  for (std::size_t i = 1; i < 3; ++i) {
    CHECK(rs[i].second.code() == pb::BEGIN_ALLREDUCE);
    CHECK(rs[i].first.last);
    CHECK(rs[i].second.group_id() == g.group_id);
    CHECK(rs[i].second.ordered_peer_ids_size() == 3);
  }
  // Leaving: a `false` declaration just after the previous expiration.
  bool left = false;
  for (const auto& op : fx.dht) {
    if (const auto* d = std::get_if<mm::DhtDeclare>(&op)) {
      CHECK_FALSE(d->looking);
      CHECK(d->expiration > k_epoch + 10);
      CHECK(d->expiration == std::nextafter(k_epoch + 10, std::numeric_limits<double>::infinity()));
      left = true;
    }
  }
  CHECK(left);
  // Assembled: later requests hear NOT_LOOKING_FOR_GROUP.
  CHECK(code_of(leader.on_request(TimePoint{}, 3, "F3", request(k_epoch + 20))) ==
        pb::NOT_LOOKING_FOR_GROUP);
}

TEST_CASE("the declared expiration is min(max(scheduled, now + min_matchmaking_time), deadline)",
          "[matchmaking]") {
  const TimePoint now = seconds(3);
  auto p = params();
  p.scheduled_time = k_epoch;  // already past
  p.min_matchmaking_time = seconds(5);
  auto a = make_role("A");
  (void)a.start(now, p);
  CHECK(*a.declared_expiration() == Approx(k_epoch + 8));
  p.deadline = k_epoch + 6;
  auto b = make_role("B");
  (void)b.start(now, p);
  CHECK(*b.declared_expiration() == Approx(k_epoch + 6));
}

TEST_CASE("invalid step parameters fail at once", "[matchmaking]") {
  auto role = make_role("L");
  auto p = params();
  p.group_key = "no-bits";
  auto fx = role.start(TimePoint{}, p);
  REQUIRE(fx.outcome.has_value());
  REQUIRE_FALSE(fx.outcome->ok());
  CHECK(fx.outcome->error().code == apiary::errc::invalid_argument);
  CHECK_FALSE(role.searching());
}
