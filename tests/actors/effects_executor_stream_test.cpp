// Streaming calls through the shared effect executor, between two real gateways over the
// in-process transport: the same effects and inputs the simulator runs
// (tests/sim/world_stream_test.cpp), here on real actors.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "actors/effects_executor.hpp"
#include "actors/type_ids.hpp"
#include "tests/support/peer_addr.hpp"

using apiary::test::operator""_addr;
using namespace apiary;
using namespace std::chrono_literals;
using core::Effects;

namespace {

std::string text(const Result<std::string>& r) {
  return r.ok() ? r.value() : std::string("error:") + to_string(r.error().code);
}

/// A tiny core playing both roles. As a callee, by handle: "echo" echoes every message
/// (ending with the caller's last), "parts" streams part0..part4 then an empty last
/// reply (an end without a message), "fail" streams part0
/// then fails, "ticks" streams tick<k> every 5 ms until cancelled. As a caller, it
/// answers echo:m1 with m2 and echo:m2 with m3 (last), and cancels at tick0. It logs
/// every input as a line.
class StreamCore {
 public:
  std::vector<std::string> log;

  Effects on_request(core::TimePoint now, core::RequestId id, const std::string& handle, const std::string& body) {
    log.push_back("req " + handle + "/" + body);
    if (handle == "echo") return {core::Reply{id, "echo:" + body, false}};
    if (handle == "parts") {
      Effects fx;
      for (int i = 0; i < 5; ++i) fx.push_back(core::Reply{id, "part" + std::to_string(i), false});
      fx.push_back(core::Reply{id, std::string(), true});  // an end without a message
      return fx;
    }
    if (handle == "splice") {  // answers with its request between < and >, in three pieces
      return {core::Reply{id, std::string("<"), false, Buffer::copy_of(body), ">"}, core::Reply{id, std::string(), true}};
    }
    if (handle == "fail") {
      return {core::Reply{id, std::string("part0"), false}, core::Reply{id, make_error(errc::handler_error, "disk full")}};
    }
    ticking_ = id;
    return {core::SetTimer{1, now + 5ms}};
  }
  Effects on_request_message(core::RequestId id, const Result<std::string>& m, bool last) {
    log.push_back("reqmsg " + text(m) + (last ? " last" : " more"));
    if (!m.ok()) cancelled_ = true;
    if (m.ok() && id != ticking_) return {core::Reply{id, "echo:" + m.value(), last}};
    return {};
  }
  Effects on_message(core::CallId call, const std::string& m) {
    log.push_back("msg " + std::to_string(call) + " " + m);
    if (m == "echo:m1") return {core::Send{call, "m2", false}};
    if (m == "echo:m2") return {core::Send{call, "m3", true}};
    if (m == "tick0") return {core::Cancel{call, "enough"}};
    return {};
  }
  Effects on_response(core::CallId call, const Result<std::string>& r) {
    log.push_back("resp " + std::to_string(call) + " " + text(r));
    return {};
  }
  Effects on_timer(core::TimePoint now, core::TimerId) {
    if (cancelled_) return {};
    return {core::Reply{ticking_, "tick" + std::to_string(ticks_++), false}, core::SetTimer{1, now + 5ms}};
  }

 private:
  core::RequestId ticking_ = 0;
  bool cancelled_ = false;
  int ticks_ = 0;
};

struct stream_state {
  StreamCore core;
  std::unique_ptr<actors::EffectExecutor> fx;
};
using self_t = caf::stateful_actor<stream_state>;

void run(self_t* self, Effects effects) {
  for (auto& r : self->state.fx->execute(std::move(effects))) run(self, self->state.core.on_response(r.call, r.result));
}

/// The shape of an actor over a streaming core: every delivery through the four
/// translators, in order.
caf::behavior stream_actor(self_t* self, std::shared_ptr<actors::Gateway> gw, Effects start) {
  self->state.fx = std::make_unique<actors::EffectExecutor>(self, std::move(gw));
  run(self, std::move(start));
  return {
      [self](actors::Delivery& d) {
        auto& st = self->state;
        const auto now = actors::core_now();
        if (auto r = st.fx->request_of(d)) run(self, st.core.on_request(now, r->id, r->handle, r->body));
        if (auto m = st.fx->request_message_of(d)) run(self, st.core.on_request_message(m->request, m->message, m->last));
        if (auto m = st.fx->message_of(d)) run(self, st.core.on_message(m->call, m->message));
        if (auto r = st.fx->response_of(d)) run(self, st.core.on_response(r->call, r->result));
      },
      [self](actors::timer_atom, core::TimerId id, std::uint64_t generation) {
        if (self->state.fx->timer_is_current(id, generation)) run(self, self->state.core.on_timer(actors::core_now(), id));
      },
      [self](actors::report_atom) {
        std::string out = "anomalies=" + std::to_string(self->state.fx->anomalies());
        for (const auto& line : self->state.core.log) out += "\n" + line;
        return out;
      },
  };
}

/// Two gateways on the in-process transport: `callee` serves every test handle.
struct Fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<actors::Gateway> gw_a, gw_b;
  caf::actor callee;
  std::vector<caf::actor> callers;

  Fixture() {
    cfg.set("work-stealing.moderate-poll-attempts", 0);
    sys = std::make_unique<caf::actor_system>(cfg);
    actors::GatewayConfig gc;
    gc.backend = actors::Backend::local;
    auto a = actors::Gateway::start(*sys, gc);
    auto b = actors::Gateway::start(*sys, gc);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    gw_a = *a;
    gw_b = *b;
    callee = sys->spawn(stream_actor, gw_b, Effects{});
    for (const char* h : {"echo", "parts", "fail", "ticks", "splice"}) gw_b->serve(h, callee);
    (void)gw_b->describe("nobody:1").get();  // the registrations above are done once this returns
  }
  ~Fixture() {
    for (auto& c : callers) caf::anon_send_exit(c, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(callee, caf::exit_reason::user_shutdown);
    gw_a->stop();
    gw_b->stop();
  }

  /// Starts a caller on gateway a issuing one streaming call to b; a first message with
  /// a `body` goes in pieces (first + body + tail).
  caf::actor call(std::string handle, std::string first, bool last, Buffer body = {}, std::string tail = {}) {
    const auto& addr = gw_b->address();
    core::Call c;
    c.id = 1;
    c.peer = core::PeerAddr::from_host_port(addr).value();
    c.handle = std::move(handle);
    c.request = std::move(first);
    c.timeout = 10s;
    c.stream = true;
    c.last = last;
    c.body = std::move(body);
    c.tail = std::move(tail);
    callers.push_back(sys->spawn(stream_actor, gw_a, Effects{c}));
    return callers.back();
  }

  /// The actor's report, once it contains `line` (or after 10 s).
  std::string report_when(const caf::actor& who, const std::string& line) {
    caf::scoped_actor self{*sys};
    std::string report;
    for (int i = 0; i < 500; ++i) {
      self->request(who, 5s, actors::report_atom::value).receive([&](std::string& r) { report = r; }, [](caf::error&) {});
      if (report.find(line) != std::string::npos) break;
      std::this_thread::sleep_for(20ms);
    }
    return report;
  }
};

}  // namespace

TEST_CASE("a bidi echo through the executor: three messages each way, then both end", "[actor]") {
  Fixture f;
  auto caller = f.call("echo", "m1", false);
  CHECK(f.report_when(caller, "resp 1") == "anomalies=0\nmsg 1 echo:m1\nmsg 1 echo:m2\nmsg 1 echo:m3\nresp 1 ");
  CHECK(f.report_when(f.callee, "reqmsg m3") == "anomalies=0\nreq echo/m1\nreqmsg m2 more\nreqmsg m3 last");
}

TEST_CASE("a server stream through the executor: one request, five parts, then the end", "[actor]") {
  Fixture f;
  auto caller = f.call("parts", "all", true);
  CHECK(f.report_when(caller, "resp 1") ==
        "anomalies=0\nmsg 1 part0\nmsg 1 part1\nmsg 1 part2\nmsg 1 part3\nmsg 1 part4\nresp 1 ");
  // The request was answered in full inside on_request: the end of the caller's direction,
  // which came with the request, is not the core's business any more.
  CHECK(f.report_when(f.callee, "req parts") == "anomalies=0\nreq parts/all");
}

TEST_CASE("a callee's error mid-stream reaches the caller after the messages before it", "[actor]") {
  Fixture f;
  auto caller = f.call("fail", "all", true);
  CHECK(f.report_when(caller, "resp 1") == "anomalies=0\nmsg 1 part0\nresp 1 error:handler_error");
}

TEST_CASE("a caller's cancel reaches the callee and silences the call", "[actor]") {
  Fixture f;
  auto caller = f.call("ticks", "go", true);
  const auto callee = f.report_when(f.callee, "error:cancelled");
  CHECK(callee == "anomalies=0\nreq ticks/go\nreqmsg  last\nreqmsg error:cancelled last");
  CHECK(f.report_when(caller, "msg 1 tick0") == "anomalies=0\nmsg 1 tick0");  // nothing after the cancel
}

TEST_CASE("spliced messages through the executor arrive whole, both ways", "[actor]") {
  Fixture f;
  auto caller = f.call("splice", "head|", true, Buffer::copy_of(std::string_view("BODY")), "|tail");
  CHECK(f.report_when(f.callee, "req splice") == "anomalies=0\nreq splice/head|BODY|tail");
  CHECK(f.report_when(caller, "resp 1") == "anomalies=0\nmsg 1 <head|BODY|tail>\nresp 1 ");
}
