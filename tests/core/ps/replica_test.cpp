// Replicas and shards wired by hand: every request is delivered in the test.
#include "core/ps/replica.hpp"

#include <catch2/catch.hpp>

using namespace apiary::core::ps;

namespace {
struct Cluster {
  std::vector<Shard> shards;
  std::vector<Replica> replicas;

  /// Hands a shard's answers to the replicas they belong to.
  void route(std::size_t shard, const Released& out) {
    for (const auto& ack : out.acks) {
      REQUIRE(replicas[static_cast<std::size_t>(ack.replica)].on_push_ack(shard, ack).ok());
    }
    for (const auto& reply : out.pulls) {
      REQUIRE(replicas[static_cast<std::size_t>(reply.replica)].on_pull_reply(shard, reply).ok());
    }
  }
  void pull(std::size_t r) {
    auto requests = replicas[r].start_pull();
    REQUIRE(requests.ok());
    for (const auto& q : *requests) {
      auto out = shards[q.shard].pull(static_cast<std::int32_t>(r), q.step);
      REQUIRE(out.ok());
      route(q.shard, *out);
    }
  }
  void push(std::size_t r, const std::map<std::string, Gradient>& grads) {
    auto requests = replicas[r].push(grads);
    REQUIRE(requests.ok());
    for (auto& q : *requests) {
      auto out = shards[q.shard].push(std::move(q.push));
      REQUIRE(out.ok());
      route(q.shard, *out);
    }
  }
};

std::vector<VariablePlan> plans() {
  return {VariablePlan{"w", {6, 2}, "3,1", false, {0, 1, 2}},
          VariablePlan{"emb", {7, 2}, "2,1", true, {3, 4}},
          VariablePlan{"b", {}, "", false, {5}}};
}

Cluster make_cluster() {
  Cluster c;
  for (const auto& v : plans()) {
    auto layouts = shard_layouts(v.shape, v.partitioner);
    REQUIRE(layouts.ok());
    for (std::size_t i = 0; i < layouts->size(); ++i) {
      ShardConfig sc;
      sc.variable = v.name + "/part_" + std::to_string(i);
      sc.layout = (*layouts)[i];
      sc.sparse = v.sparse;
      sc.optimizer.learning_rate = 0.1F;
      sc.replica_hosts = {0, 1};
      auto shard = Shard::create(sc, std::vector<float>(sc.layout.size(), 1.0F));
      REQUIRE(shard.ok());
      c.shards.push_back(std::move(*shard));
    }
  }
  for (std::int32_t r = 0; r < 2; ++r) {
    auto replica = Replica::create(r, plans());
    REQUIRE(replica.ok());
    c.replicas.push_back(std::move(*replica));
  }
  return c;
}

std::map<std::string, Gradient> gradients(std::size_t r) {
  const auto g = static_cast<float>(r + 1);
  return {{"w", std::vector<float>(12, g)},
          {"b", std::vector<float>{g}},
          {"emb", SparseGradient{{static_cast<std::int64_t>(3 * r + 1)}, {1.0F, 1.0F}}}};
}
}  // namespace

TEST_CASE("replicas step BSP over partitioned, sparse and whole variables", "[ps][replica]") {
  Cluster c = make_cluster();
  for (std::int64_t step = 0; step < 3; ++step) {
    if (step == 0) {
      c.pull(0);
      c.pull(1);
    }
    for (auto& replica : c.replicas) {
      REQUIRE(replica.phase() == ReplicaPhase::computing);
      CHECK(replica.min_version() == step);
    }
    // The reassembled w is whole and equal on both replicas.
    auto p0 = c.replicas[0].parameters();
    auto p1 = c.replicas[1].parameters();
    REQUIRE(p0.ok());
    REQUIRE(p1.ok());
    CHECK(*p0 == *p1);
    CHECK(p0->at("w").size() == 12);
    CHECK(p0->at("emb").size() == 14);
    // Replica 0 finishes first and asks for the next step: held until replica 1 pushes.
    c.push(0, gradients(0));
    CHECK(c.replicas[0].phase() == ReplicaPhase::idle);
    c.pull(0);
    CHECK(c.replicas[0].phase() == ReplicaPhase::pulling);
    c.push(1, gradients(1));
    CHECK(c.replicas[0].phase() == ReplicaPhase::computing);
    c.pull(1);
  }
  auto p = c.replicas[0].parameters();
  REQUIRE(p.ok());
  // Three steps of SGD (lr 0.1) on the mean gradient 1.5 from 1.0.
  for (float x : p->at("w")) CHECK(x == Approx(1.0 - 3 * 0.1 * 1.5));
  CHECK(p->at("b")[0] == Approx(1.0 - 3 * 0.1 * 1.5));
  // emb: rows 1 and 4 got 0.5 (one replica of two) per step; the rest never moved.
  const auto& emb = p->at("emb");
  for (std::size_t row = 0; row < 7; ++row) {
    const double expected = (row == 1 || row == 4) ? 1.0 - 3 * 0.1 * 0.5 : 1.0;
    CHECK(emb[2 * row] == Approx(expected));
    CHECK(emb[2 * row + 1] == Approx(expected));
  }
  CHECK(c.replicas[0].step() == 3);
}

TEST_CASE("replica refuses out-of-phase calls and bad plans", "[ps][replica][errors]") {
  auto replica = Replica::create(0, plans());
  REQUIRE(replica.ok());
  auto early = replica->push(gradients(0));
  REQUIRE_FALSE(early.ok());
  CHECK(early.error().code == apiary::errc::protocol);
  CHECK(early.error().message.find("expects phase computing") != std::string::npos);
  CHECK_FALSE(replica->parameters().ok());
  REQUIRE(replica->start_pull().ok());
  CHECK_FALSE(replica->start_pull().ok());
  CHECK_FALSE(replica->on_pull_reply(9, PullReply{0, 0, 0, {}}).ok());
  CHECK_FALSE(replica->on_pull_reply(5, PullReply{0, 1, 0, {1.0F}}).ok());
  CHECK_FALSE(replica->on_pull_reply(5, PullReply{0, 0, 0, {1.0F, 2.0F}}).ok());
  REQUIRE(replica->on_pull_reply(5, PullReply{0, 0, 0, {1.0F}}).ok());
  CHECK_FALSE(replica->on_pull_reply(5, PullReply{0, 0, 0, {1.0F}}).ok());

  auto twice = plans();
  twice[2].shards = {0};
  CHECK_FALSE(Replica::create(0, twice).ok());
  auto count = plans();
  count[0].shards = {0, 1};
  CHECK_FALSE(Replica::create(0, count).ok());
  auto off_axis = plans();
  off_axis[1].partitioner = "1,2";
  CHECK_FALSE(Replica::create(0, off_axis).ok());
}
