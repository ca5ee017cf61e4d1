// local_replication: one proxy per node in front of a BSP shard (reference §3.3, §8 item 10).
#include "core/ps/proxy.hpp"

#include <catch2/catch.hpp>

#include "core/ps/proxy_server.hpp"
#include "core/ps/shard.hpp"
#include "core/ps/wire.hpp"
#include "ps.pb.h"
#include "tests/support/peer_addr.hpp"

using namespace apiary::core::ps;

TEST_CASE("proxies pull once per node per step and equal the PS at every step start", "[ps][proxy]") {
  // Replicas 0, 1 on node 0 and 2, 3 on node 1; one dense variable "v" of 3 values.
  ShardConfig sc;
  sc.variable = "v";
  sc.layout.shape = {3};
  sc.optimizer.learning_rate = 0.1F;
  sc.replica_hosts = {0, 0, 1, 1};
  auto shard = Shard::create(sc, {1.0F, 2.0F, 3.0F});
  REQUIRE(shard.ok());
  std::vector<ProxyCache> proxies(2);
  const auto node = [](std::int32_t r) { return static_cast<std::size_t>(r / 2); };
  std::vector<std::vector<float>> seen(4);
  std::vector<std::int64_t> version(4, -1);

  auto serve = [&](std::int32_t r, std::int64_t step, const std::vector<float>& values, std::int64_t v) {
    // The copy a replica reads equals the PS variable of this step's version.
    CHECK(values == shard->values());
    CHECK(v == step);
    seen[static_cast<std::size_t>(r)] = values;
    version[static_cast<std::size_t>(r)] = v;
  };
  auto refresh = [&](std::size_t n, const PullReply& reply) {
    auto out = proxies[n].on_refresh("v", reply.step, reply.version, reply.values);
    REQUIRE(out.ok());
    CHECK(out->pull_step == -1);
    for (const auto& rel : out->released) serve(rel.replica, rel.step, *rel.values, rel.version);
  };

  for (std::int64_t step = 0; step < 4; ++step) {
    const std::int64_t pulls_before = proxies[0].pulls() + proxies[1].pulls();
    for (std::int32_t r = 0; r < 4; ++r) {
      auto got = proxies[node(r)].read(r, "v", step);
      if (got.outcome == ProxyOutcome::hit) serve(r, step, *got.values, got.version);
      if (got.outcome != ProxyOutcome::pull) continue;
      auto out = shard->pull(r, step);
      REQUIRE(out.ok());
      REQUIRE(out->pulls.size() == 1);
      refresh(node(r), out->pulls[0]);
    }
    CHECK(proxies[0].pulls() + proxies[1].pulls() == pulls_before + 2);  // one per node
    for (std::int32_t r = 0; r < 4; ++r) {
      CHECK(version[static_cast<std::size_t>(r)] == step);
      auto out = shard->push(Push{r, step, std::vector<float>{0.5F * static_cast<float>(r), 1.0F, -1.0F}});
      REQUIRE(out.ok());
    }
    CHECK(shard->version() == step + 1);
  }
  CHECK(shard->values()[0] == Approx(1.0 - 4 * 0.1 * 0.75));
}

TEST_CASE("a reader of a later step waits and triggers the next pull", "[ps][proxy]") {
  ProxyCache proxy;
  CHECK(proxy.read(0, "v", 0).outcome == ProxyOutcome::pull);
  CHECK(proxy.read(1, "v", 0).outcome == ProxyOutcome::wait);
  CHECK(proxy.read(0, "v", 1).outcome == ProxyOutcome::wait);
  auto first = proxy.on_refresh("v", 0, 0, {1.0F});
  REQUIRE(first.ok());
  CHECK(first->released.size() == 2);
  CHECK(first->pull_step == 1);
  CHECK(proxy.read(1, "v", 0).outcome == ProxyOutcome::hit);
  auto second = proxy.on_refresh("v", 1, 1, {2.0F});
  REQUIRE(second.ok());
  REQUIRE(second->released.size() == 1);
  CHECK(*second->released[0].values == std::vector<float>{2.0F});
  // Every reader of a refresh shares one copy.
  CHECK(first->released[0].values == first->released[1].values);
  CHECK(proxy.pulls() == 2);
  auto stray = proxy.on_refresh("v", 5, 5, {3.0F});
  REQUIRE_FALSE(stray.ok());
  CHECK(stray.error().code == apiary::errc::protocol);
  CHECK_FALSE(proxy.on_refresh("w", 0, 0, {}).ok());
}

namespace {

namespace core = apiary::core;

std::string pull_of(std::int32_t replica, std::int64_t step) {
  apiary::pb::PsPullRequest m;
  m.set_shard("w");
  m.set_replica(replica);
  m.set_step(step);
  return m.SerializeAsString();
}

/// The one Call among `fx` (the proxy's refresh), or 0.
core::CallId refresh_in(const core::Effects& fx) {
  core::CallId id = 0;
  for (const auto& e : fx) {
    if (const auto* c = std::get_if<core::Call>(&e)) id = c->id;
  }
  return id;
}

/// The Replies among `fx`, by request.
std::map<core::RequestId, apiary::Result<std::string>> replies_in(const core::Effects& fx) {
  std::map<core::RequestId, apiary::Result<std::string>> out;
  for (const auto& e : fx) {
    if (const auto* r = std::get_if<core::Reply>(&e)) out.emplace(r->request, r->response);
  }
  return out;
}

}  // namespace

TEST_CASE("a proxy whose PS went away fails its waiting readers and refreshes afresh at the next read",
          "[ps][proxy]") {
  using apiary::errc;
  ProxyServer proxy("node", {{"w", apiary::test::test_addr(1)}}, 0, std::chrono::seconds(5));
  const core::TimePoint t{};
  const std::string handle = k_ps_pull_handle;
  // Two readers of step 3: one refresh; the PS goes away under it.
  const core::CallId first = refresh_in(proxy.on_request(t, 1, handle, pull_of(0, 3)));
  REQUIRE(first != 0);
  CHECK(refresh_in(proxy.on_request(t, 2, handle, pull_of(1, 3))) == 0);
  auto failed = replies_in(proxy.on_response(t, first, apiary::make_error(errc::peer_down, "the connection broke")));
  REQUIRE(failed.size() == 2);
  for (const auto& [id, reply] : failed) {
    REQUIRE_FALSE(reply.ok());
    CHECK(reply.error().code == errc::peer_down);  // the readers' own PS-loss handling applies
    CHECK_THAT(reply.error().message, Catch::Contains("proxy of node: refresh of shard 'w' (step 3) failed"));
  }
  // The PS is back: the readers ask again, and the proxy pulls afresh.
  const core::CallId again = refresh_in(proxy.on_request(t, 3, handle, pull_of(0, 3)));
  REQUIRE(again != 0);
  PullReply pulled{0, 3, 3, {1.0F, 2.0F}};
  auto served = replies_in(proxy.on_response(t, again, to_pb("w", pulled).SerializeAsString()));
  REQUIRE(served.count(3) == 1);
  REQUIRE(served.at(3).ok());
  CHECK(replies_in(proxy.on_request(t, 4, handle, pull_of(1, 3))).at(4).ok());  // a hit now
  // A refresh the PS refused stays failed for every later read of the shard.
  const core::CallId refused = refresh_in(proxy.on_request(t, 5, handle, pull_of(0, 4)));
  REQUIRE(refused != 0);
  auto no = replies_in(proxy.on_response(t, refused, apiary::make_error(errc::protocol, "not a replica of this job")));
  REQUIRE(no.count(5) == 1);
  CHECK(no.at(5).error().code == errc::protocol);
  auto later = replies_in(proxy.on_request(t, 6, handle, pull_of(1, 4)));
  REQUIRE(later.count(6) == 1);
  CHECK(later.at(6).error().code == errc::protocol);
}

TEST_CASE("a reader saying it is done is answered at once and counted once per replica", "[ps][proxy]") {
  using apiary::errc;
  ProxyServer proxy("node", {{"w", apiary::test::test_addr(1)}}, 0, std::chrono::seconds(5));
  const core::TimePoint t{};
  CHECK(proxy.handles() == std::vector<std::string>{k_ps_pull_handle, k_ps_proxy_done_handle});
  const std::string done = k_ps_proxy_done_handle;
  auto first = replies_in(proxy.on_request(t, 1, done, pull_of(1, 0)));
  REQUIRE(first.count(1) == 1);
  CHECK(first.at(1).ok());
  CHECK(proxy.done() == 1);
  CHECK(replies_in(proxy.on_request(t, 2, done, pull_of(1, 0))).at(2).ok());  // said twice: one reader
  CHECK(replies_in(proxy.on_request(t, 3, done, pull_of(2, 0))).at(3).ok());
  CHECK(proxy.done() == 2);
  auto bad = replies_in(proxy.on_request(t, 4, done, std::string("\x0a\xff\xff\xff\xff\x0f", 6)));
  REQUIRE(bad.count(4) == 1);
  REQUIRE_FALSE(bad.at(4).ok());
  CHECK(bad.at(4).error().code == errc::malformed);
  CHECK(proxy.done() == 2);
  CHECK(proxy.reads() == 0);  // saying done reads nothing
}

TEST_CASE("a splicing proxy answers every reader with a view of its one cached copy", "[ps][proxy]") {
  const core::TimePoint t{};
  const std::string handle = k_ps_pull_handle;
  for (const bool splice : {false, true}) {
    INFO("splice " << splice);
    ProxyServer proxy("node", {{"w", apiary::test::test_addr(1)}}, 0, std::chrono::seconds(5));
    proxy.set_splice_reads(splice);
    const core::CallId refresh = refresh_in(proxy.on_request(t, 1, handle, pull_of(0, 2)));
    REQUIRE(refresh != 0);
    CHECK(refresh_in(proxy.on_request(t, 2, handle, pull_of(1, 2))) == 0);
    const std::vector<float> values{1.0F, -2.5F, 3.25F};
    auto released = proxy.on_response(t, refresh, to_pb("w", PullReply{0, 2, 7, values}).SerializeAsString());
    auto hit = proxy.on_request(t, 3, handle, pull_of(2, 2));
    released.insert(released.end(), hit.begin(), hit.end());
    std::vector<const std::byte*> bodies;
    for (const auto& e : released) {
      const auto* r = std::get_if<core::Reply>(&e);
      if (r == nullptr) continue;
      REQUIRE(r->response.ok());
      // Head + body + tail are the bytes of the whole answer.
      const std::string bytes = *r->response + std::string(r->body.view()) + r->tail;
      apiary::pb::PsPullResponse m;
      REQUIRE(m.ParseFromString(bytes));
      CHECK(from_pb(m).values == values);
      CHECK(m.version() == 7);
      CHECK(r->body.empty() != splice);
      if (splice) bodies.push_back(r->body.data());
    }
    CHECK(proxy.reads() == 3);
    if (splice) {
      REQUIRE(bodies.size() == 3);
      CHECK(bodies[0] == bodies[1]);  // one copy for every reader
      CHECK(bodies[1] == bodies[2]);
    }
  }
}
