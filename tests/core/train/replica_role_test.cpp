// A replica's roles (core/train/) in one Mux, driven by hand: a PS replica's step over
// one shard, a one-member all-reduce step with its optimizer, the calls out of turn, and
// a PS going down mid-step (the step, the watch and every later call fail naming it; the
// sessions are left with the reason).
#include "core/train/replica_role.hpp"

#include <catch2/catch.hpp>

#include <optional>

#include "core/collective/ar_plan.hpp"
#include "core/ps/wire.hpp"
#include "tests/core/effects_of.hpp"
#include "tests/support/peer_addr.hpp"

namespace ct = apiary::core::train;
namespace cps = apiary::core::ps;
namespace cc = apiary::core::collective;
using apiary::test::operator""_addr;
using apiary::errc;
using apiary::core::Effects;
using apiary::core::Value;

namespace {

using apiary::testing::all_of;

const apiary::core::PeerAddr k_ps = "/ip4/127.0.0.1/tcp/4000"_addr;

/// One dense variable "w" [4] on one shard of PS device "ps:0".
std::shared_ptr<const cps::TrainingPlan> one_shard_plan() {
  cps::TrainingPlan plan;
  cps::PlannedShard shard;
  shard.config.variable = "w";
  shard.config.layout.shape = {4};
  shard.config.replica_hosts = {0};
  shard.variable = "w";
  shard.device = "ps:0";
  plan.shards.push_back(shard);
  cps::VariablePlan v;
  v.name = "w";
  v.shape = {4};
  v.shards = {0};
  plan.variables.push_back(v);
  plan.replicas = {"replica:0"};
  plan.servers = {"ps:0"};
  return std::make_shared<const cps::TrainingPlan>(std::move(plan));
}

/// Drives a Mux of a replica's roles; remembers what the host's calls completed with.
struct Driver {
  apiary::core::Mux mux;
  std::map<apiary::core::OpId, apiary::Result<Value>> done;
  apiary::core::OpId next = 1;
  apiary::core::TimePoint now{};

  Effects feed(apiary::core::Input in) {
    Effects fx = mux.on(now, std::move(in));
    auto local = apiary::core::take_local(fx);
    for (auto& c : local.completed) done.emplace(c.op, std::move(c.result));
    REQUIRE(local.asks.empty());
    return fx;
  }
  std::pair<apiary::core::OpId, Effects> call(const std::string& method, Value args = {}) {
    const auto op = next++;
    return {op, feed(apiary::core::LocalCall{op, "replica", method, std::move(args)})};
  }
};

/// A PS's answer to a rejoin request.
std::string rejoin_answer(bool dropped, bool accepted, std::int64_t step) {
  apiary::pb::PsRejoinResponse res;
  res.set_dropped(dropped);
  res.set_accepted(accepted);
  res.set_step(step);
  return res.SerializeAsString();
}

/// The rejoin requests among `calls`, with the step each asks for.
std::vector<std::pair<apiary::core::Call, std::int64_t>> rejoins_in(const std::vector<apiary::core::Call>& calls) {
  std::vector<std::pair<apiary::core::Call, std::int64_t>> out;
  for (const auto& c : calls) {
    if (c.handle != cps::k_ps_rejoin_handle) continue;
    apiary::pb::PsRejoinRequest req;
    REQUIRE(req.ParseFromString(c.request));
    out.emplace_back(c, req.from_step());
  }
  return out;
}

/// A PS replica over one_shard_plan()'s shard at k_ps, started, before the PS said where
/// it stands: its session call and the rejoin question.
std::vector<apiary::core::Call> open_ps_replica(Driver& d) {
  ct::ReplicaConfig config;
  config.ps = one_shard_plan();
  config.servers = {{"ps:0", k_ps}};
  REQUIRE(ct::add_replica_roles(d.mux, config).ok());
  return all_of<apiary::core::Call>(d.feed(apiary::core::Start{}));
}

/// open_ps_replica() of a job starting (the PS did not drop it): its session calls.
/// `wait` and `replay`: ReplicaConfig::ps_restart_wait and replay_steps.
std::vector<apiary::core::Call> start_ps_replica(Driver& d, apiary::core::Duration wait = {},
                                                 std::int64_t replay = 0) {
  ct::ReplicaConfig config;
  config.ps = one_shard_plan();
  config.servers = {{"ps:0", k_ps}};
  config.ps_restart_wait = wait;
  config.replay_steps = replay;
  REQUIRE(ct::add_replica_roles(d.mux, config).ok());
  auto calls = all_of<apiary::core::Call>(d.feed(apiary::core::Start{}));
  const auto asked = rejoins_in(calls);
  REQUIRE(asked.size() == 1);
  CHECK(asked[0].second == -1);
  CHECK(d.feed(apiary::core::Response{asked[0].first.id, rejoin_answer(false, false, 0)}).empty());
  std::vector<apiary::core::Call> sessions;
  for (auto& c : calls) {
    if (c.handle == cps::k_ps_join_handle) sessions.push_back(std::move(c));
  }
  return sessions;
}

}  // namespace

TEST_CASE("a PS replica's step: pull, push, acknowledged, then the next step", "[train]") {
  Driver d;
  auto sessions = start_ps_replica(d);
  REQUIRE(sessions.size() == 1);
  CHECK(sessions[0].handle == cps::k_ps_join_handle);
  CHECK(sessions[0].stream);

  auto [push_early, refused] = d.call("push", Value::of(ct::ReplicaGradients{}));
  REQUIRE_FALSE(d.done.at(push_early).ok());
  CHECK(d.done.at(push_early).error().code == errc::protocol);

  auto [pull, pulls] = d.call("pull");
  auto calls = all_of<apiary::core::Call>(pulls);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].handle == cps::k_ps_pull_handle);
  CHECK(calls[0].peer == k_ps);
  CHECK(d.done.count(pull) == 0);
  cps::PullReply reply{0, 0, 3, {1, 2, 3, 4}};
  d.feed(apiary::core::Response{calls[0].id, cps::to_pb("w", reply).SerializeAsString()});
  REQUIRE(d.done.at(pull).ok());
  const auto* params = d.done.at(pull)->as<ct::ReplicaParams>();
  REQUIRE(params != nullptr);
  CHECK(params->step == 0);
  CHECK(params->version == 3);
  CHECK(params->params.at("w") == std::vector<float>{1, 2, 3, 4});

  auto [bad, none] = d.call("push", Value::of(std::string("not gradients")));
  CHECK(d.done.at(bad).error().code == errc::invalid_argument);
  auto [missing, none2] = d.call("push", Value::of(ct::ReplicaGradients{{{"b", {1}}}, 1.0, {}}));
  CHECK(d.done.at(missing).error().message.find("gradient of w") != std::string::npos);

  auto [push, pushes] = d.call("push", Value::of(ct::ReplicaGradients{{{"w", {1, 1, 1, 1}}}, 8.0, {}}));
  auto push_calls = all_of<apiary::core::Call>(pushes);
  REQUIRE(push_calls.size() == 1);
  apiary::pb::PsPushRequest sent;
  REQUIRE(sent.ParseFromString(apiary::core::whole_message(push_calls[0])));
  CHECK(sent.samples() == 8.0);
  CHECK(d.done.count(push) == 0);
  // Sent from where the gradient lies: the body views the lent values.
  CHECK(push_calls[0].body.size() == 4 * sizeof(float));
  d.feed(apiary::core::Response{push_calls[0].id, cps::to_pb("w", cps::PushAck{0, 0}).SerializeAsString()});
  REQUIRE(d.done.at(push).ok());
  // The gradients come back once the step is over.
  const auto* back = d.done.at(push)->as<ct::ReplicaGradients>();
  REQUIRE(back != nullptr);
  CHECK(back->gradients.at("w") == std::vector<float>{1, 1, 1, 1});

  auto [next_pull, next_pulls] = d.call("pull");
  auto next_calls = all_of<apiary::core::Call>(next_pulls);
  REQUIRE(next_calls.size() == 1);
  apiary::pb::PsPullRequest asked;
  REQUIRE(asked.ParseFromString(next_calls[0].request));
  CHECK(asked.step() == 1);

  auto [unknown, nothing] = d.call("fly");
  CHECK(d.done.at(unknown).error().code == errc::not_found);
}

TEST_CASE("a PS going down mid-pull ends the replica naming the shard, and every later call", "[train]") {
  Driver d;
  auto sessions = start_ps_replica(d);
  auto [watch, w] = d.call("watch");
  auto [pull, pulls] = d.call("pull");
  auto down = d.feed(apiary::core::PeerDown{k_ps});
  REQUIRE_FALSE(d.done.at(pull).ok());
  const auto& e = d.done.at(pull).error();
  CHECK(e.code == errc::peer_down);
  CHECK(e.message.find("pull of shard 'w'") != std::string::npos);
  CHECK(e.message.find("PS ps:0") != std::string::npos);
  CHECK(d.done.at(watch).error().message == e.message);
  // The session is left with the reason, the pull abandoned.
  auto cancels = all_of<apiary::core::Cancel>(down);
  REQUIRE(cancels.size() == 2);
  bool session_told = false;
  for (const auto& c : cancels) session_told |= c.call == sessions[0].id && c.reason.find("replica 0 failed") == 0;
  CHECK(session_told);
  auto [later, more] = d.call("pull");
  CHECK(d.done.at(later).error().message == e.message);
  CHECK(all_of<apiary::core::Call>(more).empty());
}

namespace {

/// The PS's answer to "where do you stand" after it continued the job from a checkpoint
/// of step `resumed_at`: replica 0 pushes shard w from `next` on.
std::string resumed_answer(std::int64_t resumed_at, std::int64_t next) {
  apiary::pb::PsRejoinResponse res;
  res.set_step(next);
  res.set_resumed(true);
  res.set_resumed_at(resumed_at);
  (*res.mutable_next_steps())["w"] = next;
  return res.SerializeAsString();
}

/// One step of a replica with PS "ps:0": pull (answered at version `step`) and push of
/// gradient {step, step, step, step}, acknowledged unless `ack` is false (then the push
/// call is returned).
std::optional<apiary::core::Call> ps_step(Driver& d, std::int64_t step, bool ack = true) {
  auto [pull, pulls] = d.call("pull");
  auto calls = all_of<apiary::core::Call>(pulls);
  REQUIRE(calls.size() == 1);
  d.feed(apiary::core::Response{calls[0].id, cps::to_pb("w", cps::PullReply{0, step, step, {1, 2, 3, 4}})
                                                 .SerializeAsString()});
  REQUIRE(d.done.at(pull).ok());
  const auto g = static_cast<float>(step);
  auto [push, pushes] = d.call("push", Value::of(ct::ReplicaGradients{{{"w", {g, g, g, g}}}, 1.0, {}}));
  auto sent = all_of<apiary::core::Call>(pushes);
  REQUIRE(sent.size() == 1);
  if (!ack) return sent[0];
  d.feed(apiary::core::Response{sent[0].id, cps::to_pb("w", cps::PushAck{0, step}).SerializeAsString()});
  REQUIRE(d.done.at(push).ok());
  return std::nullopt;
}

/// The step and gradient of a push request.
std::pair<std::int64_t, std::vector<float>> pushed(const apiary::core::Call& c) {
  apiary::pb::PsPushRequest m;
  REQUIRE(m.ParseFromString(apiary::core::whole_message(c)));
  return {m.step(), std::vector<float>(m.dense().begin(), m.dense().end())};
}

/// Fires the one timer armed in `fx` (the clock moved to it); returns what that does.
Effects fire(Driver& d, const Effects& fx) {
  auto timers = all_of<apiary::core::SetTimer>(fx);
  REQUIRE(timers.size() == 1);
  d.now = timers[0].at;
  return d.feed(apiary::core::TimerFired{timers[0].id});
}

}  // namespace

TEST_CASE("a PS that went down and continued from a checkpoint: the replica replays its pushes since, then its step",
          "[train]") {
  Driver d;
  start_ps_replica(d, std::chrono::seconds(10), 4);
  for (std::int64_t step = 0; step < 3; ++step) ps_step(d, step);
  auto [watch, w] = d.call("watch");
  auto in_flight = ps_step(d, 3, false);
  REQUIRE(in_flight);
  const apiary::core::OpId push = d.next - 1;
  // The PS goes down: the push waits (no failure, no watch), the replica asks again and again.
  auto down = d.feed(apiary::core::PeerDown{k_ps});
  CHECK(d.done.count(push) == 0);
  CHECK(d.done.count(watch) == 0);
  CHECK(all_of<apiary::core::Cancel>(down).size() == 2);  // the push and the session
  auto asks = rejoins_in(all_of<apiary::core::Call>(fire(d, down)));
  REQUIRE(asks.size() == 1);
  CHECK(asks[0].second == -1);
  auto again = d.feed(apiary::core::Response{asks[0].first.id, apiary::make_error(errc::peer_down, "refused")});
  CHECK(d.done.count(push) == 0);
  asks = rejoins_in(all_of<apiary::core::Call>(fire(d, again)));
  REQUIRE(asks.size() == 1);
  // Back, from the checkpoint of step 1: a new session, then steps 1 and 2 replayed one
  // at a time (whole messages, as pushed), then step 3's push sent again.
  auto back = all_of<apiary::core::Call>(d.feed(apiary::core::Response{asks[0].first.id, resumed_answer(1, 1)}));
  REQUIRE(back.size() == 2);
  CHECK(back[0].handle == cps::k_ps_join_handle);
  CHECK(back[0].stream);
  for (std::int64_t step = 1; step <= 3; ++step) {
    INFO("step " << step);
    CHECK(back[1].handle == cps::k_ps_push_handle);
    const auto [s, g] = pushed(back[1]);
    CHECK(s == step);
    const auto v = static_cast<float>(step);
    CHECK(g == std::vector<float>{v, v, v, v});
    CHECK(d.done.count(push) == 0);
    back = all_of<apiary::core::Call>(
        d.feed(apiary::core::Response{back[1].id, cps::to_pb("w", cps::PushAck{0, step}).SerializeAsString()}));
    back.insert(back.begin(), apiary::core::Call{});
    if (step < 3) REQUIRE(back.size() == 2);
  }
  REQUIRE(d.done.at(push).ok());
  CHECK(d.done.count(watch) == 0);
  ps_step(d, 4);  // and the job goes on
}

TEST_CASE("a PS back from a checkpoint older than the pushes kept, or not back in time, ends the replica saying so",
          "[train]") {
  SECTION("older") {
    Driver d;
    start_ps_replica(d, std::chrono::seconds(10), 2);
    for (std::int64_t step = 0; step < 5; ++step) ps_step(d, step);
    auto asks = rejoins_in(all_of<apiary::core::Call>(fire(d, d.feed(apiary::core::PeerDown{k_ps}))));
    REQUIRE(asks.size() == 1);
    auto [pull, none] = d.call("pull");
    d.feed(apiary::core::Response{asks[0].first.id, resumed_answer(1, 1)});
    REQUIRE_FALSE(d.done.at(pull).ok());
    const auto& e = d.done.at(pull).error();
    CHECK(e.message.find("continued the job from step 1") != std::string::npos);
    CHECK(e.message.find("from step 1 again; this replica kept them from step 3 on (the last 2 steps)") !=
          std::string::npos);
  }
  SECTION("a refused connection is a PS down too") {
    Driver d;
    start_ps_replica(d, std::chrono::seconds(10), 2);
    ps_step(d, 0);
    auto [pull, pulls] = d.call("pull");
    auto calls = all_of<apiary::core::Call>(pulls);
    REQUIRE(calls.size() == 1);
    auto fx = d.feed(apiary::core::Response{calls[0].id, apiary::make_error(errc::unavailable, "refused")});
    CHECK(d.done.count(pull) == 0);
    auto asks = rejoins_in(all_of<apiary::core::Call>(fire(d, fx)));
    REQUIRE(asks.size() == 1);
    // Back, this replica to push step 1 next there: the pull goes out again.
    auto again = all_of<apiary::core::Call>(d.feed(apiary::core::Response{asks[0].first.id, resumed_answer(0, 1)}));
    REQUIRE(again.size() == 2);
    CHECK(again[1].handle == cps::k_ps_pull_handle);
  }
  SECTION("not back") {
    Driver d;
    start_ps_replica(d, std::chrono::seconds(1), 2);
    ps_step(d, 0);
    auto [pull, none] = d.call("pull");
    auto fx = d.feed(apiary::core::PeerDown{k_ps});
    int asked = 0;
    while (d.done.count(pull) == 0) {
      auto calls = rejoins_in(all_of<apiary::core::Call>(fx = fire(d, fx)));
      if (calls.empty()) break;
      ++asked;
      fx = d.feed(apiary::core::Response{calls[0].first.id, apiary::make_error(errc::peer_down, "refused")});
    }
    REQUIRE_FALSE(d.done.at(pull).ok());
    CHECK(asked >= 4);
    CHECK(d.done.at(pull).error().message.find("PS ps:0 at " + k_ps.multiaddr() + " went down") != std::string::npos);
    CHECK(d.done.at(pull).error().message.find("was not back within 1000 ms") != std::string::npos);
  }
}

TEST_CASE("a replica the PS dropped rejoins where the job stands and its calls wait until then", "[train]") {
  Driver d;
  auto calls = open_ps_replica(d);
  auto asked = rejoins_in(calls);
  REQUIRE(asked.size() == 1);
  // The trainer's first pull waits for the start.
  auto [pull, none] = d.call("pull");
  CHECK(all_of<apiary::core::Call>(none).empty());
  CHECK(d.done.count(pull) == 0);
  // Dropped; step 5 is the first free one: the replica asks for it.
  auto round1 = rejoins_in(all_of<apiary::core::Call>(
      d.feed(apiary::core::Response{asked[0].first.id, rejoin_answer(true, false, 5)})));
  REQUIRE(round1.size() == 1);
  CHECK(round1[0].second == 5);
  // Refused: the others pushed step 5 meanwhile; it asks for step 6.
  auto round2 = rejoins_in(all_of<apiary::core::Call>(
      d.feed(apiary::core::Response{round1[0].first.id, rejoin_answer(true, false, 6)})));
  REQUIRE(round2.size() == 1);
  CHECK(round2[0].second == 6);
  // Taken: the waiting pull goes out for step 6.
  auto pulls = all_of<apiary::core::Call>(d.feed(apiary::core::Response{round2[0].first.id, rejoin_answer(true, true, 6)}));
  REQUIRE(pulls.size() == 1);
  CHECK(pulls[0].handle == cps::k_ps_pull_handle);
  apiary::pb::PsPullRequest req;
  REQUIRE(req.ParseFromString(pulls[0].request));
  CHECK(req.step() == 6);
  cps::PullReply reply{0, 6, 6, {1, 2, 3, 4}};
  d.feed(apiary::core::Response{pulls[0].id, cps::to_pb("w", reply).SerializeAsString()});
  REQUIRE(d.done.at(pull).ok());
  CHECK(d.done.at(pull)->as<ct::ReplicaParams>()->step == 6);
}

TEST_CASE("a rejoin the PS refuses ends the replica, naming the PS", "[train]") {
  Driver d;
  auto asked = rejoins_in(open_ps_replica(d));
  auto [pull, none] = d.call("pull");
  auto fx = d.feed(apiary::core::Response{asked[0].first.id,
                                          apiary::make_error(errc::unavailable, "no drops here")});
  REQUIRE_FALSE(d.done.at(pull).ok());
  CHECK(d.done.at(pull).error().message.find("could not learn where the job stands from PS ps:0") !=
        std::string::npos);
}

TEST_CASE("an all-reduce replica of one member averages with itself and applies its optimizer", "[train]") {
  cc::ArPlan plan;
  cps::VariablePlan v;
  v.name = "w";
  v.shape = {2};
  plan.variables.push_back(v);
  plan.replicas = {"replica:0"};
  cc::ArTensor t;
  t.name = "w";
  t.variable = 0;
  t.size = 2;
  plan.tensors.push_back(t);
  cc::ArGroup g;
  g.group = 0;
  g.tensors = {0};
  plan.groups.push_back(g);
  plan.variables[0].shards = {0};

  ct::ReplicaConfig config;
  config.ar = std::make_shared<const cc::ArPlan>(plan);
  config.members = {"/ip4/127.0.0.1/tcp/4100"_addr};
  config.optimizer.kind = cps::OptimizerKind::sgd;
  config.optimizer.learning_rate = 0.5F;
  SECTION("without initial values it is refused") {
    apiary::core::Mux mux;
    auto st = ct::add_replica_roles(mux, config);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().message.find("initial values of the all-reduced variable w") != std::string::npos);
  }
  SECTION("a lone member meets itself on join and leave") {
    config.initial = {{"w", {1, 1}}};
    config.meet = true;
    Driver d;
    REQUIRE(ct::add_replica_roles(d.mux, config).ok());
    (void)d.feed(apiary::core::Start{});
    auto [join, j] = d.call("join", Value::of(apiary::core::Duration(std::chrono::seconds(1))));
    REQUIRE(d.done.at(join).ok());
    auto [again, a] = d.call("join");
    CHECK(d.done.at(again).ok());
    auto [leave, l] = d.call("leave");
    REQUIRE(d.done.at(leave).ok());
    auto [after, x] = d.call("pull");
    CHECK(d.done.at(after).error().code == errc::protocol);
  }
  SECTION("a step") {
    config.initial = {{"w", {1, 1}}};
    Driver d;
    REQUIRE(ct::add_replica_roles(d.mux, config).ok());
    (void)d.feed(apiary::core::Start{});
    auto [pull, p] = d.call("pull");
    REQUIRE(d.done.at(pull).ok());
    CHECK(d.done.at(pull)->as<ct::ReplicaParams>()->params.at("w") == std::vector<float>{1, 1});
    auto [wrong, none] = d.call("push", Value::of(ct::ReplicaGradients{{{"w", {2}}}, 3.0, {}}));
    CHECK(d.done.at(wrong).error().code == errc::invalid_argument);
    CHECK(all_of<apiary::core::Call>(none).empty());
    auto [push, fx] = d.call("push", Value::of(ct::ReplicaGradients{{{"w", {2, 4}}}, 3.0, {}}));
    REQUIRE(d.done.count(push) == 1);
    REQUIRE(d.done.at(push).ok());
    auto [pull2, p2] = d.call("pull");
    const auto* after = d.done.at(pull2)->as<ct::ReplicaParams>();
    CHECK(after->step == 1);
    CHECK(after->params.at("w") == std::vector<float>{0, -1});
    auto [states, s] = d.call("optimizer_states");
    CHECK(d.done.at(states)->as<std::map<std::string, cps::Optimizer::State>>()->count("w") == 1);
  }
}

TEST_CASE("a sparse gradient may come as rows: they are checked and only they move", "[train]") {
  cc::ArPlan plan;
  plan.replicas = {"replica:0"};
  plan.sparse.push_back(cc::ArSparse{"e", {3, 2}, 3, 2});
  ct::ReplicaConfig config;
  config.ar = std::make_shared<const cc::ArPlan>(plan);
  config.members = {"/ip4/127.0.0.1/tcp/4100"_addr};
  config.optimizer.kind = cps::OptimizerKind::sgd;
  config.optimizer.learning_rate = 0.5F;
  config.initial = {{"e", {1, 1, 1, 1, 1, 1}}};
  Driver d;
  REQUIRE(ct::add_replica_roles(d.mux, config).ok());
  (void)d.feed(apiary::core::Start{});
  auto [pull, p] = d.call("pull");
  REQUIRE(d.done.at(pull).ok());
  auto rows = [](std::vector<std::int64_t> r, std::vector<float> v) {
    ct::ReplicaGradients g;
    g.samples = 1.0;
    g.sparse["e"] = cps::SparseGradient{std::move(r), std::move(v)};
    return Value::of(std::move(g));
  };
  auto [outside, none] = d.call("push", rows({3}, {1, 1}));
  CHECK(d.done.at(outside).error().message.find("row 3 of e's gradient is outside its 3 rows") != std::string::npos);
  CHECK(all_of<apiary::core::Call>(none).empty());
  auto [short_values, none2] = d.call("push", rows({0, 2}, {1, 1, 1}));
  CHECK(d.done.at(short_values).error().code == errc::invalid_argument);
  auto [push, fx] = d.call("push", rows({2}, {2, 4}));
  REQUIRE(d.done.count(push) == 1);
  REQUIRE(d.done.at(push).ok());
  auto [pull2, p2] = d.call("pull");
  CHECK(d.done.at(pull2)->as<ct::ReplicaParams>()->params.at("e") == std::vector<float>{1, 1, 1, 1, 0, -1});
}

TEST_CASE("a pull through the node's proxy that failed because its PS went down waits and goes through the proxy "
          "again once the PS is back",
          "[train]") {
  const apiary::core::PeerAddr proxy = "/ip4/127.0.0.1/tcp/4100"_addr;
  Driver d;
  ct::ReplicaConfig config;
  config.ps = one_shard_plan();
  config.servers = {{"ps:0", k_ps}};
  config.ps_restart_wait = std::chrono::seconds(10);
  config.pull_via = {{0, proxy}};
  REQUIRE(ct::add_replica_roles(d.mux, config).ok());
  const auto asked = rejoins_in(all_of<apiary::core::Call>(d.feed(apiary::core::Start{})));
  REQUIRE(asked.size() == 1);
  CHECK(d.feed(apiary::core::Response{asked[0].first.id, rejoin_answer(false, false, 0)}).empty());

  auto [pull, pulls] = d.call("pull");
  auto calls = all_of<apiary::core::Call>(pulls);
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].peer == proxy);
  // The proxy's refresh from the PS failed (the PS died under it): the pull waits, and the
  // replica asks the PS whether it is back.
  auto held = d.feed(apiary::core::Response{
      calls[0].id, apiary::make_error(errc::peer_down, "proxy of localhost: refresh of shard 'w' failed")});
  CHECK(d.done.count(pull) == 0);
  auto asks = rejoins_in(all_of<apiary::core::Call>(fire(d, held)));
  REQUIRE(asks.size() == 1);
  CHECK(asks[0].first.peer == k_ps);
  // Back: a new session, and the pull sent through the proxy again.
  auto back = all_of<apiary::core::Call>(d.feed(apiary::core::Response{asks[0].first.id, resumed_answer(0, 0)}));
  REQUIRE(back.size() == 2);
  CHECK(back[0].handle == cps::k_ps_join_handle);
  CHECK(back[1].handle == cps::k_ps_pull_handle);
  CHECK(back[1].peer == proxy);
  CHECK(d.done.count(pull) == 0);
  cps::PullReply reply{0, 0, 3, {1, 2, 3, 4}};
  d.feed(apiary::core::Response{back[1].id, cps::to_pb("w", reply).SerializeAsString()});
  REQUIRE(d.done.at(pull).ok());
}
