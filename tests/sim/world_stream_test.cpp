// Streaming calls in the World: Send, Reply{last = false} and Cancel travel over the
// links in order; ends, errors, cancels, deadlines and crashes reach both sides.
#include <catch2/catch.hpp>

#include <chrono>
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sim/world.hpp"
#include "tests/sim/host_pair.hpp"

namespace {

using namespace std::chrono_literals;
using namespace apiary;
using namespace apiary::core;
using apiary::sim::Host;
using apiary::sim::World;
using apiary::testing::addr_a;
using apiary::testing::addr_b;

std::string text(const Result<std::string>& r) {
  return r.ok() ? r.value() : std::string("error:") + apiary::to_string(r.error().code);
}

/// A streaming call with `first` as the caller's first message.
Call stream_call(CallId id, std::string handle, std::string first, bool last,
                 apiary::core::Duration timeout = 1s) {
  Call c;
  c.id = id;
  c.peer = addr_b;
  c.handle = std::move(handle);
  c.request = std::move(first);
  c.timeout = timeout;
  c.stream = true;
  c.last = last;
  return c;
}

/// Logs every input ("req", "reqmsg", "msg", "resp", "timer" lines, with their times) and
/// answers through the scripted functions.
class StreamHost : public Host {
 public:
  std::vector<std::string> log;
  std::vector<TimePoint> at;
  Effects start_effects;
  std::function<Effects(TimePoint, RequestId, const std::string&)> on_req;
  std::function<Effects(TimePoint, RequestId, const Result<std::string>&, bool)> on_req_msg;
  std::function<Effects(TimePoint, CallId, const std::string&)> on_msg;
  std::function<Effects(TimePoint, TimerId)> on_tick;

  Effects on_start(TimePoint) override { return start_effects; }
  Effects on_request(TimePoint now, RequestId id, const std::string& handle,
                     const std::string& request) override {
    note(now, "req " + handle + "/" + request);
    return on_req ? on_req(now, id, request) : Effects{};
  }
  Effects on_request_message(TimePoint now, RequestId id, const Result<std::string>& message,
                             bool last) override {
    note(now, "reqmsg " + text(message) + (last ? " last" : " more"));
    return on_req_msg ? on_req_msg(now, id, message, last) : Effects{};
  }
  Effects on_message(TimePoint now, CallId call, const std::string& message) override {
    note(now, "msg " + std::to_string(call) + " " + message);
    return on_msg ? on_msg(now, call, message) : Effects{};
  }
  Effects on_response(TimePoint now, CallId call, Result<std::string> r) override {
    note(now, "resp " + std::to_string(call) + " " + text(r));
    return {};
  }
  Effects on_timer(TimePoint now, TimerId id) override {
    return on_tick ? on_tick(now, id) : Effects{};
  }

 private:
  void note(TimePoint now, std::string line) {
    log.push_back(std::move(line));
    at.push_back(now);
  }
};

/// a: the caller; b: the callee.
struct Pair : apiary::testing::HostPair<StreamHost> {
  explicit Pair(std::uint64_t seed = 5, apiary::sim::LinkModel link = {2ms, 0ms, 0.0}) : HostPair(seed, link) {}
  void start() {
    REQUIRE(world.start_node(addr_b, 0ms).ok());
    REQUIRE(world.start_node(addr_a, 0ms).ok());
  }
};

using Lines = std::vector<std::string>;

/// The callee of a bidi echo: echoes every message, ending with the caller's last.
void serve_echo(StreamHost& b) {
  b.on_req = [](TimePoint, RequestId id, const std::string& m) {
    return Effects{Reply{id, "echo:" + m, false}};
  };
  b.on_req_msg = [](TimePoint, RequestId id, const Result<std::string>& m, bool last) {
    return m.ok() ? Effects{Reply{id, "echo:" + m.value(), last}} : Effects{};
  };
}

/// The callee of a ticker: from the request on, one "tick<k>" every 1 ms, until the
/// request ends; then it replies once more (which the World must ignore).
void serve_ticks(StreamHost& b) {
  auto request = std::make_shared<RequestId>(0);
  auto ticks = std::make_shared<int>(0);
  auto over = std::make_shared<bool>(false);
  b.on_req = [=](TimePoint now, RequestId id, const std::string&) {
    *request = id;
    return Effects{SetTimer{1, now + 1ms}};
  };
  b.on_req_msg = [=](TimePoint, RequestId, const Result<std::string>& m, bool) {
    if (!m.ok()) *over = true;
    return Effects{};
  };
  b.on_tick = [=](TimePoint now, TimerId) {
    Effects fx{Reply{*request, "tick" + std::to_string((*ticks)++), false}};
    if (!*over) fx.push_back(SetTimer{1, now + 1ms});
    return fx;
  };
}

}  // namespace

TEST_CASE("a bidi echo: three messages each way, in lockstep, then both end") {
  Pair p;
  serve_echo(*p.b);
  p.a->start_effects = {stream_call(1, "echo", "m1", false)};
  p.a->on_msg = [](TimePoint, CallId call, const std::string& m) {
    if (m == "echo:m1") return Effects{Send{call, "m2", false}};
    if (m == "echo:m2") return Effects{Send{call, "m3", true}};
    return Effects{};
  };
  p.start();
  p.world.run_until(TimePoint(1s));
  CHECK(p.b->log == Lines{"req echo/m1", "reqmsg m2 more", "reqmsg m3 last"});
  CHECK(p.a->log == Lines{"msg 1 echo:m1", "msg 1 echo:m2", "msg 1 echo:m3", "resp 1 "});
  // One link delay (2 ms) per hop: m1 lands at 2 ms, its echo at 4 ms, ..., echo:m3 at 12 ms.
  CHECK(p.a->at == std::vector<TimePoint>{TimePoint(4ms), TimePoint(8ms), TimePoint(12ms), TimePoint(12ms)});
  CHECK(p.world.anomalies().empty());
  CHECK(p.world.stats().late == 0);
  CHECK(p.world.stats().timeouts == 0);
}

TEST_CASE("a server stream keeps its order over a jittery link") {
  Pair p(11, {2ms, 5ms, 0.0});
  p.b->on_req = [](TimePoint, RequestId id, const std::string&) {
    Effects fx;
    for (int i = 0; i < 20; ++i) fx.push_back(Reply{id, "part" + std::to_string(i), i == 19});
    return fx;
  };
  p.a->start_effects = {stream_call(7, "download", "all", true)};
  p.start();
  p.world.run_until(TimePoint(1s));
  Lines expected;
  for (int i = 0; i < 20; ++i) expected.push_back("msg 7 part" + std::to_string(i));
  expected.push_back("resp 7 ");
  CHECK(p.a->log == expected);
  CHECK(std::is_sorted(p.a->at.begin(), p.a->at.end()));
  CHECK(p.b->log == Lines{"req download/all"});  // answered in full before the end was due
  CHECK(p.world.anomalies().empty());
}

TEST_CASE("a request whose first message is the caller's last hears its end next, and an empty last reply is only an end") {
  Pair p;
  p.b->on_req_msg = [](TimePoint, RequestId id, const Result<std::string>&, bool last) {
    // The answer, then an empty last reply: an end without a message.
    return last ? Effects{Reply{id, std::string("only"), false}, Reply{id, std::string(), true}} : Effects{};
  };
  p.a->start_effects = {stream_call(2, "svc", "one", true)};
  p.start();
  p.world.run_until(TimePoint(1s));
  CHECK(p.b->log == Lines{"req svc/one", "reqmsg  last"});
  CHECK(p.a->log == Lines{"msg 2 only", "resp 2 "});
}

TEST_CASE("a caller's cancel ends the callee's request and silences the call") {
  Pair p;
  serve_ticks(*p.b);
  p.a->start_effects = {stream_call(3, "ticks", "go", true)};
  p.a->on_msg = [](TimePoint, CallId call, const std::string&) {
    return Effects{Cancel{call, "enough"}};
  };
  p.start();
  p.world.run_until(TimePoint(1s));
  CHECK(p.a->log == Lines{"msg 3 tick0"});  // nothing more reaches the caller's core
  CHECK(p.b->log == Lines{"req ticks/go", "reqmsg  last", "reqmsg error:cancelled last"});
  CHECK(p.b->at.back() == TimePoint(7ms));  // tick0 sent at 3 ms, seen at 5 ms, cancel lands at 7 ms
  CHECK(p.world.anomalies().empty());    // the ticker's reply after the cancel is ignored
  CHECK(p.world.stats().cancels == 1);
  CHECK(p.world.stats().late >= 2);      // ticks that crossed the cancel
}

TEST_CASE("a callee's error mid-stream ends the call after the messages before it") {
  Pair p;
  p.b->on_req = [](TimePoint, RequestId id, const std::string&) {
    return Effects{Reply{id, std::string("part0"), false}, Reply{id, std::string("part1"), false},
                   Reply{id, make_error(errc::handler_error, "disk full")}};
  };
  p.a->start_effects = {stream_call(4, "download", "all", false)};
  p.start();
  p.world.run_until(TimePoint(1s));
  CHECK(p.a->log == Lines{"msg 4 part0", "msg 4 part1", "resp 4 error:handler_error"});
  CHECK(p.world.anomalies().empty());
}

TEST_CASE("a killed callee leaves its caller to the call's deadline") {
  Pair p;
  serve_ticks(*p.b);
  p.a->start_effects = {stream_call(5, "ticks", "go", true, 300ms)};
  p.start();
  REQUIRE(p.world.kill_node(addr_b, TimePoint(50ms)).ok());
  p.world.run_until(TimePoint(1s));
  REQUIRE(p.a->log.size() > 10);
  CHECK(p.a->log.back() == "resp 5 error:deadline_exceeded");
  CHECK(p.a->at.back() == TimePoint(300ms));
  CHECK(p.a->at[p.a->at.size() - 2] <= TimePoint(52ms));  // the last tick left b before it died
  CHECK(p.world.stats().to_dead >= 1);                     // the caller's cancel found b dead
}

TEST_CASE("a killed caller's request ends at the callee's deadline") {
  Pair p;
  p.a->start_effects = {stream_call(6, "upload", "chunk0", false, 300ms)};
  p.start();
  REQUIRE(p.world.kill_node(addr_a, TimePoint(50ms)).ok());
  p.world.run_until(TimePoint(1s));
  CHECK(p.b->log == Lines{"req upload/chunk0", "reqmsg error:deadline_exceeded last"});
  CHECK(p.b->at[1] == TimePoint(302ms));  // the open landed at 2 ms
}

TEST_CASE("the same seed replays a streaming run to the same trace hash") {
  auto run = [](std::uint64_t seed, const std::string& third) {
    Pair p(seed, {2ms, 3ms, 0.0});
    serve_echo(*p.b);
    p.a->start_effects = {stream_call(1, "echo", "m1", false), Send{1, "m2", false}, Send{1, third, true},
                          stream_call(2, "echo", "n1", true)};
    p.start();
    p.world.run_until(TimePoint(1s));
    CHECK(p.world.anomalies().empty());
    return std::make_pair(p.world.trace_hash(), p.a->log);
  };
  const auto first = run(21, "m3");
  const auto again = run(21, "m3");
  CHECK(first.first == again.first);
  CHECK(first.second == again.second);
  CHECK(run(21, "m3!").first != first.first);  // the hash covers stream messages
  CHECK(run(22, "m3").first != first.first);
}

TEST_CASE("streaming misuse is reported as anomalies") {
  Pair p;
  p.b->on_req = [](TimePoint, RequestId id, const std::string& m) {
    return Effects{Reply{id, "part of " + m, m == "s"}};  // last = false to the unary "x"
  };
  p.a->start_effects = {apiary::core::unary_call(1, addr_b, "svc", "x", 1s), Send{1, "to a unary call", false},
                        stream_call(2, "svc", "s", true), Send{2, "after last", false},
                        Send{3, "to no call", false}, Cancel{99, "not in flight: ignored"}};
  p.start();
  p.world.run_until(TimePoint(1s));
  REQUIRE(p.world.anomalies().size() == 4);
  for (const auto& e : p.world.anomalies()) CHECK(e.code == errc::invalid_argument);
  CHECK(p.a->log == Lines{"resp 1 error:internal", "msg 2 part of s", "resp 2 "});
}
