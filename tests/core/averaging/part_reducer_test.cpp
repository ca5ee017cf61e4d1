// core::averaging PartReducer: weighted means, deltas, in-order completion, failed
// senders, protocol errors, zero weights, and random interleavings of many senders.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/averaging/part_reducer.hpp"

namespace {

using apiary::Buffer;
using apiary::errc;
using namespace apiary::core::averaging;
using Parts = std::vector<std::size_t>;

/// Submits `values` and requires success; returns the parts completed.
Parts submit(PartReducer& r, std::size_t sender, std::size_t part,
             const std::vector<float>& values, double weight = 1.0) {
  auto done = r.accumulate(sender, part, values.data(), values.size(), weight);
  INFO((done.ok() ? std::string() : done.error().what()));
  REQUIRE(done.ok());
  return *done;
}

std::vector<float> average(const PartReducer& r, std::size_t part) {
  auto avg = r.average(part);
  INFO((avg.ok() ? std::string() : avg.error().what()));
  REQUIRE(avg.ok());
  return *avg;
}

}  // namespace

TEST_CASE("a part's average is the weighted mean, deltas are average minus own copy",
          "[averaging][part_reducer]") {
  PartReducer r({4, 2}, 3);
  CHECK(submit(r, 0, 0, {1, 2, 3, 4}, 1.0).empty());
  CHECK(submit(r, 1, 0, {5, 6, 7, 8}, 2.0).empty());
  CHECK(r.state(0) == PartState::pending);
  CHECK(submit(r, 2, 0, {-8, 0, 8, 16}, 5.0) == Parts{0});
  // (1*1 + 2*5 + 5*-8) / 8 = -29/8, (2 + 12 + 0) / 8, (3 + 14 + 40) / 8, (4 + 16 + 80) / 8.
  CHECK(average(r, 0) == std::vector<float>{-3.625f, 1.75f, 7.125f, 12.5f});
  CHECK(*r.delta(0, 0) == std::vector<float>{-4.625f, -0.25f, 4.125f, 8.5f});
  CHECK(*r.delta(2, 0) == std::vector<float>{4.375f, 1.75f, -0.875f, -3.5f});
  CHECK_FALSE(r.finished());

  CHECK(submit(r, 0, 1, {1, 1}).empty());
  CHECK(submit(r, 1, 1, {2, 2}).empty());
  CHECK(submit(r, 2, 1, {6, 0}) == Parts{1});
  CHECK(average(r, 1) == std::vector<float>{3.0f, 1.0f});
  CHECK(r.finished());
}

TEST_CASE("a fast sender may run ahead, parts complete in order", "[averaging][part_reducer]") {
  PartReducer r({1, 1, 1}, 2);
  CHECK(submit(r, 0, 0, {1}).empty());
  CHECK(submit(r, 0, 1, {1}).empty());
  CHECK(submit(r, 0, 2, {1}).empty());
  CHECK(r.num_complete() == 0);
  CHECK(submit(r, 1, 0, {3}) == Parts{0});
  CHECK(submit(r, 1, 1, {5}) == Parts{1});
  CHECK(submit(r, 1, 2, {7}) == Parts{2});
  CHECK(average(r, 2) == std::vector<float>{4.0f});
}

TEST_CASE("a failed sender is excluded from the parts it had not sent",
          "[averaging][part_reducer]") {
  PartReducer r({2, 2, 2}, 3);
  CHECK(submit(r, 0, 0, {0, 0}).empty());
  CHECK(submit(r, 1, 0, {3, 3}).empty());
  CHECK(submit(r, 2, 0, {6, 6}) == Parts{0});
  CHECK(submit(r, 0, 1, {0, 0}).empty());
  CHECK(submit(r, 2, 1, {9, 9}).empty());

  // Sender 1 fails after part 0: part 1 no longer waits for it.
  auto done = r.on_sender_failed(1);
  REQUIRE(done.ok());
  CHECK(*done == Parts{1});
  CHECK(average(r, 0) == std::vector<float>{3.0f, 3.0f});  // its part 0 still counts
  CHECK(average(r, 1) == std::vector<float>{4.5f, 4.5f});
  CHECK(r.sender_failed(1));

  // Later submissions from it are refused; the others finish without it.
  std::vector<float> late = {100, 100};
  auto refused = r.accumulate(1, 1, late.data(), late.size(), 1.0);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().code == errc::cancelled);
  CHECK(submit(r, 0, 2, {1, 1}).empty());
  CHECK(submit(r, 2, 2, {3, 3}) == Parts{2});
  CHECK(average(r, 2) == std::vector<float>{2.0f, 2.0f});
  CHECK_FALSE(r.delta(1, 2).ok());
  // Marking it again changes nothing.
  CHECK(r.on_sender_failed(1)->empty());
}

TEST_CASE("parts must arrive in order, once each", "[averaging][part_reducer]") {
  PartReducer r({1, 1}, 2);
  std::vector<float> x = {1};
  auto skipped = r.accumulate(0, 1, x.data(), 1, 1.0);
  REQUIRE_FALSE(skipped.ok());
  CHECK(skipped.error().code == errc::protocol);
  CHECK_THAT(skipped.error().message, Catch::Contains("expected part 0"));
  CHECK(submit(r, 0, 0, {1}).empty());
  auto repeated = r.accumulate(0, 0, x.data(), 1, 1.0);
  REQUIRE_FALSE(repeated.ok());
  CHECK(repeated.error().code == errc::protocol);
  auto beyond = r.accumulate(1, 2, x.data(), 1, 1.0);
  REQUIRE_FALSE(beyond.ok());
  CHECK(beyond.error().code == errc::protocol);
  // The refused submissions changed nothing.
  CHECK(r.parts_received(0) == 1);
  CHECK(r.parts_received(1) == 0);
  CHECK(submit(r, 1, 0, {3}) == Parts{0});
  CHECK(average(r, 0) == std::vector<float>{2.0f});
}

TEST_CASE("zero total weight is an error, not NaN", "[averaging][part_reducer]") {
  PartReducer r({2, 2}, 2);
  CHECK(submit(r, 0, 0, {1, 2}, 0.0).empty());
  CHECK(submit(r, 1, 0, {3, 4}, 0.0) == Parts{0});
  CHECK(r.state(0) == PartState::failed);
  auto avg = r.average(0);
  REQUIRE_FALSE(avg.ok());
  CHECK(avg.error().code == errc::invalid_argument);
  CHECK_THAT(avg.error().message, Catch::Contains("weight"));
  CHECK_FALSE(r.delta(0, 0).ok());
  // A zero weight beside a positive one is fine.
  CHECK(submit(r, 0, 1, {1, 2}, 0.0).empty());
  CHECK(submit(r, 1, 1, {3, 4}, 2.0) == Parts{1});
  CHECK(average(r, 1) == std::vector<float>{3.0f, 4.0f});
}

TEST_CASE("parts nobody contributed fail with peer_down", "[averaging][part_reducer]") {
  PartReducer r({1, 1}, 2);
  CHECK(r.on_sender_failed(0)->empty());
  auto done = r.on_sender_failed(1);
  REQUIRE(done.ok());
  CHECK(*done == Parts{0, 1});
  CHECK(r.average(0).error().code == errc::peer_down);

  PartReducer none({3}, 0);
  CHECK(none.finished());
  CHECK(none.state(0) == PartState::failed);
  PartReducer empty({}, 3);
  CHECK(empty.finished());
}

TEST_CASE("bad submissions are rejected with clear errors", "[averaging][part_reducer]") {
  PartReducer r({2}, 2);
  std::vector<float> one = {1};
  std::vector<float> two = {1, 2};
  auto size = r.accumulate(0, 0, one.data(), one.size(), 1.0);
  REQUIRE_FALSE(size.ok());
  CHECK(size.error().code == errc::invalid_argument);
  CHECK_THAT(size.error().message, Catch::Contains("2 elements"));
  CHECK_FALSE(r.accumulate(5, 0, two.data(), 2, 1.0).ok());
  CHECK_FALSE(r.accumulate(0, 0, two.data(), 2, -1.0).ok());
  CHECK_FALSE(r.accumulate(0, 0, two.data(), 2, std::nan("")).ok());
  CHECK_FALSE(r.on_sender_failed(2).ok());
  CHECK(r.average(0).error().code == errc::unavailable);
  CHECK(r.average(1).error().code == errc::not_found);
  CHECK(r.release(0).error().code == errc::unavailable);
}

TEST_CASE("release frees a complete part", "[averaging][part_reducer]") {
  PartReducer r({2}, 1);
  CHECK(submit(r, 0, 0, {1, 2}) == Parts{0});
  REQUIRE(r.release(0).ok());
  CHECK(r.state(0) == PartState::released);
  CHECK(r.average(0).error().code == errc::not_found);
}

TEST_CASE("random interleavings give every part the exact mean", "[averaging][part_reducer]") {
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::size_t senders : {1, 2, 4, 10}) {
    for (std::size_t num_parts : {0, 1, 100}) {
      for (double sync_prob : {1.0, 0.1, 0.0}) {
        std::vector<std::size_t> sizes(num_parts);
        for (auto& s : sizes) s = 1 + rng() % 64;
        // data[s][i]: sender s's copy of part i.
        std::vector<std::vector<std::vector<float>>> data(senders);
        for (auto& parts : data) {
          for (auto size : sizes) {
            std::vector<float> x(size);
            for (auto& v : x) v = normal(rng);
            parts.push_back(std::move(x));
          }
        }
        PartReducer r(sizes, senders);
        std::vector<std::size_t> next(senders, 0);
        std::size_t completed = 0;
        std::uniform_real_distribution<double> coin(0.0, 1.0);
        for (std::size_t step = 0; step < senders * num_parts; ++step) {
          // Either the laggiest sender (in sync) or any sender with parts left.
          std::size_t s = 0;
          if (coin(rng) < sync_prob) {
            for (std::size_t k = 1; k < senders; ++k) s = next[k] < next[s] ? k : s;
          } else {
            do s = rng() % senders; while (next[s] == num_parts);
          }
          completed += submit(r, s, next[s], data[s][next[s]]).size();
          ++next[s];
        }
        CAPTURE(senders, num_parts, sync_prob);
        CHECK(completed == num_parts);
        CHECK(r.finished());
        for (std::size_t i = 0; i < num_parts; ++i) {
          const auto avg = average(r, i);
          const auto delta = *r.delta(senders - 1, i);
          for (std::size_t k = 0; k < sizes[i]; ++k) {
            double mean = 0.0;
            for (std::size_t s = 0; s < senders; ++s) mean += data[s][i][k];
            mean /= static_cast<double>(senders);
            CHECK(avg[k] == Approx(mean).margin(1e-6));
            CHECK(data[senders - 1][i][k] + delta[k] == Approx(mean).margin(1e-6));
          }
        }
      }
    }
  }
}

TEST_CASE("deferred: settled parts become jobs, results complete them in order",
          "[averaging][part_reducer]") {
  using apiary::core::averaging::ReducedPart;
  PartReducer r({2, 1}, 2, true);
  CHECK(submit(r, 0, 0, {1, 2}, 1.0).empty());
  CHECK(r.take_jobs().empty());  // sender 1 still owes part 0
  submit(r, 1, 0, {4, 8}, 3.0);
  submit(r, 0, 1, {10}, 1.0);
  submit(r, 1, 1, {20}, 1.0);
  CHECK(r.state(0) == PartState::reducing);
  CHECK(r.num_complete() == 0);
  CHECK(r.average(0).error().code == errc::unavailable);
  auto jobs = r.take_jobs();
  REQUIRE(jobs.size() == 2);
  CHECK(r.take_jobs().empty());  // each job is handed out once
  CHECK(jobs[0].id == 0);
  CHECK(jobs[0].weights == std::vector<float>{1.0f, 3.0f});
  // Part 1's result first: part 0 still blocks the in-order frontier.
  REQUIRE(r.finish_job(1, reduce_part(jobs[1])).ok());
  CHECK(r.num_complete() == 0);
  REQUIRE(r.finish_job(0, reduce_part(jobs[0])).ok());
  CHECK(r.num_complete() == 2);
  CHECK(r.finished());
  CHECK(average(r, 0) == std::vector<float>{3.25f, 6.5f});
  CHECK(*r.delta(0, 0) == std::vector<float>{2.25f, 4.5f});
  CHECK(*r.delta(1, 0) == std::vector<float>{-0.75f, -1.5f});
  CHECK(*r.delta(1, 1) == std::vector<float>{-5.0f});
  float piece[1] = {0.0f};
  REQUIRE(r.delta_into(1, 0, 1, 1, piece).ok());
  CHECK(piece[0] == -1.5f);
  CHECK(r.delta_into(1, 0, 1, 2, piece).error().code == errc::invalid_argument);  // beyond the part
  CHECK(r.finish_job(0, ReducedPart{}).error().code == errc::not_found);  // finished once
  CHECK(r.release(0).ok());
}

TEST_CASE("deferred: a failed or malformed job result fails its part only",
          "[averaging][part_reducer]") {
  using apiary::core::averaging::ReducedPart;
  PartReducer r({2, 2}, 1, true);
  submit(r, 0, 0, {1, 2});
  submit(r, 0, 1, {3, 4});
  auto jobs = r.take_jobs();
  REQUIRE(jobs.size() == 2);
  REQUIRE(r.finish_job(0, apiary::make_error(errc::internal, "device lost")).ok());
  CHECK(r.state(0) == PartState::failed);
  CHECK(r.delta(0, 0).error().code == errc::internal);
  ReducedPart wrong;
  wrong.average = {1.0f};  // one value for a part of two
  CHECK(r.finish_job(1, wrong).error().code == errc::invalid_argument);
  CHECK(r.state(1) == PartState::failed);
  CHECK(r.finished());
}

TEST_CASE("reduce_part: the CPU reference and its errors", "[averaging][part_reducer]") {
  using apiary::core::averaging::ReduceJob;
  using apiary::core::averaging::check_reduce_job;
  ReduceJob job{7, {{1, -2, 0.5f}, {3, 2, 0.5f}}, {1.0f, 1.0f}};
  auto out = reduce_part(job);
  REQUIRE(out.ok());
  CHECK(out->average == std::vector<float>{2, 0, 0.5f});
  CHECK(out->deltas == std::vector<std::vector<float>>{{1, 2, 0}, {-1, -2, 0}});
  CHECK(check_reduce_job(ReduceJob{1, {}, {}}).error().code == errc::invalid_argument);
  CHECK(check_reduce_job(ReduceJob{1, {{1}, {1, 2}}, {1, 1}}).error().code == errc::invalid_argument);
  CHECK(check_reduce_job(ReduceJob{1, {{1}}, {1, 1}}).error().code == errc::invalid_argument);
  CHECK(check_reduce_job(ReduceJob{1, {{1}}, {-1}}).error().code == errc::invalid_argument);
  CHECK(reduce_part(ReduceJob{1, {{1}, {2}}, {0, 0}}).error().code == errc::invalid_argument);
}

TEST_CASE("copies held in place (any alignment) give the same sums and deltas as owned ones",
          "[averaging][part_reducer]") {
  // Sender 0's values sit at an odd offset of a received buffer, sender 1's are borrowed.
  const std::vector<float> a{1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  const std::vector<float> b{3.0f, -2.0f, 0.5f, 8.0f, 1.0f};
  Buffer wire = Buffer::allocate(1 + a.size() * sizeof(float));
  std::memcpy(wire.data() + 1, a.data(), a.size() * sizeof(float));
  for (const bool deferred : {false, true}) {
    PartReducer held({5}, 2, deferred);
    PartReducer owned({5}, 2, deferred);
    REQUIRE(held.accumulate(0, 0, PartBytes{wire.data() + 1, a.size(), wire}, 1.0).ok());
    REQUIRE(held.accumulate(1, 0, PartBytes{reinterpret_cast<const std::byte*>(b.data()), b.size(), {}}, 3.0).ok());
    REQUIRE(owned.accumulate(0, 0, std::vector<float>(a), 1.0).ok());
    REQUIRE(owned.accumulate(1, 0, std::vector<float>(b), 3.0).ok());
    if (deferred) {
      auto jobs = held.take_jobs();
      REQUIRE(jobs.size() == 1);
      CHECK(jobs[0].inputs == std::vector<std::vector<float>>{a, b});  // copied out of the message
      REQUIRE(held.finish_job(0, reduce_part(std::move(jobs[0]))).ok());
      auto owned_jobs = owned.take_jobs();
      REQUIRE(owned.finish_job(0, reduce_part(std::move(owned_jobs[0]))).ok());
    }
    CHECK(*held.average(0) == *owned.average(0));
    CHECK(*held.delta(0, 0) == *owned.delta(0, 0));
    CHECK(*held.delta(1, 0) == *owned.delta(1, 0));
  }
  PartReducer r({2}, 1);
  CHECK(r.accumulate(0, 0, PartBytes{nullptr, 2, {}}, 1.0).error().code == errc::invalid_argument);
}

TEST_CASE("inline averages are reduce_part()'s bits in sender order, whatever the arrival order",
          "[averaging][part_reducer]") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  const std::size_t senders = 5, size = 3000;  // more than one chunk of the sum
  std::vector<std::vector<float>> copies(senders, std::vector<float>(size));
  for (auto& c : copies)
    for (float& v : c) v = value(rng);
  const std::vector<float> weights{0.25f, 3.0f, 1.0f, 0.0f, 7.5f};
  apiary::core::averaging::ReduceJob job;
  job.inputs = copies;
  job.weights = weights;
  const auto reference = reduce_part(job);
  REQUIRE(reference.ok());
  std::vector<std::size_t> order{4, 2, 0, 3, 1};
  for (int round = 0; round < 3; ++round) {
    std::shuffle(order.begin(), order.end(), rng);
    PartReducer r({size}, senders);
    for (std::size_t s : order) REQUIRE(r.accumulate(s, 0, std::vector<float>(copies[s]), weights[s]).ok());
    CHECK(*r.average(0) == reference->average);
    for (std::size_t s = 0; s < senders; ++s) CHECK(*r.delta(s, 0) == reference->deltas[s]);
  }
}

TEST_CASE("an average written to the caller's memory may replace a borrowed copy",
          "[averaging][part_reducer]") {
  std::vector<float> own{1.0f, 2.0f, 3.0f};
  const std::vector<float> other{3.0f, 6.0f, -3.0f};
  PartReducer r({3}, 2, false, {own.data()});
  REQUIRE(r.accumulate(0, 0, PartBytes{reinterpret_cast<const std::byte*>(own.data()), own.size(), {}}, 1.0).ok());
  REQUIRE(r.accumulate(1, 0, std::vector<float>(other), 1.0).ok());
  CHECK(own == std::vector<float>{2.0f, 4.0f, 0.0f});  // the average, over the own copy
  CHECK(*r.average(0) == own);
  CHECK(*r.delta(1, 0) == std::vector<float>{-1.0f, -2.0f, 3.0f});
}

TEST_CASE("sinks get reduce_part()'s deltas, or its average, in the averaging pass, and the copies are freed",
          "[averaging][part_reducer]") {
  using apiary::core::averaging::PartSink;
  using apiary::core::averaging::SinkGets;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  const std::size_t senders = 3, size = 2500;  // pieces of more than one chunk
  std::vector<std::vector<float>> copies(senders, std::vector<float>(size));
  for (auto& c : copies)
    for (float& v : c) v = value(rng);
  const std::vector<float> weights{0.5f, 2.0f, 1.0f};
  apiary::core::averaging::ReduceJob job{0, copies, weights};
  const auto reference = reduce_part(job);
  REQUIRE(reference.ok());
  for (const bool deferred : {false, true}) {
    INFO("deferred " << deferred);
    std::vector<std::vector<float>> sunk(senders);
    std::vector<std::size_t> calls(senders, 0);
    // The own copy (sender 1) is borrowed and overwritten by the average, as in place.
    std::vector<float> own = copies[1];
    PartReducer r({size}, senders, deferred, {own.data()});
    for (std::size_t s : {2, 1, 0}) {
      PartSink sink;
      if (s != 1) {
        sink = [&sunk, &calls, s](const float* values, std::size_t n) {
          sunk[s].insert(sunk[s].end(), values, values + n);
          ++calls[s];
        };
      }
      const auto* bytes = reinterpret_cast<const std::byte*>(s == 1 ? own.data() : copies[s].data());
      // Sender 2's sink takes the average (an answer of AVERAGED_VALUES).
      const SinkGets gets = s == 2 ? SinkGets::average : SinkGets::delta;
      REQUIRE(r.accumulate(s, 0, PartBytes{bytes, size, {}}, weights[s], std::move(sink), gets).ok());
    }
    if (deferred) {
      CHECK(sunk[0].empty());  // nothing before the job's result
      auto jobs = r.take_jobs();
      REQUIRE(jobs.size() == 1);
      REQUIRE(r.finish_job(0, reduce_part(std::move(jobs[0]))).ok());
    } else {
      CHECK(calls[0] > 1);  // piece by piece
    }
    CHECK(sunk[0] == reference->deltas[0]);
    CHECK(sunk[2] == reference->average);
    CHECK(own == reference->average);
    // The sunk deltas are not kept; the own one (no sink) still is, until release.
    CHECK(r.delta(0, 0).error().code == errc::unavailable);
    CHECK(r.delta(2, 0).error().code == errc::unavailable);
    if (deferred) CHECK(*r.delta(1, 0) == reference->deltas[1]);
  }
}
