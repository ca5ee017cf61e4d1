// A synchronous shard that goes on without a replica that died (Shard::drop_replica):
// steps complete with the others' pushes and the mean over them, held requests are
// released, and the dropped replica is refused from then on.
#include "core/ps/shard.hpp"

#include <catch2/catch.hpp>

using namespace apiary::core::ps;
using apiary::errc;

namespace {

/// A dense shard of `n` values at 1.0, SGD with learning rate 1, one replica per entry
/// of `hosts`.
Shard shard_of(std::vector<std::int32_t> hosts, std::size_t n = 2, std::int64_t staleness = 0,
               Aggregation rule = Aggregation::sample_weighted, std::size_t max_unsummed = 64u << 20) {
  ShardConfig c;
  c.variable = "w";
  c.layout.shape = {static_cast<std::int64_t>(n)};
  c.optimizer.kind = OptimizerKind::sgd;
  c.optimizer.learning_rate = 1.0F;
  c.sync = true;
  c.staleness = staleness;
  c.aggregation = rule;
  c.replica_hosts = std::move(hosts);
  c.max_unsummed_bytes = max_unsummed;
  auto s = Shard::create(c, std::vector<float>(n, 1.0F));
  REQUIRE(s.ok());
  return std::move(*s);
}

Push push(std::int32_t replica, std::int64_t step, float g, double samples = 1.0) {
  return Push{replica, step, std::vector<float>{g, g}, samples};
}

}  // namespace

TEST_CASE("BSP goes on without a dropped replica: the step's mean over those that pushed", "[ps][shard][drop]") {
  auto s = shard_of({0, 0, 0});
  REQUIRE(s.push(push(0, 0, 0.25F)).ok());
  REQUIRE(s.push(push(2, 0, 0.75F)).ok());
  auto waiting = s.pull(0, 1);  // step 1's parameters wait for step 0
  REQUIRE(waiting.ok());
  CHECK(waiting->pulls.empty());
  CHECK(s.version() == 0);

  auto released = s.drop_replica(1);
  REQUIRE(released.ok());
  CHECK(s.version() == 1);
  CHECK(s.values() == std::vector<float>{0.5F, 0.5F});  // 1 - (0.25 + 0.75) / 2
  REQUIRE(released->pulls.size() == 1);
  CHECK(released->pulls[0].replica == 0);
  CHECK(released->pulls[0].step == 1);
  CHECK(s.dropped(1));

  // The next steps need only replicas 0 and 2; replica 1 is refused, saying why.
  REQUIRE(s.push(push(0, 1, 0.5F)).ok());
  REQUIRE(s.push(push(2, 1, 0.5F)).ok());
  CHECK(s.version() == 2);
  CHECK(s.values() == std::vector<float>{0.0F, 0.0F});
  auto late = s.push(push(1, 0, 1.0F));
  REQUIRE_FALSE(late.ok());
  CHECK(late.error().code == errc::protocol);
  CHECK_THAT(late.error().message, Catch::Contains("replica 1 was dropped"));
  CHECK(s.pull(1, 2).error().code == errc::protocol);
  CHECK(s.drop_replica(1).ok());   // dropping twice changes nothing
  CHECK(s.drop_replica(3).error().code == errc::invalid_argument);
}

TEST_CASE("a gradient pushed before its replica was dropped still counts", "[ps][shard][drop]") {
  auto s = shard_of({0, 0, 0});
  REQUIRE(s.push(push(1, 0, 0.3F)).ok());  // replica 1 pushed step 0, then died
  REQUIRE(s.push(push(0, 0, 0.6F)).ok());
  REQUIRE(s.drop_replica(1).ok());
  CHECK(s.version() == 0);  // step 0 still waits for replica 2
  REQUIRE(s.push(push(2, 0, 0.9F)).ok());
  CHECK(s.version() == 1);
  CHECK(s.values()[0] == Approx(1.0 - (0.3 + 0.6 + 0.9) / 3));
}

TEST_CASE("summing in replica order skips a dropped replica, folded early or not", "[ps][shard][drop]") {
  // max_unsummed of one gradient: each push beyond the first is folded as it comes.
  for (std::size_t max_unsummed : {std::size_t{0}, std::size_t{8}, std::size_t{64} << 20}) {
    INFO("max_unsummed " << max_unsummed);
    auto s = shard_of({0, 0, 0, 0}, 2, 0, Aggregation::sample_weighted, max_unsummed);
    REQUIRE(s.drop_replica(0).ok());
    REQUIRE(s.push(push(3, 0, 0.4F)).ok());
    REQUIRE(s.push(push(1, 0, 0.1F)).ok());
    REQUIRE(s.drop_replica(2).ok());
    CHECK(s.version() == 1);
    CHECK(s.values()[0] == Approx(1.0 - (0.1 + 0.4) / 2));
    REQUIRE(s.push(push(1, 1, 0.5F)).ok());
    REQUIRE(s.push(push(3, 1, 0.5F)).ok());
    CHECK(s.version() == 2);
    CHECK(s.values()[0] == Approx(1.0 - 0.25 - 0.5));
  }
}

TEST_CASE("host_mean after a drop weighs each host over the replicas it has left", "[ps][shard][drop]") {
  // Hosts 0, 0, 1: replica 1 (on host 0) dies; AutoDist with replicas 0 and 2 would give
  // each host 1/2.
  auto s = shard_of({0, 0, 1}, 2, 0, Aggregation::host_mean);
  REQUIRE(s.drop_replica(1).ok());
  REQUIRE(s.push(push(0, 0, 0.2F)).ok());
  REQUIRE(s.push(push(2, 0, 0.6F)).ok());
  CHECK(s.version() == 1);
  CHECK(s.values()[0] == Approx(1.0 - (0.2 + 0.6) / 2));
}

TEST_CASE("SSP: dropping the slowest replica releases the pushes and pulls it held back", "[ps][shard][drop]") {
  auto s = shard_of({0, 0}, 2, 1);  // staleness 1
  REQUIRE(s.push(push(0, 0, 0.1F)).ok());
  REQUIRE(s.push(push(0, 1, 0.1F)).ok());
  auto held = s.push(push(0, 2, 0.1F));  // step 2 > slowest (0) + 1: held
  REQUIRE(held.ok());
  CHECK(held->acks.empty());
  auto pull = s.pull(0, 2);  // step 2's parameters: 2 > 0 + 1, held too
  REQUIRE(pull.ok());
  CHECK(pull->pulls.empty());
  CHECK(s.held() == 2);
  auto released = s.drop_replica(1);
  REQUIRE(released.ok());
  REQUIRE(released->acks.size() == 1);
  CHECK(released->acks[0].step == 2);
  REQUIRE(released->pulls.size() == 1);
  CHECK(released->pulls[0].step == 2);
  CHECK(s.held() == 0);
  CHECK(s.version() == 3);  // steps 0, 1 and 2, each with replica 0's gradient alone
  CHECK(s.values()[0] == Approx(1.0 - 0.3));
}

TEST_CASE("an asynchronous shard needs nothing of a dropped replica", "[ps][shard][drop]") {
  ShardConfig c;
  c.variable = "w";
  c.layout.shape = {2};
  c.optimizer.kind = OptimizerKind::sgd;
  c.optimizer.learning_rate = 1.0F;
  c.sync = false;
  c.replica_hosts = {0, 0};
  auto s = Shard::create(c, {1.0F, 1.0F});
  REQUIRE(s.ok());
  auto dropped = s->drop_replica(1);
  REQUIRE(dropped.ok());
  CHECK(dropped->acks.empty());
  CHECK_FALSE(s->dropped(1));
  CHECK(s->push(push(1, 0, 0.5F)).ok());
  CHECK(s->push(push(1, 1, 0.5F)).ok());
  // A replica started again counts its steps from 0 once it rejoined, and reads the
  // current parameters.
  CHECK(s->push(push(1, 0, 0.5F)).error().code == errc::protocol);
  REQUIRE(s->rejoin(1).ok());
  CHECK(s->push(push(1, 0, 0.5F)).ok());
  auto current = s->pull(1, 0);
  REQUIRE(current.ok());
  REQUIRE(current->pulls.size() == 1);
  CHECK(current->pulls[0].values == std::vector<float>{-0.5F, -0.5F});
  CHECK(s->rejoin(2).error().code == errc::invalid_argument);
}

TEST_CASE("a dropped replica rejoins a BSP shard from the first step no replica pushed", "[ps][shard][rejoin]") {
  auto s = shard_of({0, 0, 0});
  // Step 0 by all three; replica 1 dies after it, and is dropped.
  for (std::int32_t r = 0; r < 3; ++r) REQUIRE(s.push(push(r, 0, 0.5F)).ok());
  REQUIRE(s.drop_replica(1).ok());
  CHECK(s.rejoining(1));
  CHECK_FALSE(s.rejoining(0));
  // Steps 1 and 2 go on with replicas 0 and 2; replica 0 has pushed step 3 already.
  for (std::int64_t step = 1; step <= 2; ++step) {
    REQUIRE(s.push(push(0, step, 0.5F)).ok());
    REQUIRE(s.push(push(2, step, 0.5F)).ok());
  }
  REQUIRE(s.push(push(0, 3, 0.5F)).ok());
  CHECK(s.version() == 3);
  CHECK(s.rejoin_floor(1) == 4);  // step 3 has a push: the first free one is 4
  // Too early: refused, saying from where it can rejoin; nothing changes.
  auto early = s.rejoin_from(1, 3);
  REQUIRE_FALSE(early.ok());
  CHECK(early.error().code == errc::protocol);
  CHECK_THAT(early.error().message, Catch::Contains("replica 1 can rejoin from step 4 on, got step 3"));
  CHECK(s.dropped(1));
  // From step 5 (the replica asked one further): steps 3 and 4 complete without it.
  REQUIRE(s.rejoin_from(1, 5).ok());
  CHECK_FALSE(s.dropped(1));
  CHECK(s.rejoining(1));
  // It may move further while it has not pushed (another PS refused the step asked).
  CHECK(s.can_rejoin_from(1, 6).ok());
  CHECK_FALSE(s.can_rejoin_from(1, 3).ok());  // replica 0 pushed step 3
  REQUIRE(s.push(push(2, 3, 0.5F)).ok());
  CHECK(s.version() == 4);
  // Its pull of step 5 waits for step 4, which needs only replicas 0 and 2.
  auto pull = s.pull(1, 5);
  REQUIRE(pull.ok());
  CHECK(pull->pulls.empty());
  REQUIRE(s.push(push(0, 4, 0.5F)).ok());
  auto released = s.push(push(2, 4, 0.5F));
  REQUIRE(released.ok());
  CHECK(s.version() == 5);
  REQUIRE(released->pulls.size() == 1);
  CHECK(released->pulls[0].replica == 1);
  CHECK(released->pulls[0].step == 5);
  // Step 5 needs all three again: the mean over three pushes.
  REQUIRE(s.push(push(0, 5, 0.0F)).ok());
  REQUIRE(s.push(push(2, 5, 0.0F)).ok());
  CHECK(s.version() == 5);
  REQUIRE(s.push(push(1, 5, 0.3F)).ok());
  CHECK(s.version() == 6);
  CHECK_FALSE(s.rejoining(1));
  // A replica taking part is not rejoined again.
  auto again = s.rejoin_from(1, 7);
  REQUIRE_FALSE(again.ok());
  CHECK_THAT(again.error().message, Catch::Contains("takes part in the job"));
}

TEST_CASE("a rejoin leaves the bits of the steps before it as without it", "[ps][shard][rejoin]") {
  // Replica 1 dropped at once; two shards see the same pushes, one with a rejoin of
  // replica 1 from step 2 between them: steps 0 and 1 are the same bits in both.
  auto with = shard_of({0, 0, 0}, 2, 0, Aggregation::sample_weighted, 1);  // folds early: replica order matters
  auto without = shard_of({0, 0, 0}, 2, 0, Aggregation::sample_weighted, 1);
  REQUIRE(with.drop_replica(1).ok());
  REQUIRE(without.drop_replica(1).ok());
  REQUIRE(with.push(push(0, 0, 0.125F)).ok());
  REQUIRE(without.push(push(0, 0, 0.125F)).ok());
  REQUIRE(with.push(push(0, 1, 0.25F)).ok());
  REQUIRE(without.push(push(0, 1, 0.25F)).ok());
  REQUIRE(with.rejoin_from(1, 2).ok());
  for (std::int64_t step = 0; step < 2; ++step) {
    REQUIRE(with.push(push(2, step, 0.375F)).ok());
    REQUIRE(without.push(push(2, step, 0.375F)).ok());
  }
  CHECK(with.version() == 2);
  CHECK(with.values() == without.values());
}

TEST_CASE("with no other replica left, a rejoin starts at the shard's next step", "[ps][shard][rejoin]") {
  auto s = shard_of({0, 0});
  REQUIRE(s.push(push(0, 0, 0.5F)).ok());
  REQUIRE(s.push(push(1, 0, 0.5F)).ok());
  REQUIRE(s.drop_replica(0).ok());
  REQUIRE(s.drop_replica(1).ok());
  CHECK(s.rejoin_floor(0) == 1);
  auto later = s.rejoin_from(0, 3);
  REQUIRE_FALSE(later.ok());
  CHECK_THAT(later.error().message, Catch::Contains("no other replica takes part"));
  REQUIRE(s.rejoin_from(0, 1).ok());
  REQUIRE(s.push(push(0, 1, 0.5F)).ok());
  CHECK(s.version() == 2);
}
