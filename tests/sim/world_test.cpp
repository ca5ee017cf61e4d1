// The World's contract with any Host, checked with small scripted hosts.
#include <catch2/catch.hpp>

#include <utility>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sim/rng.hpp"
#include "sim/world.hpp"
#include "tests/sim/host_pair.hpp"

namespace {

using namespace std::chrono_literals;
using apiary::errc;
using apiary::Result;
using namespace apiary::core;
using apiary::sim::Host;
using apiary::sim::World;
using apiary::testing::addr_a;
using apiary::testing::addr_b;
const PeerAddr addr_nowhere = apiary::test::test_addr(99);

/// Records every input; answers requests with "echo:" + request, and runs `on_start`'s
/// effects when started.
class ScriptHost : public Host {
 public:
  struct Outcome {
    TimePoint at;
    CallId call;
    Result<std::string> response;
  };
  Effects start_effects;
  std::vector<Outcome> outcomes;
  std::vector<std::pair<TimePoint, TimerId>> fired;
  std::vector<std::string> requests;
  bool answer = true;
  Effects timer_effects;  ///< what the next timer to fire does
  Duration nap{};         ///< slept in each request's handler (wall time)

  Effects on_start(TimePoint) override { return start_effects; }
  Effects on_request(TimePoint, RequestId id, const std::string& handle,
                     const std::string& req) override {
    requests.push_back(handle + "/" + req);
    std::this_thread::sleep_for(nap);
    if (!answer) return {};
    return {Reply{id, "echo:" + req}};
  }
  Effects on_response(TimePoint now, CallId call, Result<std::string> r) override {
    outcomes.push_back({now, call, r});
    return {};
  }
  Effects on_timer(TimePoint now, TimerId id) override {
    fired.emplace_back(now, id);
    return std::exchange(timer_effects, {});
  }
};

struct Pair : apiary::testing::HostPair<ScriptHost> {
  Pair() : HostPair(3, {2ms, 0ms, 0.0}) {}
};

}  // namespace

TEST_CASE("a call is delivered after the link delay and answered after another") {
  Pair p;
  p.a->start_effects = {unary_call(1, addr_b, "svc", "hi", 1s)};
  REQUIRE(p.world.start_node(addr_b, 0ms).ok());
  REQUIRE(p.world.start_node(addr_a, 10ms).ok());
  p.world.run_until(TimePoint(1s));
  CHECK(p.b->requests == std::vector<std::string>{"svc/hi"});
  REQUIRE(p.a->outcomes.size() == 1);
  CHECK(p.a->outcomes[0].at == TimePoint(14ms));
  CHECK(p.a->outcomes[0].call == 1);
  REQUIRE(p.a->outcomes[0].response.ok());
  CHECK(p.a->outcomes[0].response.value() == "echo:hi");
  CHECK(p.world.now() == TimePoint(1s));
  CHECK(p.world.anomalies().empty());
}

TEST_CASE("an unanswered call fails with deadline_exceeded at its timeout") {
  Pair p;
  p.b->answer = false;
  p.a->start_effects = {unary_call(4, addr_b, "svc", "x", 300ms)};
  REQUIRE(p.world.start_node(addr_b, 0ms).ok());
  REQUIRE(p.world.start_node(addr_a, 0ms).ok());
  p.world.run_until(TimePoint(1s));
  REQUIRE(p.a->outcomes.size() == 1);
  CHECK(p.a->outcomes[0].at == TimePoint(300ms));
  CHECK(p.a->outcomes[0].response.error().code == errc::deadline_exceeded);
  CHECK(p.world.stats().timeouts == 1);
}

TEST_CASE("calls to unknown, unstarted and killed nodes fail") {
  Pair p;
  REQUIRE(p.world.start_node(addr_a, 0ms).ok());
  REQUIRE(p.world.kill_node(addr_a, 50ms).ok());
  p.world.run_until(TimePoint(1ms));
  REQUIRE(p.world.submit(addr_a, {unary_call(1, addr_nowhere, "svc", "", 1s), unary_call(2, addr_b, "svc", "", 1s)})
              .ok());
  p.world.run_until(TimePoint(20ms));
  REQUIRE(p.a->outcomes.size() == 2);
  CHECK(p.a->outcomes[0].call == 1);
  CHECK(p.a->outcomes[0].response.error().code == errc::unavailable);
  CHECK(p.a->outcomes[1].call == 2);
  CHECK(p.a->outcomes[1].at == TimePoint(5ms));  // refused by b, 2 ms each way
  CHECK(p.a->outcomes[1].response.error().code == errc::unavailable);

  // b calls a, which dies before the request lands: b times out, a hears nothing.
  REQUIRE(p.world.start_node(addr_b, 49ms).ok());
  p.b->start_effects = {unary_call(9, addr_a, "svc", "late", 500ms)};
  p.world.run_until(TimePoint(2s));
  CHECK(p.a->requests.empty());
  REQUIRE(p.b->outcomes.size() == 1);
  CHECK(p.b->outcomes[0].at == TimePoint(549ms));
  CHECK(p.b->outcomes[0].response.error().code == errc::deadline_exceeded);
  CHECK_FALSE(p.world.running(addr_a));
  CHECK(p.world.stats().to_dead == 1);
  CHECK_FALSE(p.world.submit(addr_a, {}).ok());
}

TEST_CASE("timers fire once, re-arming replaces, cancelling disarms") {
  Pair p;
  p.a->start_effects = {SetTimer{1, TimePoint(100ms)}, SetTimer{2, TimePoint(200ms)},
                        SetTimer{1, TimePoint(150ms)}, SetTimer{3, TimePoint(300ms)},
                        CancelTimer{3}};
  REQUIRE(p.world.start_node(addr_a, 0ms).ok());
  p.world.run_until(TimePoint(1s));
  using Fired = std::vector<std::pair<TimePoint, TimerId>>;
  CHECK(p.a->fired == Fired{{TimePoint(150ms), 1}, {TimePoint(200ms), 2}});
}

TEST_CASE("host misbehaviour is reported as anomalies") {
  Pair p;
  p.a->start_effects = {Reply{123, std::string("nobody asked")}, unary_call(1, addr_b, "s", "", 1s),
                        unary_call(1, addr_b, "s", "", 1s)};
  REQUIRE(p.world.start_node(addr_a, 0ms).ok());
  REQUIRE(p.world.start_node(addr_a, 1ms).ok());
  p.world.run_until(TimePoint(2s));
  REQUIRE(p.world.anomalies().size() == 3);
  CHECK(p.world.anomalies()[0].code == errc::not_found);
  CHECK(p.world.anomalies()[1].code == errc::invalid_argument);
  CHECK(p.world.anomalies()[2].code == errc::invalid_argument);
  CHECK_FALSE(p.world.add_node(addr_a, std::make_unique<ScriptHost>()).ok());
  CHECK_FALSE(p.world.start_node(apiary::test::test_addr(26), 0ms).ok());
}

TEST_CASE("timing the hosts adds up the wall time of their handlers and changes nothing the run does") {
  const auto run = [](bool timed, Duration nap) {
    auto p = std::make_unique<Pair>();
    p->world.time_hosts(timed);
    p->b->nap = nap;
    p->a->start_effects = {unary_call(1, addr_b, "svc", "1", 1s), unary_call(2, addr_b, "svc", "2", 1s),
                           unary_call(3, addr_b, "svc", "3", 1s)};
    REQUIRE(p->world.start_node(addr_b, 0ms).ok());
    REQUIRE(p->world.start_node(addr_a, 0ms).ok());
    p->world.run_until(TimePoint(1s));
    CHECK(p->a->outcomes.size() == 3);
    CHECK(p->world.anomalies().empty());
    return p;
  };
  const auto plain = run(false, 2ms);
  const auto timed = run(true, 2ms);
  CHECK(plain->world.host_wall() == Duration::zero());
  CHECK(timed->world.host_wall() >= 6ms);  // b slept 2 ms in each of its three requests
  CHECK(timed->world.trace_hash() == plain->world.trace_hash());
  CHECK(timed->world.now() == plain->world.now());
  // Turned off, the count stays where it was while the world goes on.
  const Duration before = timed->world.host_wall();
  timed->world.time_hosts(false);
  REQUIRE(timed->world.submit(addr_a, {unary_call(4, addr_b, "svc", "4", 1s)}).ok());
  timed->world.run_until(TimePoint(2s));
  CHECK(timed->a->outcomes.size() == 4);
  CHECK(timed->world.host_wall() == before);
}

TEST_CASE("invalid link models are rejected") {
  World world(1);
  CHECK(world.network().set_default({-1ms, 0ms, 0.0}).error().code == errc::invalid_argument);
  CHECK_FALSE(world.network().set_link(addr_a, addr_b, {1ms, -1ms, 0.0}).ok());
  CHECK_FALSE(world.network().set_one_way(addr_a, addr_b, {1ms, 0ms, 1.5}).ok());
}

TEST_CASE("the rng replays per seed and stays in its bounds") {
  apiary::sim::Rng a(17), b(17), c(18);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next_u64();
    CHECK(x == b.next_u64());
    differs = differs || x != c.next_u64();
  }
  CHECK(differs);
  for (int i = 0; i < 1000; ++i) {
    CHECK(a.uniform(7) < 7);
    const double u = a.uniform01();
    CHECK(u >= 0.0);
    CHECK(u < 1.0);
  }
  CHECK(a.uniform(0) == 0);
  CHECK_FALSE(a.chance(0.0));
  CHECK(a.chance(1.0));
}

namespace {

/// 5 ms of processor time per request handled, 1 ms per response, nothing else.
apiary::sim::CpuCost request_costs() {
  return [](const apiary::sim::Event& in, const Effects&) -> Duration {
    if (in.kind == apiary::sim::EventKind::request) return 5ms;
    return in.kind == apiary::sim::EventKind::response ? Duration(1ms) : Duration::zero();
  };
}

/// Pair p, with a calling b three times at 0 ms (2 ms links), run for a second.
std::vector<TimePoint> outcome_times(Pair& p) {
  p.a->start_effects = {unary_call(1, addr_b, "svc", "1", 1s), unary_call(2, addr_b, "svc", "2", 1s),
                        unary_call(3, addr_b, "svc", "3", 1s)};
  REQUIRE(p.world.start_node(addr_b, 0ms).ok());
  REQUIRE(p.world.start_node(addr_a, 0ms).ok());
  p.world.run_until(TimePoint(1s));
  std::vector<TimePoint> at;
  for (const auto& o : p.a->outcomes) {
    CHECK(o.response.ok());
    at.push_back(o.at);
  }
  CHECK(p.world.anomalies().empty());
  return at;
}

}  // namespace

TEST_CASE("a node placed on a machine handles one event at a time, its answers leaving when the work is done") {
  Pair p;
  REQUIRE(p.world.add_machine("m", 1).ok());
  REQUIRE(p.world.place(addr_b, "m", request_costs()).ok());
  // Requests arrive at 2 ms; b spends 5 ms on each, in turn: answers leave at 7, 12, 17.
  CHECK(outcome_times(p) == std::vector<TimePoint>{TimePoint(9ms), TimePoint(14ms), TimePoint(19ms)});
  CHECK(p.world.busy_time("m") == 15ms);
}

namespace {

/// Places both nodes of `p` on one machine of `cores` cores shared as `sharing`, each at
/// request_costs().
void place_both(Pair& p, std::size_t cores,
                apiary::sim::CoreSharing sharing = apiary::sim::CoreSharing::whole_events) {
  REQUIRE(p.world.add_machine("m", cores, sharing).ok());
  REQUIRE(p.world.place(addr_a, "m", request_costs()).ok());
  REQUIRE(p.world.place(addr_b, "m", request_costs()).ok());
}

}  // namespace

TEST_CASE("nodes on one machine share its cores") {
  SECTION("one core: a's answers wait for b's work") {
    Pair p;
    place_both(p, 1);
    // b works 2-7, 7-12, 12-17; a's answers (at 9, 14, 19) take the core after it.
    CHECK(outcome_times(p) == std::vector<TimePoint>{TimePoint(17ms), TimePoint(18ms), TimePoint(19ms)});
    CHECK(p.world.busy_time("m") == 18ms);
  }
  SECTION("two cores: a handles its answers as they come") {
    Pair p;
    place_both(p, 2);
    CHECK(outcome_times(p) == std::vector<TimePoint>{TimePoint(9ms), TimePoint(14ms), TimePoint(19ms)});
  }
}

TEST_CASE("time-sliced cores: every node with work runs at once, each at cores / items running of a core") {
  SECTION("one core") {
    Pair p;
    place_both(p, 1, apiary::sim::CoreSharing::time_slices);
    // b works alone on request 1 from 2 ms to 7 (a's answer at 9), on request 2 from 7:
    // from 9 it shares the core with a's 1 ms for the answer (done at 11), so its last 2 ms
    // end at 13 (answer at 15); request 3 from 13, shared from 15 to 17 with a's answer, done
    // at 19 (answer at 21). Whole events: b's three requests first, a's answers after.
    CHECK(outcome_times(p) == std::vector<TimePoint>{TimePoint(9ms), TimePoint(15ms), TimePoint(21ms)});
    CHECK(p.world.busy_time("m") == 18ms);
    CHECK(p.world.node_busy_time(addr_b) == 15ms);
  }
  SECTION("two cores: two items run at full speed") {
    Pair p;
    place_both(p, 2, apiary::sim::CoreSharing::time_slices);
    CHECK(outcome_times(p) == std::vector<TimePoint>{TimePoint(9ms), TimePoint(14ms), TimePoint(19ms)});
  }
  SECTION("work after the effects and work aside are items too") {
    Pair p;
    REQUIRE(p.world.add_machine("m", 1, apiary::sim::CoreSharing::time_slices).ok());
    // b answers each request after 1 ms, works 1 ms more, and spends 2 ms aside.
    REQUIRE(p.world.place(addr_b, "m", [](const apiary::sim::Event& in, const Effects&) -> apiary::sim::CpuCharge {
      if (in.kind == apiary::sim::EventKind::request) return {1ms, 1ms, 2ms};
      return Duration::zero();
    }).ok());
    // Request 1 at 2 ms: its 1 ms and the 2 ms aside share the core, so the answer leaves
    // at 4 (at a at 6); the work after (1 ms) shares it with the aside's last 1 ms: both
    // done at 6. Request 2 the same from 6 (answer at 10), request 3 from 10 (at 14).
    CHECK(outcome_times(p) == std::vector<TimePoint>{TimePoint(6ms), TimePoint(10ms), TimePoint(14ms)});
    CHECK(p.world.busy_time("m") == 12ms);
  }
  SECTION("a node killed while it works sends nothing of that work, and its share goes to the others") {
    Pair p;
    REQUIRE(p.world.add_machine("m", 1, apiary::sim::CoreSharing::time_slices).ok());
    REQUIRE(p.world.place(addr_b, "m", request_costs()).ok());
    // A third node on the machine, started at 2 ms with 6 ms of work: it shares the core
    // with b from 2 ms to the kill at 5 (1.5 ms done), then runs alone: done at 9.5 ms.
    const auto addr_c = apiary::test::test_addr(3);
    auto c = std::make_unique<ScriptHost>();
    auto* c_host = c.get();
    c_host->start_effects = {SetTimer{1, TimePoint{}}};
    REQUIRE(p.world.add_node(addr_c, std::move(c)).ok());
    REQUIRE(p.world.place(addr_c, "m", [](const apiary::sim::Event& in, const Effects&) -> apiary::sim::CpuCharge {
      return in.kind == apiary::sim::EventKind::timer ? apiary::sim::CpuCharge{Duration(6ms)} : Duration::zero();
    }).ok());
    REQUIRE(p.world.start_node(addr_c, TimePoint(2ms)).ok());
    c_host->timer_effects = {SetTimer{2, TimePoint{}}};  // what c's work does: a timer, due when it is done
    p.a->start_effects = {unary_call(1, addr_b, "svc", "1", 100ms)};
    REQUIRE(p.world.start_node(addr_b, 0ms).ok());
    REQUIRE(p.world.start_node(addr_a, 0ms).ok());
    REQUIRE(p.world.kill_node(addr_b, TimePoint(5ms)).ok());
    p.world.run_until(TimePoint(1s));
    REQUIRE(p.a->outcomes.size() == 1);
    CHECK(p.a->outcomes[0].response.error().code == errc::deadline_exceeded);
    REQUIRE(c_host->fired.size() == 2);
    CHECK(c_host->fired[0].first == TimePoint(2ms));
    CHECK(c_host->fired[1].first == TimePoint(Duration(9500us)));
  }
}

TEST_CASE("work after an event's effects: its answer leaves at once, and the node's next event waits for the work") {
  Pair p;
  REQUIRE(p.world.add_machine("m", 1).ok());
  // b answers each request after 1 ms and then works 4 ms more (a replica's next step).
  REQUIRE(p.world.place(addr_b, "m", [](const apiary::sim::Event& in, const Effects&) -> apiary::sim::CpuCharge {
    if (in.kind == apiary::sim::EventKind::request) return {1ms, 4ms};
    return Duration::zero();
  }).ok());
  // Requests arrive at 2 ms: answers leave at 3, 8 and 13 (each after the work before it)
  // and reach a 2 ms later.
  CHECK(outcome_times(p) == std::vector<TimePoint>{TimePoint(5ms), TimePoint(10ms), TimePoint(15ms)});
  CHECK(p.world.busy_time("m") == 15ms);
}

TEST_CASE("a node killed while it works sends nothing of that work, and placing needs a machine") {
  Pair p;
  REQUIRE(p.world.add_machine("m", 1).ok());
  REQUIRE(p.world.place(addr_b, "m", request_costs()).ok());
  p.a->start_effects = {unary_call(1, addr_b, "svc", "1", 100ms)};
  REQUIRE(p.world.start_node(addr_b, 0ms).ok());
  REQUIRE(p.world.start_node(addr_a, 0ms).ok());
  REQUIRE(p.world.kill_node(addr_b, TimePoint(5ms)).ok());  // its answer would leave at 7 ms
  p.world.run_until(TimePoint(1s));
  REQUIRE(p.a->outcomes.size() == 1);
  CHECK(p.a->outcomes[0].response.error().code == errc::deadline_exceeded);
  CHECK(p.world.add_machine("m", 2).error().code == errc::invalid_argument);
  CHECK(p.world.add_machine("z", 0).error().code == errc::invalid_argument);
  CHECK(p.world.place(addr_a, "nowhere", request_costs()).error().code == errc::not_found);
  CHECK(p.world.place(addr_a, "m", nullptr).error().code == errc::invalid_argument);
}

TEST_CASE("work aside holds a core, not the node: the node's next event need not wait for it") {
  // b answers each request after 1 ms, then spends 4 ms aside (its threads' wake-ups).
  const auto aside_costs = [](const apiary::sim::Event& in, const Effects&) -> apiary::sim::CpuCharge {
    if (in.kind == apiary::sim::EventKind::request) return {1ms, 0ms, 4ms};
    return Duration::zero();
  };
  // One core: the work aside comes before the next request, as work after would. Two
  // cores: answers leave at 3 and 4 (1 ms each, the 4 ms aside on the other core), and at
  // 7, when a core is free again.
  const std::pair<std::size_t, std::vector<TimePoint>> cases[] = {
      {1, {TimePoint(5ms), TimePoint(10ms), TimePoint(15ms)}}, {2, {TimePoint(5ms), TimePoint(6ms), TimePoint(9ms)}}};
  for (const auto& [cores, answers] : cases) {
    Pair p;
    REQUIRE(p.world.add_machine("m", cores).ok());
    REQUIRE(p.world.place(addr_b, "m", aside_costs).ok());
    CHECK(outcome_times(p) == answers);
    CHECK(p.world.busy_time("m") == 15ms);
    CHECK(p.world.node_busy_time(addr_b) == 15ms);
  }
}

TEST_CASE("an event that finds its placed node with nothing to do is marked woke") {
  Pair p;
  REQUIRE(p.world.add_machine("m", 1).ok());
  std::vector<bool> woke;
  REQUIRE(p.world.place(addr_b, "m", [&woke](const apiary::sim::Event& in, const Effects&) -> apiary::sim::CpuCharge {
    if (in.kind != apiary::sim::EventKind::request) return Duration::zero();
    woke.push_back(in.woke);
    return Duration(5ms);
  }).ok());
  // Three requests at 2 ms: the first finds b idle, the others wait for it.
  (void)outcome_times(p);
  CHECK(woke == std::vector<bool>{true, false, false});
}

TEST_CASE("a node's idle load is charged every 10 ms while it runs and the world has work queued") {
  Pair p;
  REQUIRE(p.world.add_machine("m", 1).ok());
  REQUIRE(p.world.place(addr_b, "m", [](const apiary::sim::Event&, const Effects&) { return Duration::zero(); }).ok());
  CHECK(p.world.set_idle_load(addr_a, 100ms).error().code == errc::invalid_argument);  // not placed
  CHECK(p.world.set_idle_load(addr_b, -1ms).error().code == errc::invalid_argument);
  CHECK(p.world.set_idle_load(apiary::test::test_addr(9), 1ms).error().code == errc::not_found);
  REQUIRE(p.world.set_idle_load(addr_b, 100ms).ok());  // a tenth of a core
  // a's calls keep the world busy until their deadlines at 1 s: 100 charges of 1 ms.
  (void)outcome_times(p);
  CHECK(p.world.node_busy_time(addr_b) == 100ms);
  CHECK(p.world.busy_time("m") == 100ms);
  // With nothing left to do the world stops charging, and its clock stops with it.
  p.world.run_until(TimePoint(5s));
  CHECK(p.world.node_busy_time(addr_b) == 100ms);
  CHECK(p.world.queued() == 0);
}

TEST_CASE("events that wait for their busy node are handled in the order they came") {
  // One core: b works 10 ms on each request; a's idle load puts 5 ms on the core every
  // 10 ms. Request 2 comes at 3 ms and waits for b (free at 12); the charge at 10 ms holds
  // the core to 17, so request 3, coming at 11 ms, waits until 17 too: request 2 came
  // first and goes first (a stream's messages through a busy node keep their order).
  Pair p;
  REQUIRE(p.world.add_machine("m", 1).ok());
  REQUIRE(p.world.place(addr_a, "m", [](const apiary::sim::Event&, const Effects&) { return Duration::zero(); }).ok());
  REQUIRE(p.world.place(addr_b, "m", [](const apiary::sim::Event& in, const Effects&) -> Duration {
    return in.kind == apiary::sim::EventKind::request ? Duration(10ms) : Duration::zero();
  }).ok());
  REQUIRE(p.world.set_idle_load(addr_a, 500ms).ok());
  REQUIRE(p.world.start_node(addr_b, 0ms).ok());
  REQUIRE(p.world.start_node(addr_a, 0ms).ok());
  for (const auto& [at, id] : {std::pair{0ms, 1}, std::pair{1ms, 2}, std::pair{9ms, 3}}) {
    p.world.run_until(TimePoint(at));
    REQUIRE(p.world.submit(addr_a, {unary_call(static_cast<CallId>(id), addr_b, "svc", std::to_string(id), 1s)}).ok());
  }
  p.world.run_until(TimePoint(1s));
  CHECK(p.b->requests == std::vector<std::string>{"svc/1", "svc/2", "svc/3"});
  std::vector<CallId> answered;
  for (const auto& o : p.a->outcomes) answered.push_back(o.call);
  CHECK(answered == std::vector<CallId>{1, 2, 3});
  CHECK(p.world.anomalies().empty());
}

TEST_CASE("events waiting for one busy node go back to the queue once each, not once per event it handles") {
  // 200 requests reach b at once; it works 1 ms on each. They are answered in the order
  // they were sent, and the world handles each about twice (its arrival, its turn) plus
  // the answers and deadlines (some 1,000 events), where requeueing every waiting request
  // after each one handled would take some 20,000.
  Pair p;
  REQUIRE(p.world.add_machine("m", 1).ok());
  REQUIRE(p.world.place(addr_b, "m", [](const apiary::sim::Event& in, const Effects&) -> Duration {
    return in.kind == apiary::sim::EventKind::request ? Duration(1ms) : Duration::zero();
  }).ok());
  constexpr int n = 200;
  for (int i = 1; i <= n; ++i) {
    p.a->start_effects.push_back(unary_call(static_cast<CallId>(i), addr_b, "svc", std::to_string(i), 10s));
  }
  REQUIRE(p.world.start_node(addr_b, 0ms).ok());
  REQUIRE(p.world.start_node(addr_a, 0ms).ok());
  p.world.run_until(TimePoint(20s));
  REQUIRE(p.a->outcomes.size() == static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    CHECK(p.a->outcomes[static_cast<std::size_t>(i)].call == static_cast<CallId>(i + 1));
    CHECK(p.a->outcomes[static_cast<std::size_t>(i)].at == TimePoint(2ms + (i + 1) * 1ms + 2ms));
  }
  CHECK(p.world.stats().events < 6 * static_cast<std::uint64_t>(n));
  CHECK(p.world.queued() == 0);
}

TEST_CASE("nodes that share a process: their messages are marked local, and what they send each other stays") {
  for (const bool shared : {false, true}) {
    Pair p;
    REQUIRE(p.world.add_machine("m", 1).ok());
    if (shared) REQUIRE(p.world.share_process(addr_a, addr_b).ok());
    std::vector<bool> local, stays;
    auto& world = p.world;
    REQUIRE(p.world.place(addr_b, "m", [&](const apiary::sim::Event& in, const Effects& out) -> apiary::sim::CpuCharge {
      if (in.kind == apiary::sim::EventKind::request) {
        local.push_back(in.local);
        for (const auto& e : out) stays.push_back(world.stays_in_process(in, e));  // b's answer to a
      }
      return Duration::zero();
    }).ok());
    (void)outcome_times(p);
    CHECK(local == std::vector<bool>(3, shared));
    CHECK(stays == std::vector<bool>(3, shared));
  }
  Pair p;
  CHECK(p.world.share_process(addr_a, apiary::test::test_addr(9)).error().code == errc::not_found);
}
