// Mixture-of-experts on the simulated network (sim/scenarios/moe_scenario.hpp): clients
// mixing what the experts of their step answer equal FfnExperts called directly, a seed
// replays its trace hash, a killed server's experts are masked out or fail the step with
// an error naming them (never a hang), and lost calls time out and are masked.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sim/scenarios/moe_scenario.hpp"
#include "tests/core/moe/expert_tensors.hpp"
#include "tests/sim/scenario_report.hpp"

using namespace apiary;
using namespace std::chrono_literals;
namespace cm = apiary::core::moe;
using sim::scenarios::MoeScenarioConfig;
using sim::scenarios::MoeScenarioReport;

namespace {

/// A small job: 3 servers of 2 experts, k = 3 of the 6 per step.
MoeScenarioConfig small_job() {
  MoeScenarioConfig c;
  c.seed = 11;
  c.servers = 3;
  c.experts_per_server = 2;
  c.clients = 2;
  c.steps = 6;
  c.k = 3;
  c.k_min = 2;
  c.timeout_after_k_min = 50ms;
  c.call_timeout = 300ms;
  return c;
}

MoeScenarioReport run(const MoeScenarioConfig& c, const char* name) {
  auto report = testing::report_or_fail(sim::scenarios::run_moe_scenario(c), name);
  CHECK_FALSE(report.hung);
  CHECK(report.anomalies == 0);
  for (const auto& client : report.clients) CHECK(client.steps.size() == static_cast<std::size_t>(c.steps));
  return report;
}

/// Whether expert `uid` is served by server 0 ("ffn.0.e").
bool on_server_0(const std::string& uid) { return uid.rfind("ffn.0.", 0) == 0; }

/// Every failure line of `step` that names `uid`.
std::size_t lines_naming(const cm::MoeStep& step, const std::string& uid) {
  std::size_t n = 0;
  for (const auto& f : step.failures) n += f.find(uid + " at ") != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("on a clean network every step completes and mixes what FfnExperts give called directly", "[sim][moe]") {
  auto c = small_job();
  c.clients = 1;  // one client: the experts see its steps in order
  const auto report = run(c, "moe clean");
  REQUIRE(report.clients.size() == 1);
  CHECK(report.failed == 0);
  // The same experts, built from the same configs, called step after step.
  std::map<std::string, std::unique_ptr<cm::FfnExpert>> experts;
  for (std::size_t s = 0; s < c.servers; ++s) {
    for (std::size_t e = 0; e < c.experts_per_server; ++e) {
      experts[sim::scenarios::moe_expert_uid(s, e)] =
          std::make_unique<cm::FfnExpert>(sim::scenarios::moe_expert_config(c, s, e));
    }
  }
  for (const auto& step : report.clients[0].steps) {
    INFO("step " << step.step);
    REQUIRE(step.ok);
    CHECK(step.answered == c.k);
    CHECK(step.backward_answered == c.k);
    CHECK(step.failures.empty());
    const auto x = expert_test::rows_of(step.inputs, c.hidden_dim);
    std::vector<float> mixed(step.inputs.size(), 0.0f);
    for (const auto& uid : step.asked) {
      auto y = experts.at(uid)->forward({x});
      REQUIRE(y.ok());
      const auto values = expert_test::floats(y->front());
      for (std::size_t i = 0; i < mixed.size(); ++i) mixed[i] += values[i];
    }
    for (float& v : mixed) v /= static_cast<float>(c.k);
    CHECK(expert_test::max_abs_diff(step.mixed, mixed) <= 1e-6f);
    CHECK(step.checksum == cm::checksum_of(step.mixed));
    // Backward with the gradient of ½‖mixed‖², as the client sent it.
    std::vector<float> grad(mixed);
    for (float& v : grad) v /= static_cast<float>(c.k);
    for (const auto& uid : step.asked) {
      REQUIRE(experts.at(uid)->backward({x}, {expert_test::rows_of(grad, c.hidden_dim)}).ok());
    }
  }
}

TEST_CASE("the same seed gives the same trace hash and another seed a different one", "[sim][moe]") {
  auto c = small_job();
  const auto a = run(c, "moe seed 11");
  const auto b = run(c, "moe seed 11 again");
  CHECK(a.trace_hash == b.trace_hash);
  CHECK(a.completed == b.completed);
  for (std::size_t i = 0; i < a.clients.size(); ++i) {
    for (std::size_t s = 0; s < a.clients[i].steps.size(); ++s) {
      CHECK(a.clients[i].steps[s].checksum == b.clients[i].steps[s].checksum);
    }
  }
  c.seed = 12;
  const auto other = run(c, "moe seed 12");
  CHECK(other.trace_hash != a.trace_hash);
}

TEST_CASE("a server killed mid-run masks its experts or fails the steps below k_min naming them", "[sim][moe]") {
  MoeScenarioConfig c;
  c.seed = 5;
  c.servers = 4;
  c.experts_per_server = 2;
  c.clients = 2;
  c.steps = 20;
  c.k = 4;
  c.k_min = 3;
  c.timeout_after_k_min = 50ms;
  c.call_timeout = 300ms;
  c.kill_server = 0;
  c.kill_at = 60ms;
  c.failure_detection = 50ms;
  const auto report = run(c, "moe killed server");
  CHECK_FALSE(report.killed.empty());
  std::size_t clean = 0, masked = 0, failed = 0, told = 0;
  for (const auto& client : report.clients) {
    for (const auto& step : client.steps) {
      INFO("client " << client.client << " step " << step.step);
      for (const auto& f : step.failures) told += f.find("went down") != std::string::npos ? 1 : 0;
      if (step.start < *c.kill_at) continue;  // begun before the kill: either way
      std::size_t dead = 0;
      for (std::size_t e = 0; e < step.asked.size(); ++e) {
        if (!on_server_0(step.asked[e])) continue;
        ++dead;
        CHECK_FALSE(step.mask[e]);
        CHECK(lines_naming(step, step.asked[e]) == 1);
      }
      if (c.k - dead >= c.k_min) {
        REQUIRE(step.ok);
        CHECK(step.answered == c.k - dead);
        CHECK(step.backward_answered == c.k - dead);
        (dead == 0 ? clean : masked) += 1;
      } else {
        REQUIRE_FALSE(step.ok);
        REQUIRE(step.error);
        CHECK_THAT(step.error->message, Catch::Contains("k_min = 3"));
        for (const auto& uid : step.asked) {
          if (on_server_0(uid)) CHECK_THAT(step.error->message, Catch::Contains(uid));
        }
        ++failed;
      }
    }
  }
  CHECK(clean > 0);
  CHECK(masked > 0);
  CHECK(failed > 0);
  CHECK(told > 0);  // calls in flight at the failure detection ended at once
}

TEST_CASE("a server killed when a client begins a step ends the run without a hang", "[sim][moe]") {
  auto c = small_job();
  c.kill_server = 1;
  c.kill_at_step = 2;
  const auto report = run(c, "moe killed on cue");
  CHECK_THAT(report.killed, Catch::Contains("server 1 when client 0 began step 2"));
  CHECK(report.completed + report.failed == c.clients * static_cast<std::size_t>(c.steps));
}

TEST_CASE("lost calls time out and their experts are masked", "[sim][moe]") {
  auto c = small_job();
  c.steps = 20;
  c.loss = 0.1;
  c.call_timeout = 200ms;
  c.timeout_after_k_min = 1s;  // longer than a call's deadline: a lost call ends by its deadline
  const auto report = run(c, "moe lossy");
  CHECK(report.world.lost > 0);
  std::size_t masked = 0;
  for (const auto& client : report.clients) {
    for (const auto& step : client.steps) {
      INFO("client " << client.client << " step " << step.step);
      CHECK(step.ok == (step.answered >= c.k_min));
      CHECK(step.error.has_value() == !step.ok);
      for (std::size_t e = 0; e < step.asked.size(); ++e) {
        if (step.mask[e]) continue;
        ++masked;
        CHECK(lines_naming(step, step.asked[e]) >= 1);
      }
      for (const auto& f : step.failures) CHECK_THAT(f, Catch::Contains("deadline_exceeded"));
    }
  }
  CHECK(masked > 0);
  CHECK(report.completed > 0);
}

TEST_CASE("expert pools that wait for more rows run smaller batches at their timeout", "[sim][moe]") {
  auto c = small_job();
  c.clients = 3;
  c.min_batch_size = 1000;  // never reached: every batch runs at its timeout
  c.batch_timeout = 15ms;
  const auto report = run(c, "moe batching");
  CHECK(report.failed == 0);
  std::size_t calls = 0;
  for (const auto& client : report.clients) {
    for (const auto& step : client.steps) {
      REQUIRE(step.ok);
      CHECK(step.answered == c.k);
      CHECK(step.end - step.start >= 2 * *c.batch_timeout);  // forward, then backward
      calls += step.answered + step.backward_answered;
    }
  }
  CHECK(report.server_batches <= calls);
  c.batch_timeout.reset();
  CHECK_THAT(sim::scenarios::run_moe_scenario(c).error().message, Catch::Contains("batch_timeout"));
}

TEST_CASE("a server back after a crash answers again with its experts fresh from their seeds", "[sim][moe]") {
  auto c = small_job();
  c.steps = 12;
  c.kill_server = 0;
  c.kill_at = 60ms;
  c.restart_after = 400ms;
  c.failure_detection = 50ms;
  const auto report = run(c, "moe restarted server");
  CHECK_THAT(report.killed, Catch::Contains("server 0 at 60.000 ms, back at 460.000 ms"));
  std::size_t down = 0, back = 0;
  for (const auto& client : report.clients) {
    for (const auto& step : client.steps) {
      INFO("client " << client.client << " step " << step.step);
      bool asks_server_0 = false;
      for (const auto& uid : step.asked) asks_server_0 = asks_server_0 || on_server_0(uid);
      if (!asks_server_0) continue;
      if (step.start >= 60ms && step.end < 460ms) {
        CHECK(step.answered < c.k);  // its experts are masked out, or the step failed
        ++down;
      } else if (step.start >= 460ms) {
        CHECK(step.ok);  // back: every expert answers again
        CHECK(step.answered == c.k);
        ++back;
      }
    }
  }
  CHECK(down > 0);
  CHECK(back > 0);
}
