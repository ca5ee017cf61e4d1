#include "core/moe/task_pool.hpp"

#include <algorithm>
#include <utility>

namespace apiary::core::moe {

Status PoolConfig::validate() const {
  if (max_batch_size == 0) {
    return make_error(errc::invalid_argument, "task pool: max_batch_size is 0; it must be at least 1 row");
  }
  if (min_batch_size == 0 || min_batch_size > max_batch_size) {
    return make_error(errc::invalid_argument, "task pool: min_batch_size {} must be within 1 .. max_batch_size ({})",
                      min_batch_size, max_batch_size);
  }
  if (timeout && timeout->count() < 0) {
    return make_error(errc::invalid_argument, "task pool: timeout {} ns is negative; give >= 0 or none",
                      timeout->count());
  }
  return ok_status();
}

Status TaskPool::submit(const Task& task) {
  if (task.rows == 0) {
    return make_error(errc::invalid_argument, "task {} has 0 rows; a task needs at least one row along dimension 0",
                      task.id);
  }
  if (task.rows > config_.max_batch_size) {
    return make_error(errc::too_large,
                      "task {} has {} rows, more than the pool's max_batch_size ({}); it can't be processed, send "
                      "it in parts of at most {} rows",
                      task.id, task.rows, config_.max_batch_size, config_.max_batch_size);
  }
  queue_.push_back(task);
  rows_ += task.rows;
  return ok_status();
}

bool TaskPool::cancel(TaskId id) {
  auto it = std::find_if(queue_.begin(), queue_.end(), [id](const Task& t) { return t.id == id; });
  if (it == queue_.end()) return false;
  rows_ -= it->rows;
  queue_.erase(it);
  return true;
}

bool TaskPool::ready(TimePoint now) const {
  if (queue_.empty()) return false;
  if (rows_ >= config_.min_batch_size) return true;
  return config_.timeout && now - queue_.front().submitted >= *config_.timeout;
}

std::optional<TimePoint> TaskPool::ready_at() const {
  if (queue_.empty() || !config_.timeout || rows_ >= config_.min_batch_size) return std::nullopt;
  return queue_.front().submitted + *config_.timeout;
}

std::optional<TimePoint> TaskPool::oldest() const {
  if (queue_.empty()) return std::nullopt;
  return queue_.front().submitted;
}

std::vector<TaskSlice> TaskPool::take_batch() {
  std::vector<TaskSlice> batch;
  std::size_t rows = 0;
  // Greedy in arrival order: stop at the first task that would overflow the batch.
  while (!queue_.empty() && rows + queue_.front().rows <= config_.max_batch_size) {
    const Task& t = queue_.front();
    batch.push_back(TaskSlice{t.id, rows, t.rows});
    rows += t.rows;
    rows_ -= t.rows;
    queue_.pop_front();
  }
  return batch;
}

Status Scheduler::add_pool(const std::string& name, const PoolConfig& config) {
  if (pools_.count(name) != 0) {
    return make_error(errc::invalid_argument, "a task pool named '{}' exists already; give each expert one pool", name);
  }
  Status valid = config.validate();
  if (!valid) return make_error(errc::invalid_argument, "pool '{}': {}", name, valid.error().message);
  pools_.emplace(name, TaskPool(config));
  return ok_status();
}

Status Scheduler::submit(TimePoint now, const std::string& pool, TaskId id, std::size_t rows) {
  auto it = pools_.find(pool);
  if (it == pools_.end()) {
    return make_error(errc::not_found, "no expert '{}' on this server ({} experts); check the uid", pool,
                      pools_.size());
  }
  if (queued_.count(id) != 0 || running_tasks_.count(id) != 0) {
    return make_error(errc::invalid_argument, "task id {} is in use by a pending task; give each task its own id", id);
  }
  Status queued = it->second.submit(Task{id, rows, now});
  if (!queued) return make_error(queued.error().code, "expert '{}': {}", pool, queued.error().message);
  queued_.emplace(id, pool);
  return ok_status();
}

bool Scheduler::cancel(TaskId id) {
  auto it = queued_.find(id);
  if (it == queued_.end()) return false;
  const bool removed = pools_.at(it->second).cancel(id);
  queued_.erase(it);
  return removed;
}

Decision Scheduler::poll(TimePoint now) {
  Decision decision;
  if (running_.size() >= max_in_flight_) return decision;
  // Of the ready pools, the one whose oldest task is oldest (map order breaks ties by name).
  const std::pair<const std::string, TaskPool>* best = nullptr;
  for (const auto& entry : pools_) {
    const TaskPool& p = entry.second;
    if (p.ready(now)) {
      if (best == nullptr || *p.oldest() < *best->second.oldest()) best = &entry;
    } else if (auto at = p.ready_at(); at && (!decision.wake_at || *at < *decision.wake_at)) {
      decision.wake_at = at;
    }
  }
  if (best == nullptr) return decision;
  decision.wake_at.reset();
  Batch batch;
  batch.id = next_batch_++;
  batch.pool = best->first;
  batch.tasks = pools_.at(best->first).take_batch();
  for (const TaskSlice& t : batch.tasks) {
    batch.rows += t.rows;
    queued_.erase(t.id);
    running_tasks_.emplace(t.id, batch.id);
  }
  running_.emplace(batch.id, batch);
  decision.run = std::move(batch);
  return decision;
}

std::vector<TaskOutcome> Scheduler::finish(BatchId id, const Result<std::size_t>& output_rows) {
  std::vector<TaskOutcome> outcomes;
  auto it = running_.find(id);
  if (it == running_.end()) return outcomes;
  const Batch& batch = it->second;
  Status status = ok_status();
  if (!output_rows.ok()) {
    status = make_error(output_rows.error().code, "expert '{}' failed on a batch of {} rows: {}", batch.pool,
                        batch.rows, output_rows.error().message);
  } else if (*output_rows != batch.rows) {
    status = make_error(errc::internal,
                        "expert '{}' returned {} rows for a batch of {} rows; its outputs must keep dimension 0",
                        batch.pool, *output_rows, batch.rows);
  }
  // The outcome reaches the tasks of this batch and no other.
  for (const TaskSlice& t : batch.tasks) {
    outcomes.push_back(TaskOutcome{t, status});
    running_tasks_.erase(t.id);
  }
  running_.erase(it);
  return outcomes;
}

const TaskPool* Scheduler::pool(const std::string& name) const {
  auto it = pools_.find(name);
  return it == pools_.end() ? nullptr : &it->second;
}

}  // namespace apiary::core::moe
