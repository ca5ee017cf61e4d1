// The unchanged core::ping::Pinger running as a 50-node swarm in the simulated world.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "sim/faults.hpp"
#include "sim/scenarios/ping_swarm.hpp"
#include "sim/world.hpp"

namespace {

using namespace std::chrono_literals;
using apiary::core::Duration;
using apiary::core::TimePoint;
using apiary::sim::LinkModel;
using apiary::sim::World;
using apiary::sim::scenarios::PingSwarm;
using apiary::sim::scenarios::PingSwarmOptions;
namespace scenarios = apiary::sim::scenarios;

constexpr std::size_t k_nodes = 50;
constexpr Duration k_latency = 5ms;  // one-way base delay of every link
constexpr Duration k_jitter = 1ms;   // one-way extra delay, uniform in [0, 1 ms]

/// A world with the swarm's default links, and a 50-node swarm started within 100 ms.
PingSwarm make_swarm(World& world, LinkModel link = {k_latency, k_jitter, 0.0}) {
  REQUIRE(world.network().set_default(link).ok());
  PingSwarmOptions options;
  options.nodes = k_nodes;
  options.start_spread = 100ms;
  auto swarm = PingSwarm::create(world, options);
  REQUIRE(swarm.ok());
  return std::move(swarm.value());
}

void print_run(const char* name, const World& world) {
  std::printf("[%s] %s\n", name, world.summary().c_str());
}

}  // namespace

TEST_CASE("a 50-node swarm from one bootstrap converges to a full mesh") {
  World world(42);
  PingSwarm swarm = make_swarm(world);
  auto converged = scenarios::run_until_converged(world, swarm, TimePoint(10s), 10ms);
  print_run("converge", world);
  INFO(world.summary());
  REQUIRE(converged.ok());
  // Round 1 tells node 0 about everyone; node 0's round 2 (~1 s) tells everyone; every
  // pair has an RTT sample after the round after that (~2 s).
  CHECK(converged.value() <= TimePoint(3s));
  for (std::size_t i = 0; i < swarm.size(); ++i) {
    CHECK(swarm.pinger(i).peers().size() == k_nodes - 1);
    CHECK(swarm.pinger(i).peers().count(swarm.addr(i)) == 0);
  }
  CHECK(world.anomalies().empty());
  CHECK(world.stats().timeouts == 0);
}

TEST_CASE("RTTs are exactly two link delays, within the jitter bounds") {
  World world(1234);
  PingSwarm swarm = make_swarm(world);
  // One slow pair: 40 ms each way, no jitter.
  REQUIRE(world.network().set_link(swarm.addr(1), swarm.addr(2), {40ms, 0ms, 0.0}).ok());
  world.run_until(TimePoint(6s));
  print_run("rtt", world);

  Duration lowest = Duration::max();
  Duration highest = Duration::zero();
  std::size_t samples = 0;
  for (std::size_t i = 0; i < swarm.size(); ++i) {
    for (const auto& [addr, stats] : swarm.pinger(i).peers()) {
      const bool slow = (i == 1 && addr == swarm.addr(2)) || (i == 2 && addr == swarm.addr(1));
      REQUIRE_FALSE(stats.rtts.empty());
      for (Duration rtt : stats.rtts) {
        INFO(swarm.addr(i) << " -> " << addr << " rtt " << rtt.count() << " ns");
        if (slow) {
          CHECK(rtt == Duration(80ms));
        } else {
          CHECK(rtt >= 2 * k_latency);
          CHECK(rtt <= 2 * (k_latency + k_jitter));
          lowest = std::min(lowest, rtt);
          highest = std::max(highest, rtt);
        }
        ++samples;
      }
    }
  }
  CHECK(samples >= k_nodes * (k_nodes - 1) * 3);
  // The jitter is drawn, not constant.
  CHECK(highest - lowest > Duration(1ms));
}

TEST_CASE("the same seed replays the same trace, another seed does not") {
  auto run = [](std::uint64_t seed) {
    World world(seed);
    PingSwarm swarm = make_swarm(world);
    world.run_until(TimePoint(5s));
    print_run("replay", world);
    return std::make_pair(world.trace_hash(), world.stats().events);
  };
  const auto first = run(7);
  const auto again = run(7);
  const auto other = run(8);
  CHECK(first.first == again.first);
  CHECK(first.second == again.second);
  CHECK(first.first != other.first);
}

TEST_CASE("a killed node is recorded as failing while the rest keep working") {
  World world(99);
  PingSwarm swarm = make_swarm(world);
  REQUIRE(scenarios::run_until_converged(world, swarm, TimePoint(10s), 10ms).ok());
  const std::size_t victim = 7;
  const TimePoint kill_time = world.now() + 500ms;
  REQUIRE(apiary::sim::kill_at(world, swarm.addr(victim), kill_time).ok());

  // Snapshot of what every node had seen of every peer before the crash.
  world.run_until(kill_time);
  std::map<std::pair<std::size_t, apiary::core::PeerAddr>, std::size_t> answered_before;
  std::map<std::pair<std::size_t, apiary::core::PeerAddr>, std::size_t> failed_before;
  for (std::size_t i = 0; i < swarm.size(); ++i) {
    for (const auto& [addr, stats] : swarm.pinger(i).peers()) {
      answered_before[{i, addr}] = stats.answered;
      failed_before[{i, addr}] = stats.failed;
    }
  }
  const auto victim_rounds = swarm.pinger(victim).rounds();

  world.run_for(5s);
  print_run("kill", world);
  CHECK_FALSE(world.running(swarm.addr(victim)));
  CHECK(swarm.pinger(victim).rounds() == victim_rounds);  // a dead node does nothing
  for (std::size_t i = 0; i < swarm.size(); ++i) {
    if (i == victim) continue;
    for (const auto& [addr, stats] : swarm.pinger(i).peers()) {
      INFO(swarm.addr(i) << " -> " << addr);
      if (addr == swarm.addr(victim)) {
        // At most one answer can still be in flight when the victim dies.
        CHECK(stats.answered <= answered_before[{i, addr}] + 1);
        CHECK(stats.failed >= failed_before[{i, addr}] + 3);
        CHECK_THAT(stats.last_error, Catch::StartsWith("deadline_exceeded"));
      } else {
        CHECK(stats.answered >= answered_before[{i, addr}] + 4);
        CHECK(stats.failed == failed_before[{i, addr}]);
      }
    }
  }
  CHECK(scenarios::check_full_mesh(world, swarm).ok());
  CHECK(world.stats().to_dead > 0);
  CHECK(world.anomalies().empty());
}

TEST_CASE("a lossy network still converges, with the losses recorded as timeouts") {
  World world(5);
  PingSwarm swarm = make_swarm(world, {k_latency, k_jitter, 0.2});
  auto converged = scenarios::run_until_converged(world, swarm, TimePoint(20s), 100ms);
  print_run("lossy", world);
  INFO(world.summary());
  REQUIRE(converged.ok());
  CHECK(world.stats().lost > 0);
  CHECK(world.stats().timeouts > 0);
  std::size_t failed = 0;
  for (std::size_t i = 0; i < swarm.size(); ++i) {
    for (const auto& [addr, stats] : swarm.pinger(i).peers()) failed += stats.failed;
  }
  CHECK(failed > 0);
}
