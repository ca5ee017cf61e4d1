// The mixture-of-experts client role (core/moe/moe_client_role.hpp) driven by hand: its
// forward calls answered by FfnExperts called directly, or failed, late or downed.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "core/moe/expert_backend.hpp"
#include "core/moe/expert_server_role.hpp"
#include "core/moe/moe_client_role.hpp"
#include "tests/core/moe/expert_tensors.hpp"

namespace {

namespace core = apiary::core;
namespace moe = apiary::core::moe;
using namespace std::chrono_literals;

constexpr std::uint32_t h = 8;

core::PeerAddr server(int i) {
  auto addr = core::PeerAddr::parse("/ip4/10.0.0." + std::to_string(i) + "/tcp/5100");
  REQUIRE(addr.ok());
  return *addr;
}

/// Four experts, two per server; k = 3 of them per step, k_min = 2.
moe::MoeClientConfig config() {
  moe::MoeClientConfig c;
  c.grid = {{"ffn.0.0", server(0)}, {"ffn.0.1", server(0)}, {"ffn.1.0", server(1)}, {"ffn.1.1", server(1)}};
  c.k = 3;
  c.k_min = 2;
  c.hidden_dim = h;
  c.rows = 2;
  c.steps = 2;
  c.seed = 7;
  return c;
}

std::vector<core::Call> calls(const core::Effects& fx) {
  std::vector<core::Call> out;
  for (const auto& e : fx) {
    if (const auto* c = std::get_if<core::Call>(&e)) out.push_back(*c);
  }
  return out;
}

template <class T>
std::size_t count(const core::Effects& fx) {
  std::size_t n = 0;
  for (const auto& e : fx) n += std::holds_alternative<T>(e) ? 1 : 0;
  return n;
}

/// A call's ExpertRequest: its uid and tensors.
apiary::pb::ExpertRequest request_of(const core::Call& call) {
  apiary::pb::ExpertRequest r;
  REQUIRE(r.ParseFromString(call.request));
  return r;
}

std::vector<float> tensor_floats(const apiary::pb::ExpertRequest& r, int i) {
  auto t = apiary::messages::decode(r.tensors(i));
  REQUIRE(t.ok());
  return expert_test::floats(*t);
}

/// The forward of an ffn expert of seed `seed` on the call's rows, as the server's answer.
std::string answer(const core::Call& call, std::uint64_t seed, std::vector<float>* rows = nullptr) {
  moe::FfnConfig f;
  f.hidden_dim = h;
  f.seed = seed;
  const auto r = request_of(call);
  auto y = moe::FfnExpert(f).forward({expert_test::rows_of(tensor_floats(r, 0), h)});
  REQUIRE(y.ok());
  if (rows != nullptr) *rows = expert_test::floats(y->front());
  apiary::pb::ExpertResponse response;
  *response.add_tensors() = apiary::messages::encode_none(y->front());
  return response.SerializeAsString();
}

core::Effects respond(moe::MoeClientRole& role, core::TimePoint now, const core::Call& call,
                      apiary::Result<std::string> result) {
  return role.on(now, core::Response{call.id, std::move(result)});
}

apiary::Error deadline() { return apiary::make_error(apiary::errc::deadline_exceeded, "no reply"); }

}  // namespace

TEST_CASE("the client asks k distinct experts at once and fails a step below k_min naming them", "[moe]") {
  moe::MoeClientRole role(config());
  REQUIRE(moe::validate(role.config()));
  const auto forward = calls(role.on(0ms, core::Start{}));
  REQUIRE(forward.size() == 3);
  std::map<std::string, int> uids;
  for (const auto& c : forward) {
    CHECK(c.handle == moe::k_forward_handle);
    CHECK(c.timeout == role.config().forward_timeout);
    uids[request_of(c).uid()] += 1;
  }
  CHECK(uids.size() == 3);  // distinct experts
  CHECK(respond(role, 5ms, forward[0], deadline()).empty());
  CHECK(respond(role, 6ms, forward[1], deadline()).empty());
  auto fx = respond(role, 7ms, forward[2], answer(forward[2], 1));  // one answer of the two needed
  REQUIRE(role.steps().size() == 1);
  const auto& step = role.steps()[0];
  CHECK_FALSE(step.ok);
  CHECK(step.answered == 1);
  REQUIRE(step.error);
  CHECK_THAT(step.error->message, Catch::Contains("k_min = 2") && Catch::Contains(request_of(forward[0]).uid()) &&
                                      Catch::Contains(request_of(forward[1]).uid()) &&
                                      Catch::Contains("deadline_exceeded"));
  CHECK(calls(fx).empty());  // no backward for a failed step
  REQUIRE(fx.size() == 1);
  CHECK(std::get<core::SetTimer>(fx[0]).id == moe::MoeClientRole::k_step_timer);
  // The next step begins when its timer fires.
  CHECK(calls(role.on(7ms, core::TimerFired{moe::MoeClientRole::k_step_timer})).size() == 3);
}

TEST_CASE("after k_min answers the client waits timeout_after_k_min then mixes and sends backward", "[moe]") {
  moe::MoeClientRole role(config());
  const auto forward = calls(role.on(0ms, core::Start{}));
  REQUIRE(forward.size() == 3);
  std::vector<float> y0, y1;
  CHECK(respond(role, 3ms, forward[0], answer(forward[0], 1, &y0)).empty());
  auto armed = respond(role, 4ms, forward[1], answer(forward[1], 2, &y1));
  REQUIRE(armed.size() == 1);
  const auto& timer = std::get<core::SetTimer>(armed[0]);
  CHECK(timer.id == moe::MoeClientRole::k_k_min_timer);
  CHECK(timer.at == 4ms + role.config().timeout_after_k_min);
  // The third expert is late: cancelled, masked out; backward goes to the two that answered.
  auto fx = role.on(timer.at, core::TimerFired{timer.id});
  CHECK(count<core::Cancel>(fx) == 1);
  const auto backward = calls(fx);
  REQUIRE(backward.size() == 2);
  std::vector<float> mixed(y0.size());
  for (std::size_t i = 0; i < mixed.size(); ++i) mixed[i] = (y0[i] + y1[i]) / 2.0f;
  for (std::size_t j = 0; j < 2; ++j) {
    CHECK(backward[j].handle == moe::k_backward_handle);
    const auto r = request_of(backward[j]);
    CHECK(r.uid() == request_of(forward[j]).uid());
    REQUIRE(r.tensors_size() == 2);
    CHECK(tensor_floats(r, 0) == tensor_floats(request_of(forward[j]), 0));
    std::vector<float> grad(mixed);
    for (float& v : grad) v /= 2.0f;
    CHECK(expert_test::max_abs_diff(tensor_floats(r, 1), grad) <= 1e-7f);
  }
  CHECK(respond(role, timer.at + 1ms, forward[2], answer(forward[2], 3)).empty());  // too late: ignored
  CHECK(respond(role, timer.at + 2ms, backward[0], std::string{}).empty());
  auto done = respond(role, timer.at + 3ms, backward[1], deadline());
  REQUIRE(role.steps().size() == 1);
  const auto& step = role.steps()[0];
  CHECK(step.ok);
  CHECK(step.mask == std::vector<bool>{true, true, false});
  CHECK(step.backward_answered == 1);
  CHECK(expert_test::max_abs_diff(step.mixed, mixed) <= 1e-7f);
  CHECK(step.checksum == moe::checksum_of(step.mixed));
  REQUIRE(step.failures.size() == 2);
  CHECK_THAT(step.failures[0], Catch::Contains(step.asked[2]) && Catch::Contains("timeout_after_k_min"));
  CHECK_THAT(step.failures[1], Catch::Contains(step.asked[1]) && Catch::Contains("backward: deadline_exceeded"));
  CHECK(step.end - step.start == timer.at + 3ms);
  CHECK(count<core::SetTimer>(done) == 1);
}

TEST_CASE("a server going down ends its calls at once and the last step ends the client", "[moe]") {
  auto c = config();
  c.steps = 1;
  c.k = 4;
  c.k_min = 2;
  moe::MoeClientRole role(c);
  const auto forward = calls(role.on(0ms, core::Start{}));
  REQUIRE(forward.size() == 4);
  auto fx = role.on(50ms, core::PeerDown{server(0)});
  CHECK(count<core::Cancel>(fx) == 2);
  CHECK(role.steps().empty());  // the other server's experts may still answer
  for (const auto& call : forward) {
    if (call.peer == server(1)) fx = respond(role, 60ms, call, deadline());
  }
  REQUIRE(role.steps().size() == 1);
  const auto& step = role.steps()[0];
  CHECK_FALSE(step.ok);
  CHECK_THAT(step.error->message, Catch::Contains("ffn.0.0") && Catch::Contains("ffn.0.1") &&
                                      Catch::Contains("went down") && Catch::Contains("got 0"));
  CHECK(role.done());
  CHECK(fx.empty());  // no next step
}

TEST_CASE("an answer of the wrong shape masks its expert with an error saying what came", "[moe]") {
  moe::MoeClientRole role(config());
  const auto forward = calls(role.on(0ms, core::Start{}));
  REQUIRE(forward.size() == 3);
  auto narrow = apiary::messages::Tensor::zeros(apiary::messages::dtype::float32, {2, h / 2});
  REQUIRE(narrow.ok());
  apiary::pb::ExpertResponse response;
  *response.add_tensors() = apiary::messages::encode_none(*narrow);
  CHECK(respond(role, 1ms, forward[0], response.SerializeAsString()).empty());
  CHECK(respond(role, 2ms, forward[1], std::string("\xff\xff", 2)).empty());
  (void)respond(role, 3ms, forward[2], answer(forward[2], 1));  // one answer of the two needed
  REQUIRE(role.steps().size() == 1);
  const auto& step = role.steps()[0];
  CHECK(step.mask == std::vector<bool>{false, false, true});
  REQUIRE(step.failures.size() == 2);
  CHECK_THAT(step.failures[0], Catch::Contains("expected a float32 output of shape [2, 8]") &&
                                   Catch::Contains("got float32 of shape [2, 4]"));
  CHECK_THAT(step.failures[1], Catch::Contains("malformed"));
}

TEST_CASE("validate names the bad field of a client config", "[moe]") {
  auto c = config();
  c.k = 5;
  CHECK_THAT(moe::validate(c).error().message, Catch::Contains("expected k in [1, 4]"));
  c = config();
  c.k_min = 4;
  CHECK_THAT(moe::validate(c).error().message, Catch::Contains("k_min"));
  c = config();
  c.grid.push_back(c.grid.front());
  CHECK_THAT(moe::validate(c).error().message, Catch::Contains("distinct"));
}
