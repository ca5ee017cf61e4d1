// The expert server's batching (hivemind's TaskPool and Runtime, reference §6.1): when a
// pool is ready, how batches are joined, which pool runs first, and where outcomes go.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "core/moe/task_pool.hpp"

namespace {

namespace moe = apiary::core::moe;
using namespace apiary::core::moe;
using apiary::core::TimePoint;
using namespace std::chrono_literals;

PoolConfig config(std::size_t max, std::size_t min = 1, std::optional<apiary::core::Duration> timeout = std::nullopt) {
  PoolConfig c;
  c.max_batch_size = max;
  c.min_batch_size = min;
  c.timeout = timeout;
  return c;
}

TimePoint at(int ms) { return std::chrono::milliseconds(ms); }

std::vector<moe::TaskId> ids(const std::vector<TaskSlice>& slices) {
  std::vector<moe::TaskId> out;
  for (const TaskSlice& s : slices) out.push_back(s.id);
  return out;
}

}  // namespace

TEST_CASE("a pool is ready at min_batch_size rows or when its oldest task waited the timeout", "[moe]") {
  TaskPool pool(config(64, 10, 50ms));
  CHECK_FALSE(pool.ready(at(0)));
  CHECK_FALSE(pool.ready_at());
  REQUIRE(pool.submit({1, 4, at(100)}));
  REQUIRE(pool.submit({2, 4, at(120)}));
  CHECK(pool.queued_rows() == 8);
  CHECK_FALSE(pool.ready(at(149)));
  REQUIRE(pool.ready_at());
  CHECK(*pool.ready_at() == at(150));  // the oldest task's arrival + timeout
  CHECK(pool.ready(at(150)));
  REQUIRE(pool.submit({3, 2, at(130)}));
  CHECK(pool.ready(at(131)));  // 10 rows
  CHECK_FALSE(pool.ready_at());

  TaskPool patient(config(64, 10));  // no timeout: waits for 10 rows however long
  REQUIRE(patient.submit({1, 9, at(0)}));
  CHECK_FALSE(patient.ready(at(1000000)));
  CHECK_FALSE(patient.ready_at());
  REQUIRE(patient.submit({2, 1, at(5)}));
  CHECK(patient.ready(at(5)));
}

TEST_CASE("batches join tasks greedily in arrival order up to max_batch_size", "[moe]") {
  TaskPool pool(config(10));
  for (moe::TaskId id = 1; id <= 5; ++id) REQUIRE(pool.submit({id, id == 3 ? 6u : 3u, at(static_cast<int>(id))}));
  // 3 + 3 fit; 6 would make 12: the batch ends there, the later tasks wait their turn.
  const auto first = pool.take_batch();
  CHECK(ids(first) == std::vector<moe::TaskId>{1, 2});
  CHECK(first[0].offset == 0);
  CHECK(first[1].offset == 3);
  const auto second = pool.take_batch();
  CHECK(ids(second) == std::vector<moe::TaskId>{3, 4});
  CHECK(second[1].offset == 6);
  CHECK(second[1].rows == 3);
  CHECK(ids(pool.take_batch()) == std::vector<moe::TaskId>{5});
  CHECK(pool.take_batch().empty());
  CHECK(pool.queued_rows() == 0);
}

TEST_CASE("a task larger than max_batch_size is refused alone and the pool carries on", "[moe]") {
  Scheduler s;
  REQUIRE(s.add_pool("ffn.0", config(8)));
  REQUIRE(s.submit(at(0), "ffn.0", 1, 8));
  auto big = s.submit(at(1), "ffn.0", 2, 9);
  REQUIRE_FALSE(big);
  CHECK(big.error().code == apiary::errc::too_large);
  CHECK(big.error().message.find("9 rows") != std::string::npos);
  CHECK(big.error().message.find("max_batch_size (8)") != std::string::npos);
  CHECK(big.error().message.find("ffn.0") != std::string::npos);
  REQUIRE(s.submit(at(2), "ffn.0", 3, 1));
  auto d = s.poll(at(3));
  REQUIRE(d.run);
  CHECK(ids(d.run->tasks) == std::vector<moe::TaskId>{1});
  CHECK(s.finish(d.run->id, std::size_t{8}).size() == 1);
  d = s.poll(at(4));
  REQUIRE(d.run);
  CHECK(ids(d.run->tasks) == std::vector<moe::TaskId>{3});
  // The refused task's id was never taken.
  CHECK(s.submit(at(5), "ffn.0", 2, 2));
}

TEST_CASE("the scheduler runs the ready pool holding the oldest task first", "[moe]") {
  Scheduler s(8);
  REQUIRE(s.add_pool("a", config(100)));
  REQUIRE(s.add_pool("b", config(100)));
  REQUIRE(s.add_pool("c", config(100, 50, 100ms)));
  REQUIRE(s.submit(at(5), "c", 1, 1));    // oldest, but not ready until 105 ms
  REQUIRE(s.submit(at(10), "a", 2, 1));
  REQUIRE(s.submit(at(7), "b", 3, 1));    // older than a's
  REQUIRE(s.submit(at(12), "b", 4, 1));
  auto d = s.poll(at(20));
  REQUIRE(d.run);
  CHECK(d.run->pool == "b");
  CHECK(ids(d.run->tasks) == std::vector<moe::TaskId>{3, 4});
  CHECK(d.run->rows == 2);
  d = s.poll(at(20));
  REQUIRE(d.run);
  CHECK(d.run->pool == "a");
  // Only c is left, waiting for its timeout: nothing runs, wake at 105 ms.
  d = s.poll(at(20));
  CHECK_FALSE(d.run);
  REQUIRE(d.wake_at);
  CHECK(*d.wake_at == at(105));
  d = s.poll(at(105));
  REQUIRE(d.run);
  CHECK(d.run->pool == "c");
  CHECK_FALSE(s.poll(at(106)).run);
  CHECK_FALSE(s.poll(at(106)).wake_at);
}

TEST_CASE("a finished batch splits its output rows per task and a failure reaches that batch only", "[moe]") {
  Scheduler s(2);
  REQUIRE(s.add_pool("x", config(6)));
  REQUIRE(s.submit(at(0), "x", 10, 2));
  REQUIRE(s.submit(at(1), "x", 11, 3));
  REQUIRE(s.submit(at(2), "x", 12, 4));
  REQUIRE(s.submit(at(3), "x", 13, 1));
  auto one = s.poll(at(4)).run;
  auto two = s.poll(at(4)).run;
  REQUIRE(one);
  REQUIRE(two);
  CHECK(ids(one->tasks) == std::vector<moe::TaskId>{10, 11});
  CHECK(ids(two->tasks) == std::vector<moe::TaskId>{12, 13});
  CHECK(s.in_flight() == 2);

  const auto failed = s.finish(two->id, apiary::make_error(apiary::errc::handler_error, "CUDA out of memory"));
  REQUIRE(failed.size() == 2);
  for (const TaskOutcome& o : failed) {
    CHECK_FALSE(o.status);
    CHECK(o.status.error().message.find("CUDA out of memory") != std::string::npos);
    CHECK(o.status.error().message.find("'x'") != std::string::npos);
  }
  CHECK(failed[0].slice.id == 12);
  CHECK(failed[1].slice.id == 13);

  const auto fine = s.finish(one->id, std::size_t{5});
  REQUIRE(fine.size() == 2);
  CHECK(fine[0].status);
  CHECK(fine[0].slice.id == 10);
  CHECK(fine[0].slice.offset == 0);
  CHECK(fine[0].slice.rows == 2);
  CHECK(fine[1].status);
  CHECK(fine[1].slice.id == 11);
  CHECK(fine[1].slice.offset == 2);
  CHECK(fine[1].slice.rows == 3);
  CHECK(s.finish(one->id, std::size_t{5}).empty());  // reported once
  CHECK(s.in_flight() == 0);

  // An output that lost rows fails its batch: no task gets another's rows.
  REQUIRE(s.submit(at(5), "x", 14, 2));
  auto three = s.poll(at(5)).run;
  REQUIRE(three);
  const auto short_output = s.finish(three->id, std::size_t{1});
  REQUIRE(short_output.size() == 1);
  CHECK_FALSE(short_output[0].status);
  CHECK(short_output[0].status.error().message.find("returned 1 rows for a batch of 2") != std::string::npos);
}

TEST_CASE("at most max_in_flight batches run and cancelled tasks leave the queue", "[moe]") {
  Scheduler s;  // one batch at a time
  REQUIRE(s.add_pool("x", config(1)));
  REQUIRE(s.submit(at(0), "x", 1, 1));
  REQUIRE(s.submit(at(1), "x", 2, 1));
  REQUIRE(s.submit(at(2), "x", 3, 1));
  auto first = s.poll(at(3)).run;
  REQUIRE(first);
  const auto busy = s.poll(at(3));
  CHECK_FALSE(busy.run);
  CHECK_FALSE(busy.wake_at);
  CHECK(s.cancel(2));
  CHECK_FALSE(s.cancel(2));
  CHECK_FALSE(s.cancel(1));  // running: its outcome comes with its batch
  CHECK(s.pool("x")->queued_tasks() == 1);
  (void)s.finish(first->id, std::size_t{1});
  auto next = s.poll(at(4)).run;
  REQUIRE(next);
  CHECK(ids(next->tasks) == std::vector<moe::TaskId>{3});
}

TEST_CASE("unknown pools reused task ids and bad configs are errors", "[moe]") {
  Scheduler s;
  REQUIRE(s.add_pool("x", config(4)));
  auto dup_pool = s.add_pool("x", config(4));
  REQUIRE_FALSE(dup_pool);
  CHECK(dup_pool.error().message.find("'x' exists already") != std::string::npos);
  auto unknown = s.submit(at(0), "y", 1, 1);
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().code == apiary::errc::not_found);
  CHECK(unknown.error().message.find("'y'") != std::string::npos);
  REQUIRE(s.submit(at(0), "x", 1, 1));
  auto reused = s.submit(at(0), "x", 1, 1);
  REQUIRE_FALSE(reused);
  CHECK(reused.error().message.find("task id 1 is in use") != std::string::npos);
  auto run = s.poll(at(0)).run;
  REQUIRE(run);
  CHECK_FALSE(s.submit(at(0), "x", 1, 1));  // still running
  auto empty = s.submit(at(0), "x", 2, 0);
  REQUIRE_FALSE(empty);
  CHECK(empty.error().code == apiary::errc::invalid_argument);

  CHECK_FALSE(config(0).validate());
  CHECK_FALSE(config(4, 0).validate());
  auto min_over = s.add_pool("z", config(4, 5));
  REQUIRE_FALSE(min_over);
  CHECK(min_over.error().message.find("min_batch_size 5") != std::string::npos);
  CHECK_FALSE(config(4, 1, -1ms).validate());
  CHECK(config(4, 4, 0ms).validate());
}
