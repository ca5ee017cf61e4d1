// The exchange core (core/collective/exchange.hpp) driven by hand: members' calls and
// replies travel through an in-test bus in a shuffled order. A mean with FLOAT16 on the
// wire leaves every member with the same bits, decode(encode(weighted average)); a
// gather hands every member every payload in rank order; early parts are held; a silent
// member, a broken call and a mismatched layout end the op with an error, never a hang.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <deque>
#include <random>
#include <variant>

#include "core/collective/exchange.hpp"
#include "messages/tensor/float16.hpp"
#include "tests/support/peer_addr.hpp"

using apiary::test::operator""_addr;
using namespace apiary;
using namespace apiary::core;
using namespace apiary::core::collective;
using namespace std::chrono_literals;

namespace {

/// n members and the messages between them; delivery order is shuffled by a seeded RNG.
struct Bus {
  struct Request {
    std::size_t to = 0;
    RequestId id = 0;
    std::string body;
  };
  struct Response {
    std::size_t to = 0;
    CallId call = 0;
    Result<std::string> result{std::string{}};
  };
  std::vector<Exchange> members;
  std::vector<PeerAddr> addrs;
  std::deque<std::variant<Request, Response>> queue;
  std::map<std::pair<std::size_t, RequestId>, std::pair<std::size_t, CallId>> open;  ///< (callee, id) -> caller
  std::vector<bool> dead;
  std::mt19937 rng;
  RequestId next_request = 1;
  TimePoint now{};

  Bus(std::size_t n, std::uint32_t seed) : dead(n, false), rng(seed) {
    for (std::size_t i = 0; i < n; ++i) addrs.push_back(apiary::test::addr_of("/ip4/127.0.0.1/tcp/" + std::to_string(7000 + i)));
    for (std::size_t i = 0; i < n; ++i) {
      auto e = Exchange::create({addrs, i, "job::Collective.rpc_exchange", 100, 5s});
      REQUIRE(e.ok());
      members.push_back(std::move(*e));
    }
  }

  void submit(std::size_t from, Effects fx) {
    for (auto& e : fx) {
      if (auto* c = std::get_if<Call>(&e)) {
        const auto to = static_cast<std::size_t>(std::find(addrs.begin(), addrs.end(), c->peer) - addrs.begin());
        REQUIRE(to < addrs.size());
        if (dead[to]) {
          queue.push_back(Response{from, c->id, make_error(errc::unavailable, "connection refused")});
          continue;
        }
        const RequestId id = next_request++;
        open[{to, id}] = {from, c->id};
        queue.push_back(Request{to, id, c->request});
      } else if (auto* r = std::get_if<Reply>(&e)) {
        auto it = open.find({from, r->request});
        REQUIRE(it != open.end());
        queue.push_back(Response{it->second.first, it->second.second, r->response});
        open.erase(it);
      }
    }
  }

  /// Delivers everything queued, in a shuffled order.
  void run() {
    while (!queue.empty()) {
      std::uniform_int_distribution<std::size_t> pick(0, queue.size() - 1);
      const auto at = pick(rng);
      auto item = std::move(queue[at]);
      queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(at));
      if (auto* q = std::get_if<Request>(&item)) {
        if (!dead[q->to]) submit(q->to, members[q->to].on_request(now, q->id, q->body));
      } else {
        auto& p = std::get<Response>(item);
        if (!dead[p.to]) submit(p.to, members[p.to].on_response(now, p.call, p.result));
      }
    }
  }
};

/// Member r's tensors for a mean: values that do not average to an fp16 number.
std::vector<std::vector<float>> tensors_of(std::size_t r) {
  std::vector<float> a(37);
  std::vector<float> b(5);
  for (std::size_t j = 0; j < a.size(); ++j) a[j] = 0.1F * static_cast<float>(j) + 0.37F * static_cast<float>(r);
  for (std::size_t j = 0; j < b.size(); ++j) b[j] = -1.3F * static_cast<float>(r * j) + 0.011F;
  return {a, b};
}

float fp16(float v) { return messages::half_to_float(messages::float_to_half(v)); }

std::uint32_t bits(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

}  // namespace

TEST_CASE("a FLOAT16 mean leaves every member with the same bits: the encoded weighted average", "[collective][unit]") {
  const std::size_t n = GENERATE(1, 2, 3, 4);
  const std::uint32_t seed = GENERATE(1u, 2u, 3u);
  Bus bus(n, seed);
  for (int op = 0; op < 3; ++op) {
    for (std::size_t r = 0; r < n; ++r) {
      bus.submit(r, bus.members[r].start_mean(bus.now, tensors_of(r + op), 1.0 + r, {pb::FLOAT16, pb::NONE}));
    }
    bus.run();
    std::vector<std::vector<std::vector<float>>> got;
    for (std::size_t r = 0; r < n; ++r) {
      INFO("member " << r << " op " << op);
      REQUIRE(bus.members[r].has_result());
      auto res = bus.members[r].take_result();
      REQUIRE(res.ok());
      got.push_back(std::move(res->tensors));
    }
    // What every member must hold: the weighted mean of what went on the wire, encoded.
    double total = 0;
    for (std::size_t r = 0; r < n; ++r) total += 1.0 + r;
    for (std::size_t t = 0; t < 2; ++t) {
      for (std::size_t j = 0; j < got[0][t].size(); ++j) {
        double acc = 0;
        for (std::size_t r = 0; r < n; ++r) {
          const float x = tensors_of(r + op)[t][j];
          acc += (1.0 + r) * (t == 0 ? fp16(x) : x);
        }
        const float avg = static_cast<float>(acc / total);
        const float expected = t == 0 ? fp16(avg) : avg;
        for (std::size_t r = 0; r < n; ++r) {
          INFO("tensor " << t << " element " << j << " member " << r);
          CHECK(bits(got[r][t][j]) == bits(expected));
        }
      }
    }
  }
}

TEST_CASE("a gather hands every member every payload in rank order, early parts are held", "[collective][unit]") {
  Bus bus(3, 7);
  // Member 0 runs op 0 and op 1 before the others start either: its parts wait for them.
  bus.submit(0, bus.members[0].start_gather(bus.now, "zero-0"));
  bus.run();
  CHECK_FALSE(bus.members[0].has_result());
  for (std::size_t r = 1; r < 3; ++r) bus.submit(r, bus.members[r].start_gather(bus.now, "p" + std::to_string(r)));
  bus.run();
  for (std::size_t r = 0; r < 3; ++r) {
    auto res = bus.members[r].take_result();
    REQUIRE(res.ok());
    CHECK(res->gathered == std::vector<std::string>{"zero-0", "p1", "p2"});
  }
  bus.submit(0, bus.members[0].start_gather(bus.now, ""));
  bus.run();
  for (std::size_t r = 1; r < 3; ++r) bus.submit(r, bus.members[r].start_gather(bus.now, std::string(1000, 'x')));
  bus.run();
  for (std::size_t r = 0; r < 3; ++r) {
    auto res = bus.members[r].take_result();
    REQUIRE(res.ok());
    CHECK(res->gathered == std::vector<std::string>{"", std::string(1000, 'x'), std::string(1000, 'x')});
    CHECK(bus.members[r].ops() == 2);
  }
}

TEST_CASE("a silent member fails the op at the deadline, naming it, the others fail fast", "[collective][unit]") {
  Bus bus(3, 3);
  for (std::size_t r = 0; r < 2; ++r) bus.submit(r, bus.members[r].start_mean(bus.now, tensors_of(r), 1.0, {}));
  bus.run();
  CHECK_FALSE(bus.members[0].has_result());
  bus.now += 6s;
  bus.submit(0, bus.members[0].on_timer(bus.now, 100));
  bus.run();
  auto r0 = bus.members[0].take_result();
  REQUIRE_FALSE(r0.ok());
  CHECK(r0.error().code == errc::peer_down);
  CHECK(r0.error().message.find("rank 2 (/ip4/127.0.0.1/tcp/7002)") != std::string::npos);
  // Member 1 learns it from member 0's refusal, before its own deadline.
  auto r1 = bus.members[1].take_result();
  REQUIRE_FALSE(r1.ok());
  CHECK(r1.error().code == errc::peer_down);
}

TEST_CASE("a dead member's refused call fails the op naming it", "[collective][unit]") {
  Bus bus(3, 4);
  bus.dead[1] = true;
  bus.submit(0, bus.members[0].start_gather(bus.now, "a"));
  bus.submit(2, bus.members[2].start_gather(bus.now, "c"));
  bus.run();
  for (std::size_t r : {0, 2}) {
    auto res = bus.members[r].take_result();
    REQUIRE_FALSE(res.ok());
    CHECK(res.error().code == errc::peer_down);
    CHECK(res.error().message.find("rank 1") != std::string::npos);
  }
  // on_peer_down ends an op that still needs the member.
  Bus other(2, 5);
  other.submit(0, other.members[0].start_gather(other.now, "a"));
  other.queue.clear();
  other.submit(0, other.members[0].on_peer_down(other.now, other.addrs[1]));
  auto res = other.members[0].take_result();
  REQUIRE_FALSE(res.ok());
  CHECK(res.error().message.find("went down") != std::string::npos);
}

TEST_CASE("members that disagree on the layout, and bad arguments, are errors", "[collective][unit]") {
  Bus bus(2, 6);
  bus.submit(0, bus.members[0].start_mean(bus.now, {std::vector<float>(8, 1.0F)}, 1.0, {pb::FLOAT16}));
  bus.submit(1, bus.members[1].start_mean(bus.now, {std::vector<float>(8, 1.0F)}, 1.0, {pb::NONE}));
  bus.run();
  for (std::size_t r = 0; r < 2; ++r) {
    auto res = bus.members[r].take_result();
    REQUIRE_FALSE(res.ok());
    CHECK(res.error().message.find("layout") != std::string::npos);
  }
  (void)bus.members[0].start_mean(bus.now, {std::vector<float>(4)}, 1.0, {pb::UNIFORM_8BIT});
  auto codec = bus.members[0].take_result();
  REQUIRE_FALSE(codec.ok());
  CHECK(codec.error().code == errc::unsupported);
  (void)bus.members[0].start_mean(bus.now, {std::vector<float>(4)}, -1.0, {});
  auto weight = bus.members[0].take_result();
  REQUIRE_FALSE(weight.ok());
  CHECK(weight.error().code == errc::invalid_argument);
  CHECK_FALSE(Exchange::create({{"/ip4/10.0.0.1/tcp/1"_addr}, 1, "h", 0, 1s}).ok());
}
