// The simulator's fault injectors and link model, each with a small role in RoleHost:
// bandwidth makes a message's time depend on its bytes, a clog delays, a partition
// drops, a restart brings a fresh host up, and the failure detector tells every running
// node that a peer went down.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/role.hpp"
#include "sim/faults.hpp"
#include "sim/role_host.hpp"
#include "sim/world.hpp"
#include "tests/support/peer_addr.hpp"

using apiary::test::operator""_addr;
using namespace apiary;
using namespace apiary::core;
using namespace std::chrono_literals;

namespace {

constexpr const char* k_echo = "test.Echo.rpc_echo";

/// Answers echo requests with their size; on a LocalCall "send" (args: peer and bytes),
/// calls that peer with that many bytes; records answers, starts and peers gone down.
class Probe final : public Role {
 public:
  struct Send {
    PeerAddr peer;
    std::size_t bytes = 0;
  };
  std::vector<std::string> handles() const override { return {k_echo}; }
  Effects on(TimePoint now, Input input) override {
    if (std::holds_alternative<Start>(input)) ++starts;
    if (auto* r = std::get_if<Request>(&input)) return {Reply{r->id, std::to_string(r->body.size())}};
    if (auto* r = std::get_if<Response>(&input)) answers.push_back({now, r->result});
    if (auto* p = std::get_if<PeerDown>(&input)) down.push_back(p->peer);
    if (auto* c = std::get_if<LocalCall>(&input)) {
      const auto* s = c->args.as<Send>();
      return {unary_call(next_call++, s->peer, k_echo, std::string(s->bytes, 'x'), 5s), Complete{c->op, Value{}}};
    }
    return {};
  }
  struct Answer {
    TimePoint at;
    Result<std::string> result;
  };
  std::vector<Answer> answers;
  std::vector<PeerAddr> down;
  int starts = 0;
  CallId next_call = 1;
};

using ProbeHost = sim::RoleHost<Probe>;

struct Pair {
  sim::World world{7};
  ProbeHost* a = nullptr;
  ProbeHost* b = nullptr;
  const PeerAddr addr_a = "/ip4/10.0.0.1/tcp/1"_addr;
  const PeerAddr addr_b = "/ip4/10.0.0.2/tcp/1"_addr;
  Pair() {
    sim::LinkModel link;
    link.latency = 10ms;
    REQUIRE(world.network().set_default(link).ok());
    auto ha = std::make_unique<ProbeHost>();
    auto hb = std::make_unique<ProbeHost>();
    a = ha.get();
    b = hb.get();
    REQUIRE(world.add_node(addr_a, std::move(ha)).ok());
    REQUIRE(world.add_node(addr_b, std::move(hb)).ok());
    REQUIRE(world.start_node(addr_a, {}).ok());
    REQUIRE(world.start_node(addr_b, {}).ok());
    world.run_until(TimePoint{});
  }
  void send(std::size_t bytes) {
    auto fx = a->call(world.now(), "", "send", Value::of(Probe::Send{addr_b, bytes}), {});
    REQUIRE(world.submit(addr_a, std::move(fx)).ok());
  }
};

}  // namespace

TEST_CASE("a link's bandwidth makes a message take its bytes' time, after the messages before it", "[faults]") {
  Pair p;
  sim::LinkModel link;
  link.latency = 10ms;
  link.bandwidth = 1e6;  // 1 MB/s
  REQUIRE(p.world.network().set_link(p.addr_a, p.addr_b, link).ok());
  p.send(500'000);  // 0.5 s on the link
  p.send(500'000);  // waits for the first: 1 s
  p.world.run_for(3s);
  REQUIRE(p.a->role().answers.size() == 2);
  CHECK(*p.a->role().answers[0].result == "500000");
  // Out: 0.5 s on the link + 10 ms; back: 6 bytes (6 us) + 10 ms.
  CHECK(p.a->role().answers[0].at == TimePoint(500ms + 20ms + 6us));
  CHECK(p.a->role().answers[1].at == TimePoint(1000ms + 20ms + 6us));

  sim::LinkModel bad;
  bad.bandwidth = -1;
  CHECK(!p.world.network().set_default(bad).ok());
}

TEST_CASE("a clogged link delivers when the clog ends, and a partition loses what crosses it until it heals",
          "[faults]") {
  Pair p;
  REQUIRE(sim::clog_at(p.world, p.addr_a, p.addr_b, TimePoint{}, 300ms).ok());
  p.world.run_until(TimePoint(1ms));
  p.send(10);
  p.world.run_for(1s);
  REQUIRE(p.a->role().answers.size() == 1);
  CHECK(p.a->role().answers[0].result.ok());
  CHECK(p.a->role().answers[0].at >= TimePoint(300ms + 10ms));

  REQUIRE(sim::partition_at(p.world, {p.addr_a}, {p.addr_b}, p.world.now(), 10s).ok());
  p.world.run_for(1ms);
  p.send(10);
  p.world.run_for(6s);  // the call's 5 s deadline passes
  REQUIRE(p.a->role().answers.size() == 2);
  CHECK(p.a->role().answers[1].result.error().code == errc::deadline_exceeded);
  p.world.run_for(5s);  // healed
  p.send(10);
  p.world.run_for(1s);
  REQUIRE(p.a->role().answers.size() == 3);
  CHECK(p.a->role().answers[2].result.ok());

  CHECK(!sim::partition_at(p.world, {}, {p.addr_b}, p.world.now(), 1s).ok());
  CHECK(!sim::clog_at(p.world, p.addr_a, p.addr_b, p.world.now(), -1s).ok());
}

TEST_CASE("a restarted node comes back as a fresh host, and the failure detector tells the others", "[faults]") {
  Pair p;
  p.world.set_peer_down_detection(50ms);
  auto fresh = std::make_unique<ProbeHost>();
  ProbeHost* reborn = fresh.get();
  REQUIRE(sim::restart_at(p.world, p.addr_b, TimePoint(100ms), std::move(fresh)).ok());
  p.world.run_until(TimePoint(120ms));
  CHECK(reborn->role().starts == 1);
  CHECK(p.world.running(p.addr_b));
  p.world.run_until(TimePoint(200ms));
  // b crashed at 100 ms: a heard it 50 ms later, and b itself (restarted) did not.
  REQUIRE(p.a->role().down.size() == 1);
  CHECK(p.a->role().down[0] == p.addr_b);
  CHECK(reborn->role().down.empty());
  p.send(10);
  p.world.run_for(1s);
  REQUIRE(p.a->role().answers.size() == 1);
  CHECK(p.a->role().answers[0].result.ok());

  CHECK(!sim::restart_at(p.world, "/ip4/10.9.9.9/tcp/1"_addr, p.world.now(), std::make_unique<ProbeHost>()).ok());
  CHECK(!sim::restart_at(p.world, p.addr_b, p.world.now(), nullptr).ok());
}

TEST_CASE("a cued kill fires once when its cue holds, and its peer hears it after the detection delay", "[faults]") {
  Pair p;
  p.send(10);
  p.send(10);
  int checks = 0;
  std::vector<sim::CuedKill> kills;
  // b crashes once a has its first answer; a never answering (the cue never holds) kills nothing.
  kills.push_back(sim::CuedKill{p.addr_b, [&] { return p.a->role().answers.size() >= 1; }, [] { return std::string("b"); }});
  kills.push_back(sim::CuedKill{p.addr_a, [&] { ++checks; return false; }, [] { return std::string("a"); }});
  auto ran = sim::run_with_cued_kills(
      p.world, std::move(kills), [&] { return !p.a->role().down.empty(); }, TimePoint(10s), 50ms);
  CHECK(ran.done);
  REQUIRE(ran.killed == std::vector<std::string>{"b"});
  CHECK(p.world.killed(p.addr_b));
  CHECK_FALSE(p.world.killed(p.addr_a));
  CHECK(checks > 0);
  REQUIRE(p.a->role().down.size() == 1);
  CHECK(p.a->role().down[0] == p.addr_b);

  // A run whose end never comes stops at max_time, not done.
  Pair q;
  auto stalled = sim::run_with_cued_kills(q.world, {}, [] { return false; }, TimePoint(1s), 50ms);
  CHECK_FALSE(stalled.done);
  CHECK(stalled.killed.empty());
}
