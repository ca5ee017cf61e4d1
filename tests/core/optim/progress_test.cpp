// The progress tracker's arithmetic (hivemind's ProgressTracker and PerformanceEMA,
// reference §7.2), each figure computed by hand from the reference's formulas, and the
// progress record's bytes as hivemind's msgpack writes them.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/optim/progress.hpp"

namespace {

namespace optim = apiary::core::optim;
using optim::LocalProgress;
using optim::ProgressConfig;
using optim::ProgressTracker;

std::string unhex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

ProgressConfig config_of(std::int64_t target) {
  ProgressConfig c;
  c.target_batch_size = target;
  return c;
}

}  // namespace

TEST_CASE("a progress record is hivemind's LocalTrainingProgress.dict() in msgpack, read back strictly", "[optim]") {
  const LocalProgress p{"id", 3, 10, 2.5, 1.5, false};
  // msgpack.packb({...}, use_bin_type=True) of the same dict, in the model's field order.
  const std::string golden = unhex(
      "86a7706565725f6964c4026964a565706f636803b373616d706c65735f616363756d756c617465640ab273616d706c65735f7065725f73"
      "65636f6e64cb4004000000000000a474696d65cb3ff8000000000000ab636c69656e745f6d6f6465c2");
  CHECK(optim::pack_progress(p) == golden);
  auto back = optim::unpack_progress(golden);
  REQUIRE(back.ok());
  CHECK(back->peer_id == "id");
  CHECK(back->epoch == 3);
  CHECK(back->samples_accumulated == 10);
  CHECK(back->samples_per_second == 2.5);
  CHECK(back->time == 1.5);
  CHECK_FALSE(back->client_mode);
  CHECK(optim::progress_key("albert") == "albert_progress");

  CHECK_FALSE(optim::unpack_progress("\xc0").ok());                          // None
  CHECK_FALSE(optim::unpack_progress(golden.substr(0, golden.size() - 1)).ok());  // cut
  std::string negative = golden;
  negative[negative.find("epoch") + 5] = '\xff';  // epoch -1
  CHECK_FALSE(optim::unpack_progress(negative).ok());
  std::string client = golden;
  client.back() = '\xc3';  // client_mode True
  REQUIRE(optim::unpack_progress(client).ok());
  CHECK(optim::unpack_progress(client)->client_mode);
}

TEST_CASE("the speed is a bias-corrected EMA of seconds per sample", "[optim]") {
  optim::PerformanceEma ema(0.1);
  CHECK(ema.samples_per_second() == 1e-20);
  // 10 samples in 2 s: ema = 0.1 * 0.2 = 0.02, corrected 0.02 / (1 - 0.9) = 0.2 s per sample.
  CHECK(ema.update(10, 2.0) == Approx(5.0));
  // 10 samples in 1 s: ema = 0.1 * 0.1 + 0.9 * 0.02 = 0.028, corrected 0.028 / 0.19.
  CHECK(ema.update(10, 1.0) == Approx(0.19 / 0.028));
}

TEST_CASE("the global progress of fetched peers, as the reference computes it", "[optim]") {
  ProgressTracker tracker(config_of(100), "me", 0.0, 1000.0);
  tracker.update_epoch(0.0, 1000.0, 2);
  const double now = 1010.0;
  // A and B train at epoch 2; C is a client at epoch 3 (clients do not move the epoch).
  const std::vector<std::optional<LocalProgress>> peers{
      LocalProgress{"A", 2, 30, 10.0, now - 1, false}, LocalProgress{"B", 2, 20, 5.0, now, false},
      LocalProgress{"C", 3, 7, 2.0, now, true}, std::nullopt};
  tracker.on_fetched(now, peers);
  const auto& g = tracker.global();
  CHECK(g.epoch == 2);
  CHECK(g.num_peers == 3);
  CHECK(g.num_clients == 1);
  CHECK(g.samples_accumulated == 50);  // C's 7 are of another epoch
  CHECK(g.target_batch_size == 100);
  // Estimated now: 30 + 1 s * 10 + 20 = 60; 40 to go at 17 samples/s (+ eps).
  CHECK(g.eta_next_epoch == Approx(now + 40.0 / 17.0));
  // Next fetch: clip(eta * n / max(n + 3, 1.2 n), 0.5, 10) = eta * 3 / 6.
  CHECK(g.next_fetch_time == Approx(now + (40.0 / 17.0) / 2));
  CHECK(tracker.fetched_this_epoch());
  CHECK_FALSE(tracker.ready_to_update_epoch(now));
  CHECK(tracker.estimated_next_update_time(now) == Approx(g.eta_next_epoch));
  CHECK(tracker.ready_to_update_epoch(g.eta_next_epoch));  // the ETA passed
  CHECK(tracker.estimated_next_update_time(g.eta_next_epoch + 1) == g.eta_next_epoch + 1);

  // A non-client peer ahead moves the global epoch: this peer is behind, ready at once.
  tracker.on_fetched(now, {LocalProgress{"D", 5, 1, 1.0, now, false}});
  CHECK(tracker.global().epoch == 5);
  CHECK(tracker.global().samples_accumulated == 1);
  CHECK(tracker.ready_to_update_epoch(now));

  // Enough samples reported: ready.
  tracker.on_fetched(now, {LocalProgress{"A", 2, 100, 1.0, now, false}});
  CHECK(tracker.global().samples_accumulated == 100);
  CHECK(tracker.ready_to_update_epoch(now));

  // The refresh period is clipped: a far ETA waits max_refresh_period, a near one the minimum.
  tracker.on_fetched(now, {LocalProgress{"A", 2, 0, 0.01, now, false}});
  CHECK(tracker.global().next_fetch_time == Approx(now + 10));
  tracker.on_fetched(now, {LocalProgress{"A", 2, 99, 100.0, now, false}});
  CHECK(tracker.global().next_fetch_time == Approx(now + 0.5));

  // Every peer left (None entries): nobody counts; look again after the minimum period.
  tracker.on_fetched(now, {std::nullopt, std::nullopt});
  CHECK(tracker.global().num_peers == 0);
  CHECK(tracker.global().epoch == 2);
  CHECK(tracker.global().next_fetch_time == Approx(now + 0.5));
}

TEST_CASE("with no record found the tracker goes by its own progress and speed", "[optim]") {
  ProgressTracker tracker(config_of(100), "me", 0.0, 1000.0);
  tracker.report(2.0, 1002.0, 0, 20);  // 20 samples in 2 s: 10 samples/s
  CHECK(tracker.samples_per_second() == Approx(10.0));
  tracker.on_fetched(1002.0, {});
  const auto& g = tracker.global();
  CHECK(g.epoch == 0);
  CHECK(g.samples_accumulated == 20);
  CHECK(g.num_peers == 0);
  CHECK(g.eta_next_epoch == Approx(1002.0 + 80.0 / 10.0));
  CHECK(g.next_fetch_time == Approx(1002.0 + 3.0));  // default_refresh_period
}

TEST_CASE("with no record found the next fetch still comes within max_refresh_period", "[optim]") {
  // The first peer up may fetch before its own report is in the DHT: with a default period
  // past the trainer's maximum it would not see the swarm fill up, and schedule its first
  // gradient round after the others' group formed.
  ProgressConfig c = config_of(100);
  c.max_refresh_period = 1.0;
  ProgressTracker tracker(c, "me", 0.0, 1000.0);
  tracker.on_fetched(1000.5, {});
  CHECK(tracker.global().next_fetch_time == Approx(1000.5 + 1.0));
  c.max_refresh_period = 10.0;
  c.min_refresh_period = 5.0;
  ProgressTracker slow(c, "me", 0.0, 1000.0);
  slow.on_fetched(1000.5, {});
  CHECK(slow.global().next_fetch_time == Approx(1000.5 + 5.0));
}

TEST_CASE("reports move the global samples while the epochs agree, and a new epoch starts from zero", "[optim]") {
  ProgressTracker tracker(config_of(50), "me", 0.0, 1000.0);
  const double now = 1001.0;
  tracker.on_fetched(now, {LocalProgress{"me", 0, 0, 1.0, now, false}, LocalProgress{"other", 0, 10, 1.0, now, false}});
  CHECK(tracker.global().samples_accumulated == 10);
  tracker.report(1.0, now, 0, 15);
  CHECK(tracker.global().samples_accumulated == 25);
  CHECK(tracker.local().samples_accumulated == 15);
  CHECK(tracker.local().time == now);
  tracker.report(2.0, now, 0, 15, false);  // not counted globally
  CHECK(tracker.global().samples_accumulated == 25);
  tracker.report(3.0, now, 0, 5);  // a reset: the count goes down, the speed keeps
  CHECK(tracker.global().samples_accumulated == 15);
  const double speed = tracker.samples_per_second();
  CHECK(speed == Approx(15.0));  // 15 samples in the first second

  CHECK(tracker.update_epoch(4.0, now) == 1);
  CHECK(tracker.local().epoch == 1);
  CHECK(tracker.local().samples_accumulated == 0);
  CHECK(tracker.global().epoch == 1);
  CHECK(tracker.global().samples_accumulated == 0);
  CHECK(std::isinf(tracker.global().eta_next_epoch));
  CHECK_FALSE(tracker.fetched_this_epoch());
  CHECK_FALSE(tracker.ready_to_update_epoch(now));
  // Another peer's report at the old epoch no longer counts.
  tracker.on_fetched(now, {LocalProgress{"other", 0, 40, 1.0, now, false}});
  CHECK(tracker.global().epoch == 1);
  CHECK(tracker.global().samples_accumulated == 0);
  // Jumping to an epoch below the global one leaves the global one as it is.
  tracker.on_fetched(now, {LocalProgress{"other", 4, 3, 1.0, now, false}});
  CHECK(tracker.update_epoch(5.0, now, 2) == 2);
  CHECK(tracker.global().epoch == 4);
}

TEST_CASE("bad tracker settings are refused by name", "[optim]") {
  auto code = [](const ProgressConfig& c) { return c.validate().ok(); };
  CHECK(code(config_of(1)));
  CHECK_FALSE(code(config_of(0)));
  ProgressConfig c = config_of(1);
  c.min_refresh_period = 5;
  c.max_refresh_period = 1;
  CHECK_FALSE(code(c));
  c = config_of(1);
  c.performance_ema_alpha = 0;
  CHECK_FALSE(code(c));
  c = config_of(1);
  c.metadata_expiration = -1;
  CHECK_FALSE(code(c));
}

TEST_CASE("integral floats stay float64 in a progress record, as Python writes them", "[optim]") {
  const LocalProgress p{"id", 0, 0, 6.0, 1.7e9, true};
  auto back = optim::unpack_progress(optim::pack_progress(p));
  REQUIRE(back.ok());  // the reader takes floats only where floats belong
  CHECK(back->samples_per_second == 6.0);
  CHECK(back->time == 1.7e9);
}
