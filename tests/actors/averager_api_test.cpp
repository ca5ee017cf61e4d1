// apiary::Averager over UCX in one process (each averager beside its own Dht and
// gateway): step control (require_trigger, set_weight before the all-reduce, cancel),
// a lone averager's clear failure, and the Moshpit key moving after a round.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <functional>
#include <future>
#include <vector>

#include "api/averager.hpp"
#include "api/dht.hpp"
#include "tests/actors/dht_peers.hpp"

using namespace apiary;
using namespace std::chrono_literals;

namespace {

/// Averagers beside DHT nodes on one actor system, bootstrapped from the first node.
struct Swarm : testing::DhtPeers {
  std::vector<std::unique_ptr<Averager>> averagers;

  explicit Swarm(const std::vector<std::vector<float>>& values, std::size_t target = 0,
                 const std::function<void(AveragerOptions&, std::size_t)>& tweak = {}) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      Dht& dht = add();
      AveragerOptions o;
      o.prefix = "test";
      o.tensors = {values[i]};
      o.target_group_size = target == 0 ? values.size() : target;
      o.min_matchmaking_time = 1.0;
      o.request_timeout = 1.0;
      if (tweak) tweak(o, i);
      auto averager = Averager::start(dht, o);
      REQUIRE(averager.ok());
      averagers.push_back(std::move(*averager));
    }
  }
  ~Swarm() { averagers.clear(); }

  /// Starts on every averager a step that waits for its trigger (30 s at most); the
  /// futures of its report, in order.
  std::vector<std::future<Result<AveragerStepReport>>> triggered_steps() {
    AveragerStepOptions step;
    step.require_trigger = true;
    step.timeout = 30;
    std::vector<std::future<Result<AveragerStepReport>>> out;
    for (auto& averager : averagers) out.push_back(averager->step(step));
    return out;
  }

  /// Checks that every averager's first tensor is `expected`, to 1e-6.
  void check_first_tensors(const std::vector<float>& expected) const {
    for (const auto& averager : averagers) {
      const auto t = averager->tensors()[0];
      REQUIRE(t.size() == expected.size());
      for (std::size_t k = 0; k < t.size(); ++k) CHECK(t[k] == Approx(expected[k]).margin(1e-6));
    }
  }
};

}  // namespace

TEST_CASE("a require_trigger step finds its group but averages only after trigger, with the weight set last",
          "[actor][averaging]") {
  Swarm swarm({{0.0f, 4.0f}, {4.0f, 0.0f}});
  auto steps = swarm.triggered_steps();
  // The group forms after min_matchmaking_time; without a trigger nothing is averaged.
  CHECK(steps[0].wait_for(3s) == std::future_status::timeout);
  CHECK(swarm.averagers[0]->tensors()[0] == std::vector<float>{0.0f, 4.0f});
  CHECK(swarm.averagers[0]->set_weight(3.0));
  swarm.averagers[0]->trigger();
  swarm.averagers[1]->trigger();
  auto a = steps[0].get();
  auto b = steps[1].get();
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->peers.size() == 2);
  CHECK(a->peers == b->peers);
  // Weighted mean: (3 * [0, 4] + 1 * [4, 0]) / 4 = [1, 3].
  swarm.check_first_tensors({1.0f, 3.0f});
  CHECK_FALSE(swarm.averagers[0]->set_weight(1.0));  // no step runs any more
}

TEST_CASE("a step scheduled before the trainer filled its tensors averages them as they are at the trigger",
          "[actor][averaging]") {
  Swarm swarm({{0.0f, 0.0f}, {0.0f, 0.0f}});
  auto steps = swarm.triggered_steps();
  // The trainer writes its values after the step began (hivemind's pre-scheduled rounds).
  swarm.averagers[0]->with_tensors([](std::vector<std::vector<float>>& t) { t[0] = {2.0f, 6.0f}; });
  swarm.averagers[1]->with_tensors([](std::vector<std::vector<float>>& t) { t[0] = {4.0f, 0.0f}; });
  swarm.averagers[0]->trigger();
  swarm.averagers[1]->trigger();
  REQUIRE(steps[0].get().ok());
  REQUIRE(steps[1].get().ok());
  swarm.check_first_tensors({3.0f, 3.0f});
}

TEST_CASE("part reductions on the CPU device actor and inline in the role give one mean",
          "[actor][averaging]") {
  // 3 peers x 3000 floats in 1 KiB parts: every reducer has many parts; peer 1 reduces
  // in its role, the others on a CPU device actor (a thread of its own).
  std::vector<std::vector<float>> values(3, std::vector<float>(3000));
  for (std::size_t p = 0; p < 3; ++p) {
    for (std::size_t k = 0; k < 3000; ++k) values[p][k] = static_cast<float>((p + 1) * k % 101) - 50.0f;
  }
  Swarm swarm(values, 0, [](AveragerOptions& o, std::size_t i) {
    o.reduce_on = i == 1 ? ReduceOn::in_role : ReduceOn::cpu;
    o.part_size_bytes = 1024;
    o.min_group_size = 3;  // all three in one group, however late one of them joins
  });
  std::vector<std::future<Result<AveragerStepReport>>> steps;
  for (auto& a : swarm.averagers) steps.push_back(a->step({}));
  for (auto& f : steps) {
    auto r = f.get();
    REQUIRE(r.ok());
    CHECK(r->peers.size() == 3);
    CHECK(r->failed_senders.empty());
    CHECK(r->failed_reducers.empty());
  }
  for (const auto& averager : swarm.averagers) {
    const auto t = averager->tensors()[0];
    for (std::size_t k = 0; k < 3000; ++k) {
      const double mean = (double{values[0][k]} + values[1][k] + values[2][k]) / 3.0;
      REQUIRE(t[k] == Approx(mean).margin(1e-5));
    }
  }
}

TEST_CASE("device tensors are read before each step and updated in place on the device",
          "[actor][averaging]") {
  // Host memory behind the CPU device actor: the same requests as a GPU's memory behind
  // the CUDA one. The trainer changes its arrays between steps; each step averages them.
  std::vector<std::vector<float>> memory = {{0.0f, 10.0f, -4.0f}, {2.0f, 20.0f, 4.0f}};
  Swarm swarm({{}, {}}, 0, [&](AveragerOptions& o, std::size_t i) {
    o.tensors.clear();
    o.device_tensors = {DeviceTensor{memory[i].data(), memory[i].size()}};
    o.reduce_on = ReduceOn::cpu;
  });
  CHECK(swarm.averagers[0]->tensors()[0] == memory[0]);  // the host copy, read at start
  for (int round = 0; round < 2; ++round) {
    INFO("round " << round);
    if (round == 1) memory[1] = {6.0f, 0.0f, 0.0f};  // the trainer's update on the device
    const std::vector<float> mean = {(memory[0][0] + memory[1][0]) / 2, (memory[0][1] + memory[1][1]) / 2,
                                     (memory[0][2] + memory[1][2]) / 2};
    auto a = swarm.averagers[0]->step({});
    auto b = swarm.averagers[1]->step({});
    REQUIRE(a.get().ok());
    REQUIRE(b.get().ok());
    for (std::size_t p = 0; p < 2; ++p) {
      for (std::size_t k = 0; k < 3; ++k) CHECK(memory[p][k] == Approx(mean[k]).margin(1e-6));
    }
  }
}

TEST_CASE("device tensors need a device actor that owns their memory", "[actor][averaging]") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  DhtOptions d;
  d.system = &sys;
  auto dht = Dht::start(d);
  REQUIRE(dht.ok());
  std::vector<float> memory(4, 1.0f);
  AveragerOptions o;
  o.prefix = "test";
  o.device_tensors = {DeviceTensor{memory.data(), memory.size()}};
  auto automatic = Averager::start(**dht, o);  // reduce_on automatic: whose memory?
  REQUIRE_FALSE(automatic.ok());
  CHECK(automatic.error().code == errc::invalid_argument);
  o.reduce_on = ReduceOn::cpu;
  o.tensors = {memory};
  CHECK(Averager::start(**dht, o).error().code == errc::invalid_argument);  // both kinds
  o.tensors.clear();
  o.device_tensors = {DeviceTensor{nullptr, 4}};
  CHECK(Averager::start(**dht, o).error().code == errc::invalid_argument);
  (*dht)->stop();
}

TEST_CASE("a lone averager fails with a clear error at its timeout, and a cancelled step says so",
          "[actor][averaging]") {
  Swarm swarm({{1.0f, 2.0f}}, 2);
  AveragerStepOptions step;
  step.timeout = 3;
  auto alone = swarm.averagers[0]->step(step).get();
  REQUIRE_FALSE(alone.ok());
  CHECK(alone.error().message.find("group") != std::string::npos);
  CHECK(swarm.averagers[0]->tensors()[0] == std::vector<float>{1.0f, 2.0f});

  step.timeout = 600;
  auto pending = swarm.averagers[0]->step(step);
  swarm.averagers[0]->cancel();
  auto cancelled = pending.get();
  REQUIRE_FALSE(cancelled.ok());
  INFO(cancelled.error().what());
  CHECK(cancelled.error().code == errc::cancelled);
}

TEST_CASE("two steps at once: the second is refused while the first runs", "[actor][averaging]") {
  Swarm swarm(std::vector<std::vector<float>>{{1.0f}}, 2);
  AveragerStepOptions step;
  step.timeout = 600;
  auto first = swarm.averagers[0]->step(step);
  auto second = swarm.averagers[0]->step(step).get();
  REQUIRE_FALSE(second.ok());
  CHECK(second.error().message.find("one averaging step at a time") != std::string::npos);
  swarm.averagers[0]->cancel();
  CHECK(first.get().error().code == errc::cancelled);
}

TEST_CASE("bad averager options are refused with the field named", "[actor][averaging]") {
  Swarm swarm(std::vector<std::vector<float>>{{1.0f}}, 2);
  AveragerOptions o;
  o.prefix = "bad.prefix";
  o.tensors = {{1.0f}};
  auto bad = Averager::start(*swarm.dhts[0], o);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == errc::invalid_argument);
  o.prefix = "fine";
  o.tensors.clear();
  auto empty = Averager::start(*swarm.dhts[0], o);
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.error().message.find("tensor") != std::string::npos);
}

TEST_CASE("an averager outliving its stopped Dht stops cleanly", "[actor][averaging]") {
  // The node (with a runtime of its own) stops first, then the averager beside it goes.
  auto done = std::async(std::launch::async, [] {
    DhtOptions d;
    d.node.wait_timeout = 1s;
    auto dht = Dht::start(d);
    REQUIRE(dht.ok());
    AveragerOptions o;
    o.prefix = "orphan";
    o.tensors = {{1.0f, 2.0f}};
    auto averager = Averager::start(**dht, o);
    REQUIRE(averager.ok());
    (*dht)->stop();
    AveragerStepOptions step;
    step.timeout = 2;
    auto r = (*averager)->step(step).get();  // fails: nobody to find a group with, or the node is gone
    CHECK_FALSE(r.ok());
    dht->reset();  // the node's runtime goes while the averager is still there
    averager->reset();
    return true;
  });
  REQUIRE(done.wait_for(60s) == std::future_status::ready);  // no hang (a hang leaves the test stuck)
  CHECK(done.get());
}
