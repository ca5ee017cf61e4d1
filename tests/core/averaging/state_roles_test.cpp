// The averager's roles driven by hand through the role contract: StateSharingRole's
// declarations (Asks to the DHT role, re-armed every half period) and state stream,
// StateLoadingRole's one download at a time, and AveragerRole's local methods.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/averaging/averager_role.hpp"
#include "core/averaging/state_roles.hpp"
#include "core/dht/node_role.hpp"
#include "tests/core/effects_of.hpp"
#include "tests/support/peer_addr.hpp"

namespace {
using apiary::test::operator""_addr;

namespace av = apiary::core::averaging;
using namespace apiary::core;
using apiary::errc;
using apiary::testing::all_of;

/// The one Complete among `fx` (fails the test unless there is exactly one).
Complete only_complete(const Effects& fx) {
  const auto done = all_of<Complete>(fx);
  REQUIRE(done.size() == 1);
  return done[0];
}

/// The error code of the one Complete among `fx`.
errc error_of(const Effects& fx) { return only_complete(fx).result.error().code; }

}  // namespace

TEST_CASE("a sharing role declares itself through the DHT role from Start on, every half period", "[state]") {
  av::StateSharingConfig config;
  config.peer_id = "peer-a";
  config.prefix = "run";
  config.priority = 2.0;
  config.declare_period = 10.0;
  av::StateSharingRole role(config);
  CHECK(role.handles() == std::vector<std::string>{av::k_download_state_handle});

  const TimePoint t0 = TimePoint{} + std::chrono::seconds(100);
  auto fx = role.on(t0, Start{});
  REQUIRE(all_of<Ask>(fx).size() == 1);
  CHECK(all_of<Ask>(fx)[0].role == "dht");
  CHECK(all_of<Ask>(fx)[0].method == dht::k_run_method);
  CHECK(all_of<Ask>(fx)[0].args.as<dht::NodeOp>() != nullptr);
  REQUIRE(all_of<SetTimer>(fx).size() == 1);
  CHECK(all_of<SetTimer>(fx)[0].at == t0 + std::chrono::seconds(5));

  // The DHT's answer is counted; the timer declares again.
  dht::OpResult stored;
  stored.stored = {true};
  CHECK(role.on(t0, LocalReply{all_of<Ask>(fx)[0].op, Value::of(stored)}).empty());
  CHECK(role.stored() == 1);
  fx = role.on(t0 + std::chrono::seconds(5), TimerFired{all_of<SetTimer>(fx)[0].id});
  CHECK(all_of<Ask>(fx).size() == 1);
  CHECK(role.declared() == 2);
}

TEST_CASE("a sharing role's priority changes at run time: declared at once, or no longer", "[state]") {
  av::StateSharingConfig config;
  config.peer_id = "peer-a";
  config.prefix = "run";
  config.declare_period = 10.0;
  av::StateSharingRole role(config);
  CHECK(role.on({}, Start{}).empty());  // no priority yet: nothing declared

  const TimePoint t1 = TimePoint{} + std::chrono::seconds(3);
  auto fx = role.on(t1, LocalCall{1, "", av::k_set_priority_method, Value::of(std::optional<double>(7.0))});
  REQUIRE(all_of<Ask>(fx).size() == 1);
  REQUIRE(all_of<SetTimer>(fx).size() == 1);
  CHECK(all_of<SetTimer>(fx)[0].at == t1 + std::chrono::seconds(5));
  REQUIRE(all_of<Complete>(fx).size() == 1);
  CHECK(all_of<Complete>(fx)[0].op == 1);
  CHECK(all_of<Complete>(fx)[0].result.ok());
  CHECK(role.declared() == 1);

  // The same priority again declares nothing new; a NaN is refused and changes nothing.
  fx = role.on(t1, LocalCall{2, "", av::k_set_priority_method, Value::of(std::optional<double>(7.0))});
  CHECK(all_of<Ask>(fx).empty());
  fx = role.on(t1, LocalCall{3, "", av::k_set_priority_method, Value::of(std::optional<double>(std::nan("")))});
  REQUIRE(all_of<Complete>(fx).size() == 1);
  CHECK(all_of<Complete>(fx)[0].result.error().code == errc::invalid_argument);
  fx = role.on(t1, LocalCall{4, "", av::k_set_priority_method, Value::of(1.0)});  // not an optional
  CHECK(all_of<Complete>(fx)[0].result.error().code == errc::invalid_argument);
  CHECK(role.declared() == 1);

  // Stopping: the pending timer declares nothing more.
  fx = role.on(t1, LocalCall{5, "", av::k_set_priority_method, Value::of(std::optional<double>())});
  CHECK(all_of<Ask>(fx).empty());
  CHECK(role.on(t1 + std::chrono::seconds(5), TimerFired{1}).empty());
  CHECK(role.declared() == 1);
}

TEST_CASE("a role without a priority declares nothing and streams an empty state", "[state]") {
  av::StateSharingRole role(av::StateSharingConfig{});
  CHECK(role.on({}, Start{}).empty());
  auto fx = role.on({}, Request{7, av::k_download_state_handle, PeerAddr{}, {}});
  const auto replies = all_of<Reply>(fx);
  REQUIRE(replies.size() == 1);  // the end only: not sharing
  CHECK(replies[0].request == 7);
  CHECK(replies[0].last);
  CHECK(replies[0].response.ok());
}

TEST_CASE("the loading role runs one download at a time and refuses bad arguments", "[state]") {
  av::StateLoadingRole role("caller-bytes");
  av::StateLoaderConfig config;
  config.donors = {"/ip4/127.0.0.1/tcp/1"_addr};
  auto fx = role.on({}, LocalCall{1, "", av::k_load_method, Value::of(config)});
  REQUIRE(all_of<Call>(fx).size() == 1);
  const Call call = all_of<Call>(fx)[0];
  CHECK(call.caller == "caller-bytes");
  CHECK(all_of<Complete>(fx).empty());

  const Complete second = only_complete(role.on({}, LocalCall{2, "", av::k_load_method, Value::of(config)}));
  CHECK(second.op == 2);
  CHECK(second.result.error().code == errc::unavailable);
  CHECK(error_of(role.on({}, LocalCall{3, "", av::k_load_method, Value::of(42)})) == errc::invalid_argument);
  CHECK(error_of(role.on({}, LocalCall{4, "", "nonsense", {}})) == errc::not_found);

  // The donor's call fails: no donor left, so the first download completes with the error.
  const Complete first = only_complete(role.on({}, Response{call.id, apiary::make_error(errc::unavailable, "peer down")}));
  CHECK(first.op == 1);
  CHECK_FALSE(first.result.ok());
}

TEST_CASE("the averager's local methods: a step's DHT work leaves as Asks, wrong arguments are refused", "[averager]") {
  av::AveragerRoleConfig config;
  config.peer_id = "peer-a";
  av::AveragerRole role(config, [] { return std::uint64_t{4}; });
  CHECK(role.handles().size() == 2);

  CHECK(error_of(role.on({}, LocalCall{1, "", av::k_step_method, Value::of(42)})) == errc::invalid_argument);

  av::AveragerStep step;
  step.params.group_key = "run.0b";
  step.params.deadline = 1e12;
  step.params.scheduled_time = 0;
  step.params.schema_hash = "f32x2";
  step.params.request_timeout = std::chrono::seconds(3);
  step.params.min_matchmaking_time = std::chrono::seconds(5);
  step.tensors = {{1.0f, 2.0f}};
  auto fx = role.on({}, LocalCall{2, "", av::k_step_method, Value::of(step)});
  if (!all_of<Complete>(fx).empty()) FAIL(all_of<Complete>(fx)[0].result.error().what());
  CHECK(role.busy());
  const auto asks = all_of<Ask>(fx);
  REQUIRE_FALSE(asks.empty());
  for (const auto& ask : asks) CHECK(ask.role == "dht");

  const Complete busy = only_complete(role.on({}, LocalCall{3, "", av::k_step_method, Value::of(step)}));
  CHECK(busy.op == 3);
  CHECK(busy.result.error().code == errc::unavailable);

  CHECK(*only_complete(role.on({}, LocalCall{4, "", av::k_set_weight_method, Value::of(0.5)})).result->as<bool>());

  // A trigger may bring the tensors as they are now, but only at the step's sizes.
  const std::vector<std::vector<float>> wrong_sizes{{1.0f, 2.0f, 3.0f}};
  CHECK(error_of(role.on({}, LocalCall{7, "", av::k_trigger_method, Value::of(wrong_sizes)})) == errc::invalid_argument);
  CHECK(role.busy());  // the step goes on

  // Cancel ends the step (its Complete carries errc::cancelled), then the cancel's own.
  fx = role.on({}, LocalCall{5, "", av::k_cancel_method, {}});
  const auto done = all_of<Complete>(fx);
  REQUIRE(done.size() == 2);
  CHECK(done[0].op == 2);
  CHECK(done[0].result.error().code == errc::cancelled);
  CHECK(done[1].op == 5);
  CHECK_FALSE(role.busy());

  CHECK(error_of(role.on({}, LocalCall{6, "", "fly", {}})) == errc::not_found);
}
