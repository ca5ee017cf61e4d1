// core::Mux: several roles in one host, each in its own id space, requests routed by
// handle, local operations by role name, Asks answered inside the Mux.
#include <catch2/catch.hpp>

#include <memory>

#include "core/mux.hpp"
#include "core/ping/pinger.hpp"
#include "tests/core/effects_of.hpp"
#include "tests/support/peer_addr.hpp"

using namespace apiary;
using namespace apiary::core;
using apiary::test::operator""_addr;

namespace {

using apiary::testing::all_of;

/// A role that records its inputs and, on cue, makes calls, arms timers, asks, completes.
class Probe final : public Role {
 public:
  explicit Probe(std::vector<std::string> served) : served_(std::move(served)) {}
  std::vector<std::string> handles() const override { return served_; }
  Effects on(TimePoint, Input input) override {
    inputs.push_back(input);
    if (auto* c = std::get_if<LocalCall>(&input)) {
      if (c->method == "call") return {unary_call(7, "/ip4/127.0.0.1/tcp/1"_addr, "x.rpc", "hi", std::chrono::seconds(1)),
                                       SetTimer{7, TimePoint{}}};
      if (c->method == "ask") return {Ask{3, *c->args.as<std::string>(), "double", Value::of(21)}};
      if (c->method == "double") return {Complete{c->op, Value::of(*c->args.as<int>() * 2)}};
      if (c->method == "huge") return {unary_call(CallId{1} << 60, "/ip4/127.0.0.1/tcp/1"_addr, "x.rpc", "", {})};
      return {unknown_method(*c, "the probe")};
    }
    if (auto* r = std::get_if<Request>(&input)) {
      if (std::string(r->body.view()) == "stream") return {};
      return {Reply{r->id, std::string("ok:") + served_.front()}};
    }
    if (auto* reply = std::get_if<LocalReply>(&input)) {
      if (reply->result.ok()) doubled = *reply->result->as<int>();
      else ask_error = reply->result.error().message;
    }
    return {};
  }
  std::vector<Input> inputs;
  int doubled = 0;
  std::string ask_error;

 private:
  std::vector<std::string> served_;
};

struct TwoProbes {
  Mux mux;
  Probe* a = nullptr;
  Probe* b = nullptr;
  TwoProbes() {
    auto pa = std::make_unique<Probe>(std::vector<std::string>{"a.rpc"});
    auto pb = std::make_unique<Probe>(std::vector<std::string>{"b.rpc", "b.stream"});
    a = pa.get();
    b = pb.get();
    REQUIRE(mux.add("a", std::move(pa)).ok());
    REQUIRE(mux.add("b", std::move(pb)).ok());
  }
};

}  // namespace

TEST_CASE("a Mux gives each role its own id space and routes answers and timers back", "[mux]") {
  TwoProbes t;
  const auto fa = t.mux.on({}, LocalCall{1, "a", "call", {}});
  const auto fb = t.mux.on({}, LocalCall{2, "b", "call", {}});
  const auto ca = all_of<Call>(fa), cb = all_of<Call>(fb);
  REQUIRE(ca.size() == 1);
  REQUIRE(cb.size() == 1);
  CHECK(ca[0].id != cb[0].id);  // both roles chose id 7
  const auto ta = all_of<SetTimer>(fa), tb = all_of<SetTimer>(fb);
  REQUIRE(ta.size() == 1);
  REQUIRE(tb.size() == 1);
  CHECK(ta[0].id != tb[0].id);

  (void)t.mux.on({}, Response{cb[0].id, std::string("pong")});
  (void)t.mux.on({}, TimerFired{ta[0].id});
  REQUIRE(std::holds_alternative<Response>(t.b->inputs.back()));
  CHECK(std::get<Response>(t.b->inputs.back()).call == 7);
  REQUIRE(std::holds_alternative<TimerFired>(t.a->inputs.back()));
  CHECK(std::get<TimerFired>(t.a->inputs.back()).id == 7);

  // An id no role owns is dropped and counted.
  const auto before_a = t.a->inputs.size(), before_b = t.b->inputs.size();
  CHECK(t.mux.on({}, Response{12345, std::string()}).empty());
  CHECK(t.mux.stray() == 1);
  CHECK(t.a->inputs.size() == before_a);
  CHECK(t.b->inputs.size() == before_b);
}

TEST_CASE("a Mux routes requests by handle and answers an unknown handle with not_found", "[mux]") {
  TwoProbes t;
  CHECK(t.mux.handles() == std::vector<std::string>{"a.rpc", "b.rpc", "b.stream"});
  auto fx = t.mux.on({}, Request{40, "b.rpc", "/ip4/127.0.0.1/tcp/9"_addr, Buffer::copy_of("x")});
  REQUIRE(all_of<Reply>(fx).size() == 1);
  CHECK(all_of<Reply>(fx)[0].request == 40);
  CHECK(*all_of<Reply>(fx)[0].response == "ok:b.rpc");
  CHECK(std::get<Request>(t.b->inputs.back()).from == "/ip4/127.0.0.1/tcp/9"_addr);

  fx = t.mux.on({}, Request{41, "c.rpc", PeerAddr{}, Buffer::copy_of("x")});
  REQUIRE(all_of<Reply>(fx).size() == 1);
  CHECK(all_of<Reply>(fx)[0].response.error().code == errc::not_found);
  CHECK(all_of<Reply>(fx)[0].response.error().message.find("c.rpc") != std::string::npos);

  // A streaming request's later messages reach the role that took it.
  (void)t.mux.on({}, Request{42, "b.stream", PeerAddr{}, Buffer::copy_of("stream")});
  (void)t.mux.on({}, RequestMessage{42, Buffer::copy_of("more"), false});
  REQUIRE(std::holds_alternative<RequestMessage>(t.b->inputs.back()));
  CHECK(std::get<RequestMessage>(t.b->inputs.back()).message->view() == "more");
  (void)t.mux.on({}, RequestMessage{42, make_error(errc::cancelled, "gone"), true});
  CHECK(!std::get<RequestMessage>(t.b->inputs.back()).message.ok());
  CHECK(t.mux.on({}, RequestMessage{42, Buffer::copy_of("late"), false}).empty());  // the request is over
  CHECK(t.mux.stray() == 1);
}

TEST_CASE("a Mux refuses a taken name, a taken handle and a null role", "[mux]") {
  TwoProbes t;
  auto again = t.mux.add("a", std::make_unique<Probe>(std::vector<std::string>{"z.rpc"}));
  REQUIRE(!again.ok());
  CHECK(again.error().message.find("'a'") != std::string::npos);
  auto clash = t.mux.add("c", std::make_unique<Probe>(std::vector<std::string>{"b.rpc"}));
  REQUIRE(!clash.ok());
  CHECK(clash.error().message.find("b.rpc") != std::string::npos);
  CHECK(clash.error().message.find("'b'") != std::string::npos);
  CHECK(!t.mux.add("d", nullptr).ok());
  CHECK(t.mux.size() == 2);
  CHECK(t.mux.find("b") == t.b);
  CHECK(t.mux.find("c") == nullptr);
}

TEST_CASE("a role's Ask to another role of the Mux comes back as its LocalReply", "[mux]") {
  TwoProbes t;
  auto fx = t.mux.on({}, LocalCall{9, "a", "ask", Value::of(std::string("b"))});
  CHECK(fx.empty());  // answered inside the Mux
  CHECK(t.a->doubled == 42);
  REQUIRE(std::holds_alternative<LocalCall>(t.b->inputs.back()));
  CHECK(std::get<LocalCall>(t.b->inputs.back()).method == "double");

  fx = t.mux.on({}, LocalCall{10, "a", "ask", Value::of(std::string("nobody"))});
  CHECK(fx.empty());
  CHECK(t.a->ask_error.find("nobody") != std::string::npos);
}

TEST_CASE("an Ask for a role of another host leaves the Mux, and its answer comes back to the asker", "[mux]") {
  TwoProbes t;
  t.mux.reach("dht");
  auto fx = t.mux.on({}, LocalCall{9, "a", "ask", Value::of(std::string("dht"))});
  REQUIRE(all_of<Ask>(fx).size() == 1);
  const Ask out = all_of<Ask>(fx)[0];
  CHECK(out.role == "dht");
  CHECK(out.method == "double");
  CHECK(t.a->doubled == 0);

  // The host answers with the op the Ask carried; the asker hears it under its own op.
  CHECK(t.mux.on({}, LocalReply{out.op, Value::of(42)}).empty());
  CHECK(t.a->doubled == 42);
  REQUIRE(std::holds_alternative<LocalReply>(t.a->inputs.back()));
  CHECK(std::get<LocalReply>(t.a->inputs.back()).op == 3);

  // A second answer to the same Ask, or one to an Ask never made, is dropped and counted.
  const auto before = t.a->inputs.size();
  CHECK(t.mux.on({}, LocalReply{out.op, Value::of(1)}).empty());
  CHECK(t.mux.on({}, LocalReply{424242, Value::of(1)}).empty());
  CHECK(t.a->inputs.size() == before);
  CHECK(t.mux.stray() == 2);
}

TEST_CASE("a host's local call reaches the named role and its Complete keeps the host's op id", "[mux]") {
  TwoProbes t;
  auto fx = t.mux.on({}, LocalCall{77, "b", "double", Value::of(5)});
  REQUIRE(all_of<Complete>(fx).size() == 1);
  CHECK(all_of<Complete>(fx)[0].op == 77);
  CHECK(*all_of<Complete>(fx)[0].result->as<int>() == 10);

  fx = t.mux.on({}, LocalCall{78, "b", "nonsense", {}});
  REQUIRE(all_of<Complete>(fx).size() == 1);
  CHECK(all_of<Complete>(fx)[0].op == 78);
  CHECK(all_of<Complete>(fx)[0].result.error().code == errc::not_found);

  fx = t.mux.on({}, LocalCall{79, "zz", "double", Value::of(5)});
  REQUIRE(all_of<Complete>(fx).size() == 1);
  CHECK(all_of<Complete>(fx)[0].result.error().message.find("zz") != std::string::npos);
}

TEST_CASE("Start and PeerDown reach every role, an id beyond a role's space fails its call", "[mux]") {
  TwoProbes t;
  (void)t.mux.on({}, Start{});
  (void)t.mux.on({}, PeerDown{"/ip4/127.0.0.1/tcp/5"_addr});
  for (Probe* p : {t.a, t.b}) {
    REQUIRE(p->inputs.size() == 2);
    CHECK(std::holds_alternative<Start>(p->inputs[0]));
    CHECK(std::get<PeerDown>(p->inputs[1]).peer == "/ip4/127.0.0.1/tcp/5"_addr);
  }
  auto fx = t.mux.on({}, LocalCall{1, "a", "huge", {}});
  CHECK(all_of<Call>(fx).empty());
  CHECK(t.mux.refused() == 1);
  REQUIRE(std::holds_alternative<Response>(t.a->inputs.back()));
  CHECK(std::get<Response>(t.a->inputs.back()).result.error().code == errc::internal);
}

TEST_CASE("a Pinger in a Mux beside another role probes, answers and reports as alone", "[mux]") {
  Mux mux;
  REQUIRE(mux.add("ping", std::make_unique<ping::Pinger>("/ip4/127.0.0.1/tcp/1"_addr, ping::Config{},
                                                         std::vector<PeerAddr>{"/ip4/127.0.0.1/tcp/2"_addr}))
              .ok());
  REQUIRE(mux.add("probe", std::make_unique<Probe>(std::vector<std::string>{"a.rpc"})).ok());
  auto fx = mux.on({}, Start{});
  const auto timers = all_of<SetTimer>(fx);
  REQUIRE(timers.size() == 1);
  fx = mux.on({}, TimerFired{timers[0].id});
  const auto probes = all_of<Call>(fx);
  REQUIRE(probes.size() == 1);
  CHECK(probes[0].handle == ping::k_handle);
  CHECK(probes[0].peer == "/ip4/127.0.0.1/tcp/2"_addr);
  (void)mux.on({}, Response{probes[0].id, make_error(errc::unavailable, "refused")});
  fx = mux.on({}, LocalCall{5, "ping", ping::k_snapshot_method, {}});
  REQUIRE(all_of<Complete>(fx).size() == 1);
  const auto* snap = all_of<Complete>(fx)[0].result->as<ping::Snapshot>();
  REQUIRE(snap != nullptr);
  CHECK(snap->rounds == 1);
  CHECK(snap->peers.at("/ip4/127.0.0.1/tcp/2"_addr).failed == 1);
}

TEST_CASE("take_local moves Completes and Asks out, keeping every other effect in order", "[mux]") {
  Effects fx{SetTimer{1, {}}, Complete{5, Value::of(1)}, Cancel{2, "x"}, Ask{6, "dht", "run", {}}, CancelTimer{3}};
  auto local = take_local(fx);
  REQUIRE(fx.size() == 3);
  CHECK(std::get<SetTimer>(fx[0]).id == 1);
  CHECK(std::get<Cancel>(fx[1]).call == 2);
  CHECK(std::get<CancelTimer>(fx[2]).id == 3);
  REQUIRE(local.completed.size() == 1);
  CHECK(local.completed[0].op == 5);
  REQUIRE(local.asks.size() == 1);
  CHECK(local.asks[0].role == "dht");
  CHECK(no_such_role(local.asks[0]).result.error().message.find("'dht'") != std::string::npos);

  Effects plain{SetTimer{1, {}}};
  auto none = take_local(plain);
  CHECK(plain.size() == 1);
  CHECK(none.completed.empty());
  CHECK(none.asks.empty());
}
