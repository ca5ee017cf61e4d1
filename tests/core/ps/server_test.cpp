// The PS server role (core/ps/server.hpp): requests in wire form, answers as Replies,
// held requests answered by the call that releases them.
#include "core/ps/server.hpp"

#include <catch2/catch.hpp>

#include <set>

#include "core/ps/wire.hpp"
#include "tests/support/peer_addr.hpp"

using namespace apiary;
using namespace apiary::core::ps;
using apiary::core::PeerAddr;
using apiary::core::Reply;

namespace {

ShardServer two_replica_server() {
  ShardConfig c;
  c.variable = "w:0";
  c.layout.shape = {2};
  c.optimizer.learning_rate = 1.0F;
  c.replica_hosts = {0, 0};
  auto shard = Shard::create(c, {0.0F, 0.0F});
  REQUIRE(shard.ok());
  std::map<std::string, Shard> shards;
  shards.emplace("w:0", std::move(*shard));
  return ShardServer("localhost:CPU:0", std::move(shards));
}

std::string pull_body(std::int32_t replica, std::int64_t step, const std::string& shard = "w:0") {
  pb::PsPullRequest m;
  m.set_shard(shard);
  m.set_replica(replica);
  m.set_step(step);
  return m.SerializeAsString();
}

std::string push_body(std::int32_t replica, std::int64_t step, std::vector<float> g) {
  Push p;
  p.replica = replica;
  p.step = step;
  p.gradient = std::move(g);
  return to_pb("w:0", p).SerializeAsString();
}

/// two_replica_server() dropping a lost replica 5 s after its session fails, with
/// replica 1's session open (call 10, from 127.0.0.1:9).
ShardServer dropping_server_with_session_of_1() {
  using namespace std::chrono_literals;
  auto server = two_replica_server();
  server.set_drop_lost_after(core::Duration(5s));
  pb::PsJoinRequest join;
  join.set_replica(1);
  CHECK(server.on_request(core::TimePoint{}, 10, k_ps_join_handle, apiary::test::addr_of("/ip4/127.0.0.1/tcp/9"),
                          join.SerializeAsString())
            .empty());
  return server;
}

Reply only_reply(const core::Effects& fx) {
  REQUIRE(fx.size() == 1);
  REQUIRE(std::holds_alternative<Reply>(fx[0]));
  return std::get<Reply>(fx[0]);
}

}  // namespace

TEST_CASE("a BSP pull is held until every replica pushed the step before, then answered") {
  auto server = two_replica_server();
  const core::TimePoint now{};
  CHECK(only_reply(server.on_request(now, 1, k_ps_pull_handle, PeerAddr{}, pull_body(0, 0))).request == 1);
  CHECK(only_reply(server.on_request(now, 2, k_ps_pull_handle, PeerAddr{}, pull_body(1, 0))).request == 2);
  CHECK(only_reply(server.on_request(now, 3, k_ps_push_handle, PeerAddr{}, push_body(0, 0, {1.0F, 2.0F}))).request == 3);
  // Replica 0 runs ahead: its pull for step 1 waits for replica 1's push.
  CHECK(server.on_request(now, 4, k_ps_pull_handle, PeerAddr{}, pull_body(0, 1)).empty());
  CHECK(server.held() == 1);
  auto fx = server.on_request(now, 5, k_ps_push_handle, PeerAddr{}, push_body(1, 0, {3.0F, 4.0F}));
  REQUIRE(fx.size() == 2);
  CHECK(std::get<Reply>(fx[0]).request == 5);
  const auto& released = std::get<Reply>(fx[1]);
  CHECK(released.request == 4);
  REQUIRE(released.response.ok());
  pb::PsPullResponse m;
  REQUIRE(m.ParseFromString(*released.response));
  CHECK(m.version() == 1);
  REQUIRE(m.values_size() == 2);
  CHECK(m.values(0) == Approx(-2.0F));  // 0 - 1.0 * mean(1, 3)
  CHECK(m.values(1) == Approx(-3.0F));
  CHECK(server.held() == 0);
}

TEST_CASE("the PS server answers bad requests with errors saying what was expected") {
  auto server = two_replica_server();
  const core::TimePoint now{};
  auto unknown = only_reply(server.on_request(now, 1, k_ps_pull_handle, PeerAddr{}, pull_body(0, 0, "v:0")));
  REQUIRE_FALSE(unknown.response.ok());
  CHECK(unknown.response.error().code == errc::not_found);
  CHECK(unknown.response.error().message.find("w:0") != std::string::npos);
  auto garbage = only_reply(server.on_request(now, 2, k_ps_push_handle, PeerAddr{}, "\xff\xff\xff"));
  REQUIRE_FALSE(garbage.response.ok());
  CHECK(garbage.response.error().code == errc::malformed);
  auto handle = only_reply(server.on_request(now, 3, "apiary.ParameterServer.rpc_nope", PeerAddr{}, ""));
  CHECK(handle.response.error().code == errc::not_found);
  // Out of order: step 1 before step 0 is refused, and nothing is held for it.
  auto order = only_reply(server.on_request(now, 4, k_ps_push_handle, PeerAddr{}, push_body(0, 1, {1.0F, 1.0F})));
  REQUIRE_FALSE(order.response.ok());
  CHECK(order.response.error().code == errc::protocol);
  CHECK(server.held() == 0);
  CHECK(server.stats().refused == 4);
}

TEST_CASE("a sparse push survives the wire and updates only its rows") {
  ShardConfig c;
  c.variable = "emb:0";
  c.layout.shape = {4, 2};
  c.sparse = true;
  c.optimizer.learning_rate = 1.0F;
  c.replica_hosts = {0};
  auto shard = Shard::create(c, std::vector<float>(8, 0.0F));
  REQUIRE(shard.ok());
  std::map<std::string, Shard> shards;
  shards.emplace("emb:0", std::move(*shard));
  ShardServer server("localhost:CPU:0", std::move(shards));
  Push p;
  p.gradient = SparseGradient{{2, 0, 2}, {1.0F, 1.0F, 2.0F, 2.0F, 3.0F, 3.0F}};
  const auto wire = to_pb("emb:0", p);
  const auto back = from_pb(wire);
  REQUIRE(std::holds_alternative<SparseGradient>(back.gradient));
  CHECK(std::get<SparseGradient>(back.gradient).rows == std::vector<std::int64_t>{2, 0, 2});
  REQUIRE(only_reply(server.on_request({}, 1, k_ps_push_handle, PeerAddr{}, wire.SerializeAsString())).response.ok());
  CHECK(server.shard("emb:0")->values() == std::vector<float>{-2, -2, 0, 0, -4, -4, 0, 0});
}

TEST_CASE("a lost replica session fails held synchronous requests and refuses new ones") {
  auto server = two_replica_server();
  const core::TimePoint now{};
  pb::PsJoinRequest join;
  join.set_replica(1);
  CHECK(server.on_request(now, 10, k_ps_join_handle, apiary::test::addr_of("/ip4/127.0.0.1/tcp/9"), join.SerializeAsString()).empty());
  join.set_replica(0);
  CHECK(server.on_request(now, 11, k_ps_join_handle, apiary::test::addr_of("/ip4/127.0.0.1/tcp/8"), join.SerializeAsString()).empty());
  (void)server.on_request(now, 1, k_ps_pull_handle, PeerAddr{}, pull_body(0, 0));
  (void)server.on_request(now, 2, k_ps_push_handle, PeerAddr{}, push_body(0, 0, {1.0F, 1.0F}));
  CHECK(server.on_request(now, 3, k_ps_pull_handle, PeerAddr{}, pull_body(0, 1)).empty());  // waits for replica 1
  // Replica 0 finishes normally: its session ends, nothing is lost.
  CHECK(server.finished().empty());
  const auto& bye = only_reply(server.on_request_message(now, 11, std::string{}, true));
  CHECK(bye.request == 11);
  CHECK(server.lost().empty());
  CHECK(server.finished() == std::set<std::int32_t>{0});
  // Replica 1's session fails: the held pull is answered with an error naming it.
  const auto& failed = only_reply(server.on_request_message(now, 10, make_error(errc::peer_down, "gone"), true));
  CHECK(failed.request == 3);
  REQUIRE_FALSE(failed.response.ok());
  CHECK(failed.response.error().code == errc::unavailable);
  CHECK(failed.response.error().message.find("replica 1 at 127.0.0.1:9 went down") != std::string::npos);
  CHECK(server.held() == 0);
  CHECK(server.finished() == std::set<std::int32_t>{0});  // a lost replica did not finish
  const auto& later = only_reply(server.on_request(now, 4, k_ps_pull_handle, PeerAddr{}, pull_body(0, 1)));
  REQUIRE_FALSE(later.response.ok());
  CHECK(later.response.error().code == errc::unavailable);
}

TEST_CASE("spliced pull answers view the parameters, and an update while a view is held leaves it unchanged") {
  auto server = two_replica_server();
  server.set_splice_pulls(true);
  const core::TimePoint now{};
  const Reply first = only_reply(server.on_request(now, 1, k_ps_pull_handle, PeerAddr{}, pull_body(0, 0)));
  REQUIRE(first.response.ok());
  REQUIRE(first.body.size() == 2 * sizeof(float));
  // The body is the shard's own storage: no copy of the values.
  CHECK(reinterpret_cast<const float*>(first.body.data()) == server.shard("w:0")->values().data());
  pb::PsPullResponse m;
  REQUIRE(m.ParseFromString(core::whole_message(first)));  // head + body: the same message
  CHECK(m.version() == 0);
  REQUIRE(m.values_size() == 2);
  CHECK(m.values(0) == 0.0F);
  // The step's update lands in fresh storage while the first answer is held.
  (void)server.on_request(now, 2, k_ps_push_handle, PeerAddr{}, push_body(0, 0, {1.0F, 2.0F}));
  (void)server.on_request(now, 3, k_ps_push_handle, PeerAddr{}, push_body(1, 0, {3.0F, 4.0F}));
  CHECK(server.shard("w:0")->values() == std::vector<float>{-2.0F, -3.0F});
  CHECK(reinterpret_cast<const float*>(first.body.data())[0] == 0.0F);
  CHECK(reinterpret_cast<const float*>(first.body.data())[1] == 0.0F);
  const Reply second = only_reply(server.on_request(now, 4, k_ps_pull_handle, PeerAddr{}, pull_body(0, 1)));
  REQUIRE(m.ParseFromString(core::whole_message(second)));
  CHECK(m.version() == 1);
  CHECK(m.values(0) == Approx(-2.0F));
}

TEST_CASE("with drop_lost_after, a lost replica is dropped after the wait and the others go on") {
  using namespace std::chrono_literals;
  auto server = dropping_server_with_session_of_1();
  const core::TimePoint now{};
  (void)server.on_request(now, 1, k_ps_pull_handle, PeerAddr{}, pull_body(0, 0));
  (void)server.on_request(now, 2, k_ps_push_handle, PeerAddr{}, push_body(0, 0, {1.0F, 1.0F}));
  CHECK(server.on_request(now, 3, k_ps_pull_handle, PeerAddr{}, pull_body(0, 1)).empty());  // waits for replica 1
  // Replica 1's session fails: nothing fails; the wait starts.
  auto lost = server.on_request_message(now, 10, make_error(errc::peer_down, "gone"), true);
  REQUIRE(lost.size() == 1);
  REQUIRE(std::holds_alternative<core::SetTimer>(lost[0]));
  const auto timer = std::get<core::SetTimer>(lost[0]);
  CHECK(timer.at == now + core::Duration(5s));
  CHECK(server.held() == 1);
  CHECK(server.lost().count(1) == 1);
  // A request meanwhile is taken, not refused (it waits for the step too).
  CHECK(server.on_request(now, 4, k_ps_push_handle, PeerAddr{}, push_body(0, 1, {1.0F, 1.0F})).empty());
  // The wait is over: replica 1 is dropped; step 0 applies replica 0's gradient alone,
  // then step 1 (replica 0 is the only one left), and the held requests are answered.
  auto fx = server.on(timer.at, core::TimerFired{timer.id});
  std::set<core::RequestId> answered;
  for (const auto& e : fx) {
    REQUIRE(std::holds_alternative<Reply>(e));
    const auto& r = std::get<Reply>(e);
    CHECK(r.response.ok());
    answered.insert(r.request);
  }
  CHECK(answered == std::set<core::RequestId>{3, 4});
  CHECK(server.dropped() == std::set<std::int32_t>{1});
  CHECK(server.shard("w:0")->values() == std::vector<float>{-2.0F, -2.0F});  // two SGD steps of lr 1
  // The dropped replica is refused if it comes back, saying why.
  const auto& back = only_reply(server.on_request(now, 5, k_ps_pull_handle, PeerAddr{}, pull_body(1, 2)));
  REQUIRE_FALSE(back.response.ok());
  CHECK(back.response.error().message.find("replica 1 was dropped") != std::string::npos);
}

namespace {

pb::PsRejoinResponse rejoin_answer(ShardServer& server, core::RequestId id, std::int32_t replica, std::int64_t from) {
  pb::PsRejoinRequest req;
  req.set_replica(replica);
  req.set_from_step(from);
  const auto fx = server.on_request(core::TimePoint{}, id, k_ps_rejoin_handle, PeerAddr{}, req.SerializeAsString());
  REQUIRE_FALSE(fx.empty());
  REQUIRE(std::holds_alternative<Reply>(fx.back()));
  const auto& reply = std::get<Reply>(fx.back());
  REQUIRE(reply.response.ok());
  pb::PsRejoinResponse res;
  REQUIRE(res.ParseFromString(*reply.response));
  return res;
}

}  // namespace

TEST_CASE("a replica started again joins, is dropped at once, and rejoins from the first free step") {
  auto server = dropping_server_with_session_of_1();
  const core::TimePoint now{};
  pb::PsJoinRequest join;
  join.set_replica(1);
  // A replica that never left is told it may start at step 0.
  auto fresh = rejoin_answer(server, 20, 1, -1);
  CHECK_FALSE(fresh.dropped());
  CHECK(fresh.step() == 0);
  // Step 0 by both; then replica 1's session fails (the wait starts) and replica 0 pushes step 1.
  (void)server.on_request(now, 1, k_ps_push_handle, PeerAddr{}, push_body(0, 0, {1.0F, 1.0F}));
  (void)server.on_request(now, 2, k_ps_push_handle, PeerAddr{}, push_body(1, 0, {1.0F, 1.0F}));
  const auto lost = server.on_request_message(now, 10, make_error(errc::peer_down, "gone"), true);
  REQUIRE(lost.size() == 1);
  const auto timer = std::get<core::SetTimer>(lost[0]);
  (void)server.on_request(now, 3, k_ps_push_handle, PeerAddr{}, push_body(0, 1, {1.0F, 1.0F}));
  CHECK(server.shard("w:0")->version() == 1);  // step 1 waits for replica 1
  // Its process started again joins before the wait is over: dropped now, step 1 applies.
  const auto rejoined = server.on_request(now, 11, k_ps_join_handle, apiary::test::addr_of("/ip4/127.0.0.1/tcp/10"),
                                          join.SerializeAsString());
  REQUIRE_FALSE(rejoined.empty());
  CHECK(std::holds_alternative<core::CancelTimer>(rejoined[0]));
  CHECK(std::get<core::CancelTimer>(rejoined[0]).id == timer.id);
  CHECK(server.dropped() == std::set<std::int32_t>{1});
  CHECK(server.shard("w:0")->version() == 2);
  // Where does it stand? Dropped; step 2 is the first no replica pushed.
  auto asked = rejoin_answer(server, 21, 1, -1);
  CHECK(asked.dropped());
  CHECK_FALSE(asked.accepted());
  CHECK(asked.step() == 2);
  // Replica 0 pushes step 2 meanwhile: asking for step 2 is refused, naming step 3.
  (void)server.on_request(now, 4, k_ps_push_handle, PeerAddr{}, push_body(0, 2, {1.0F, 1.0F}));
  auto late = rejoin_answer(server, 22, 1, 2);
  CHECK_FALSE(late.accepted());
  CHECK(late.step() == 3);
  auto taken = rejoin_answer(server, 23, 1, 3);
  CHECK(taken.accepted());
  CHECK(taken.step() == 3);
  CHECK(server.dropped().empty());
  CHECK(server.lost().empty());
  // Step 3 now waits for both.
  (void)server.on_request(now, 5, k_ps_push_handle, PeerAddr{}, push_body(0, 3, {1.0F, 1.0F}));
  CHECK(server.shard("w:0")->version() == 3);
  (void)server.on_request(now, 6, k_ps_push_handle, PeerAddr{}, push_body(1, 3, {1.0F, 1.0F}));
  CHECK(server.shard("w:0")->version() == 4);
  // A malformed rejoin is refused, saying so.
  const auto bad = only_reply(server.on_request(now, 24, k_ps_rejoin_handle, PeerAddr{}, std::string("\xff\xff", 2)));
  REQUIRE_FALSE(bad.response.ok());
  CHECK(bad.response.error().code == errc::malformed);
}

TEST_CASE("a PS continued from a checkpoint: the replicas' replayed pushes give the unbroken run's bits") {
  // Unbroken: 5 steps of two replicas. Broken: a checkpoint after step 2 (values and
  // optimizer state), a server started from it at step 2, and steps 2..4 pushed again.
  const auto grad = [](std::int32_t r, std::int64_t step) {
    return std::vector<float>{0.1F * static_cast<float>(r + 1) + 0.01F * static_cast<float>(step), -0.3F};
  };
  const core::TimePoint now{};
  core::RequestId id = 1;
  auto unbroken = two_replica_server();
  std::vector<float> at_checkpoint;
  Optimizer::State state;
  for (std::int64_t step = 0; step < 5; ++step) {
    if (step == 2) {
      at_checkpoint = unbroken.shard("w:0")->values();
      state = unbroken.shard("w:0")->optimizer().state();
    }
    for (std::int32_t r = 0; r < 2; ++r) {
      (void)unbroken.on_request(now, id++, k_ps_push_handle, PeerAddr{}, push_body(r, step, grad(r, step)));
    }
  }
  ShardConfig c;
  c.variable = "w:0";
  c.layout.shape = {2};
  c.optimizer.learning_rate = 1.0F;
  c.replica_hosts = {0, 0};
  auto shard = Shard::create(c, at_checkpoint);
  REQUIRE(shard.ok());
  REQUIRE(shard->restore_optimizer(state).ok());
  std::map<std::string, Shard> shards;
  shards.emplace("w:0", std::move(*shard));
  ShardServer resumed("localhost:CPU:0", std::move(shards));
  REQUIRE(resumed.resume_at(2).ok());
  CHECK(resumed.resumed_at() == 2);
  CHECK(resumed.shard("w:0")->version() == 2);
  // Asked where it stands, it says so: every replica pushes w:0 from step 2.
  const auto where = rejoin_answer(resumed, 100, 1, -1);
  CHECK_FALSE(where.dropped());
  CHECK(where.resumed());
  CHECK(where.resumed_at() == 2);
  REQUIRE(where.next_steps().count("w:0") == 1);
  CHECK(where.next_steps().at("w:0") == 2);
  // A pull of step 3 waits for step 2's replays; a push of a later step is refused.
  CHECK(resumed.on_request(now, id++, k_ps_pull_handle, PeerAddr{}, pull_body(0, 3)).empty());
  const auto ahead = only_reply(resumed.on_request(now, id++, k_ps_push_handle, PeerAddr{}, push_body(0, 4, grad(0, 4))));
  REQUIRE_FALSE(ahead.response.ok());
  CHECK(ahead.response.error().message.find("expected replica 0 to push step 2 next, got step 4") !=
        std::string::npos);
  for (std::int64_t step = 2; step < 5; ++step) {
    for (std::int32_t r = 1; r >= 0; --r) {  // in another order: the sums are in replica order anyway
      (void)resumed.on_request(now, id++, k_ps_push_handle, PeerAddr{}, push_body(r, step, grad(r, step)));
    }
  }
  CHECK(resumed.shard("w:0")->version() == 5);
  CHECK(resumed.shard("w:0")->values() == unbroken.shard("w:0")->values());
  CHECK(rejoin_answer(resumed, 101, 0, -1).next_steps().at("w:0") == 5);
}

TEST_CASE("only a fresh BSP PS continues from a checkpoint") {
  auto used = two_replica_server();
  (void)used.on_request(core::TimePoint{}, 1, k_ps_push_handle, PeerAddr{}, push_body(0, 0, {1.0F, 1.0F}));
  const auto taken = used.resume_at(3);
  REQUIRE_FALSE(taken.ok());
  CHECK(taken.error().code == errc::protocol);
  CHECK(taken.error().message.find("PS localhost:CPU:0 cannot continue the job at step 3") == 0);
  ShardConfig c;
  c.variable = "w:0";
  c.layout.shape = {2};
  c.sync = false;
  c.replica_hosts = {0, 0};
  auto shard = Shard::create(c, {0.0F, 0.0F});
  REQUIRE(shard.ok());
  CHECK(shard->start_at(3).error().code == errc::invalid_argument);
  std::map<std::string, Shard> shards;
  shards.emplace("w:0", std::move(*shard));
  ShardServer async("localhost:CPU:0", std::move(shards));
  const auto refused = async.resume_at(3);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("shard w:0 is asynchronous") != std::string::npos);
  CHECK_FALSE(async.resumed_at());
  auto fresh = two_replica_server();
  CHECK(fresh.resume_at(-1).error().code == errc::invalid_argument);
  c.sync = true;
  c.staleness = 2;
  auto ssp = Shard::create(c, {0.0F, 0.0F});
  REQUIRE(ssp.ok());
  const auto snapshot = ssp->start_at(3);
  REQUIRE_FALSE(snapshot.ok());
  CHECK(snapshot.error().message.find("an SSP shard (staleness 2) cannot continue a job from a checkpoint") !=
        std::string::npos);
}

TEST_CASE("a resumed PS with drop_lost_after drops the replicas that do not come back within the wait") {
  using namespace std::chrono_literals;
  const core::TimePoint start{};
  auto server = two_replica_server();
  server.set_drop_lost_after(core::Duration(5s));
  REQUIRE(server.resume_at(3).ok());
  // Started: the wait for the replicas to come back begins.
  const auto armed = server.on(start, core::Start{});
  REQUIRE(armed.size() == 1);
  REQUIRE(std::holds_alternative<core::SetTimer>(armed[0]));
  const auto timer = std::get<core::SetTimer>(armed[0]);
  CHECK(timer.at == start + core::Duration(5s));
  // Replica 0 comes back and replays step 3; replica 1 (dropped before the PS went down)
  // does not, and step 3 waits for it until the wait is over (the push is taken at once).
  pb::PsJoinRequest join;
  join.set_replica(0);
  CHECK(server.on_request(start, 10, k_ps_join_handle, PeerAddr{}, join.SerializeAsString()).empty());
  CHECK(only_reply(server.on_request(start, 1, k_ps_push_handle, PeerAddr{}, push_body(0, 3, {1.0F, 1.0F})))
            .response.ok());
  CHECK(server.on_request(start, 2, k_ps_pull_handle, PeerAddr{}, pull_body(0, 4)).empty());
  const auto fx = server.on(timer.at, core::TimerFired{timer.id});
  std::set<core::RequestId> answered;
  for (const auto& e : fx) {
    REQUIRE(std::holds_alternative<Reply>(e));
    CHECK(std::get<Reply>(e).response.ok());
    answered.insert(std::get<Reply>(e).request);
  }
  CHECK(answered == std::set<core::RequestId>{2});
  CHECK(server.dropped() == std::set<std::int32_t>{1});
  REQUIRE(server.lost().count(1) == 1);
  CHECK(server.lost().at(1) == "replica 1 did not come back to PS localhost:CPU:0 within 5000 ms of its resuming at "
                               "step 3");
  CHECK(server.shard("w:0")->version() == 4);
  // It may still rejoin the job where it stands, as any dropped replica.
  const auto where = rejoin_answer(server, 3, 1, -1);
  CHECK(where.dropped());
  // A fresh server, or one that fails lost replicas' steps instead, arms no such wait.
  auto fresh = two_replica_server();
  fresh.set_drop_lost_after(core::Duration(5s));
  CHECK(fresh.on(start, core::Start{}).empty());
  auto failing = two_replica_server();
  REQUIRE(failing.resume_at(3).ok());
  CHECK(failing.on(start, core::Start{}).empty());
}
