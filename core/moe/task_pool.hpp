#pragma once
/// The batching of an expert server (hivemind's TaskPool and Runtime, reference §6.1),
/// as decisions: the host submits tasks (a request's rows along dimension 0), asks which
/// batch to run next, runs it on its compute, and reports the outcome; the scheduler
/// says which rows of the output belong to which task and which tasks a failure reaches.
///
/// A pool is ready when it holds min_batch_size queued rows, or when its oldest task has
/// waited `timeout` (hivemind's pool keeps waiting for min_batch_size there; here the
/// timeout releases what has gathered). Batches join tasks greedily in arrival order up
/// to max_batch_size. Of the ready pools, the one holding the oldest task runs first.
/// Pure: time comes in as `now`.
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core::moe {

/// Names a task; chosen by the host, unique among the tasks a scheduler holds.
using TaskId = std::uint64_t;
/// Names a batch; chosen by the scheduler.
using BatchId = std::uint64_t;

/// One request waiting in a pool.
struct Task {
  TaskId id = 0;
  std::size_t rows = 0;    ///< its size along dimension 0 (>= 1)
  TimePoint submitted{0};  ///< when it arrived
};

/// How a pool forms batches (hivemind's defaults: min 1, no timeout).
struct PoolConfig {
  std::size_t max_batch_size = 4096;  ///< rows in a batch, at most (>= 1)
  std::size_t min_batch_size = 1;     ///< rows that make a pool ready (1 .. max_batch_size)
  /// A pool whose oldest task waited this long is ready with fewer rows; none: never.
  std::optional<Duration> timeout;

  /// Errors: errc::invalid_argument naming the first bad setting.
  [[nodiscard]] Status validate() const;
};

/// One task's rows in a batch: rows [offset, offset + rows) of the batch's input and
/// output.
struct TaskSlice {
  TaskId id = 0;
  std::size_t offset = 0;
  std::size_t rows = 0;
};

/// Tasks of one pool joined to run as one call of its expert.
struct Batch {
  BatchId id = 0;
  std::string pool;              ///< the pool (expert uid) whose compute runs it
  std::vector<TaskSlice> tasks;  ///< in arrival order; offsets consecutive from 0
  std::size_t rows = 0;          ///< the sum of the tasks' rows
};

/// The tasks queued for one expert.
class TaskPool {
 public:
  /// A pool with a config that validate() accepts.
  explicit TaskPool(PoolConfig config) : config_(config) {}

  /// Queues `task`. errc::too_large when it has more rows than max_batch_size (no batch
  /// could hold it; the pool carries on), errc::invalid_argument for 0 rows.
  [[nodiscard]] Status submit(const Task& task);
  /// Removes a queued task (its caller gave up); false when it is not queued here.
  bool cancel(TaskId id);

  /// Whether a batch should run now: min_batch_size rows queued, or the oldest task
  /// waited the timeout.
  [[nodiscard]] bool ready(TimePoint now) const;
  /// When the pool becomes ready by its timeout with no more tasks; nullopt when it
  /// is empty, has no timeout, or is ready by size already.
  [[nodiscard]] std::optional<TimePoint> ready_at() const;
  /// The arrival of the oldest queued task (the pool's priority: older runs first).
  [[nodiscard]] std::optional<TimePoint> oldest() const;
  /// The next batch's tasks: queued tasks in arrival order, while they fit
  /// max_batch_size together; removed from the queue. Empty when nothing is queued.
  [[nodiscard]] std::vector<TaskSlice> take_batch();

  [[nodiscard]] std::size_t queued_tasks() const { return queue_.size(); }
  [[nodiscard]] std::size_t queued_rows() const { return rows_; }
  [[nodiscard]] const PoolConfig& config() const { return config_; }

 private:
  PoolConfig config_;
  std::deque<Task> queue_;
  std::size_t rows_ = 0;
};

/// What the host does next.
struct Decision {
  /// A batch to run now; after running it, report with finish() and poll again.
  std::optional<Batch> run;
  /// When nothing runs now: the time a pool becomes ready by its timeout (poll then);
  /// nullopt: poll on the next submit or finish.
  std::optional<TimePoint> wake_at;
};

/// What a finished batch means for one of its tasks.
struct TaskOutcome {
  TaskSlice slice;  ///< the task's rows of the output
  Status status;    ///< ok, or the batch's error (every task of the batch gets it)
};

/// Several pools (one per expert) and the batches in flight (hivemind's Runtime).
class Scheduler {
 public:
  /// At most `max_in_flight` (>= 1) batches run at once (1: one compute device).
  explicit Scheduler(std::size_t max_in_flight = 1) : max_in_flight_(max_in_flight == 0 ? 1 : max_in_flight) {}

  /// Adds the pool of expert `name`. Errors: errc::invalid_argument for a duplicate name
  /// or a config that validate() rejects.
  [[nodiscard]] Status add_pool(const std::string& name, const PoolConfig& config);
  /// Queues task `id` of `rows` rows for pool `pool` at `now`. Errors: errc::not_found
  /// for an unknown pool, errc::invalid_argument for an id in use or 0 rows,
  /// errc::too_large for more rows than the pool's max_batch_size; each reaches this
  /// task's caller alone.
  [[nodiscard]] Status submit(TimePoint now, const std::string& pool, TaskId id, std::size_t rows);
  /// Removes queued task `id` (a caller that gave up); false when it is not queued (it
  /// may be running: its outcome then comes with its batch).
  bool cancel(TaskId id);

  /// The next batch to run: of the ready pools, the one whose oldest task is oldest
  /// (ties: the smaller pool name); none while max_in_flight batches run.
  [[nodiscard]] Decision poll(TimePoint now);
  /// Batch `id` finished: `output_rows` rows came out, or the compute failed. Returns
  /// every task of that batch (no other) with its slice of the output and status; a row
  /// count other than the batch's fails them all. Empty for an unknown batch.
  [[nodiscard]] std::vector<TaskOutcome> finish(BatchId id, const Result<std::size_t>& output_rows);

  [[nodiscard]] const TaskPool* pool(const std::string& name) const;
  [[nodiscard]] std::size_t in_flight() const { return running_.size(); }

 private:
  std::size_t max_in_flight_;
  std::map<std::string, TaskPool> pools_;
  std::map<TaskId, std::string> queued_;  ///< queued task -> its pool
  std::map<TaskId, BatchId> running_tasks_;  ///< task in a running batch -> the batch
  std::map<BatchId, Batch> running_;
  BatchId next_batch_ = 1;
};

}  // namespace apiary::core::moe
