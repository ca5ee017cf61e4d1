#include "core/averaging/part_reducer.hpp"

#include <cmath>
#include <cstring>
#include <utility>

namespace apiary::core::averaging {

namespace {

/// The float at `p`, any alignment (one unaligned load once vectorised).
inline float load_float(const std::byte* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

PartReducer::PartReducer(const std::vector<std::size_t>& part_sizes, std::size_t num_senders,
                         bool deferred, const std::vector<float*>& average_dests)
    : parts_(part_sizes.size()), received_(num_senders, 0), failed_after_(num_senders), deferred_(deferred) {
  for (std::size_t i = 0; i < part_sizes.size(); ++i) {
    parts_[i].size = part_sizes[i];
    if (i < average_dests.size()) parts_[i].average_at = average_dests[i];
  }
  // With no senders at all, every part is settled (and fails) right away.
  (void)complete_ready_parts();
}

bool PartReducer::settled(std::size_t sender, std::size_t part_index) const {
  // A failed sender never submits again: it owes nothing more.
  return received_[sender] > part_index || failed_after_[sender].has_value();
}

std::vector<std::size_t> PartReducer::complete_ready_parts() {
  std::vector<std::size_t> completed;
  while (next_pending_ < parts_.size()) {
    const std::size_t i = next_pending_;
    bool owed = false;
    for (std::size_t s = 0; s < received_.size() && !owed; ++s) owed = !settled(s, i);
    if (owed) break;
    PartSlot& part = parts_[i];
    if (part.contributions == 0) {
      part.state = PartState::failed;
      part.error = make_error(errc::peer_down,
                              "part {} has no contribution: all {} senders failed before "
                              "submitting it; keep the local values for this part",
                              i, received_.size());
    } else if (!(part.denominator > 0.0)) {
      part.state = PartState::failed;
      part.error = make_error(errc::invalid_argument,
                              "part {}: the {} contributions have total weight 0, so their "
                              "average is undefined; expected at least one sender with weight > 0",
                              i, part.contributions);
    } else if (deferred_) {
      part.state = PartState::reducing;  // its job computes the average
    } else {
      average_part(i);
      part.state = PartState::averaged;
    }
    completed.push_back(i);
    ++next_pending_;
  }
  advance_ready();
  return completed;
}

void PartReducer::average_part(std::size_t i) {
  PartSlot& part = parts_[i];
  // reduce_part()'s arithmetic over the copies where they lie, in sender order.
  std::vector<const std::byte*> inputs;
  std::vector<float> weights;
  std::vector<const PartSink*> delta_sinks;
  std::vector<const PartSink*> average_sinks;
  for (std::size_t s = 0; s < part.copies.size(); ++s) {
    const Copy& copy = part.copies[s];
    if (!copy.present) continue;
    inputs.push_back(copy.data());
    weights.push_back(part.weights[s]);
    const bool delta = copy.sink && copy.gets == SinkGets::delta;
    delta_sinks.push_back(delta ? &copy.sink : nullptr);
    if (copy.sink && !delta) average_sinks.push_back(&copy.sink);
  }
  if (part.average_at == nullptr) {
    part.average.resize(part.size);
    part.average_at = part.average.data();
  }
  weighted_average(inputs, weights, part.size, part.average_at, delta_sinks, average_sinks);
  drop_sunk_copies(part);
}

void PartReducer::drop_sunk_copies(PartSlot& part) {
  for (Copy& copy : part.copies) {
    if (!copy.present || !copy.sink) continue;
    copy.sunk = true;
    copy.sink = nullptr;
    copy.held = PartBytes{};
    std::vector<float>().swap(copy.values);
  }
}

void PartReducer::advance_ready() {
  while (next_ready_ < next_pending_ && parts_[next_ready_].state != PartState::reducing) ++next_ready_;
}

Result<std::vector<std::size_t>> PartReducer::accumulate(std::size_t sender,
                                                         std::size_t part_index,
                                                         const float* values, std::size_t count,
                                                         double weight) {
  if (count > 0 && values == nullptr) {
    return make_error(errc::invalid_argument, "reducer: sender {} sent part {} with {} elements but null data",
                      sender, part_index, count);
  }
  return accumulate(sender, part_index, std::vector<float>(values, values + count), weight);
}

Result<std::vector<std::size_t>> PartReducer::accumulate(std::size_t sender, std::size_t part_index,
                                                         std::vector<float>&& values, double weight) {
  const std::size_t count = values.size();
  Copy copy;
  copy.values = std::move(values);
  return add_copy(sender, part_index, std::move(copy), count, weight);
}

Result<std::vector<std::size_t>> PartReducer::accumulate(std::size_t sender, std::size_t part_index,
                                                         PartBytes values, double weight, PartSink sink,
                                                         SinkGets gets) {
  if (values.count > 0 && values.bytes == nullptr) {
    return make_error(errc::invalid_argument, "reducer: sender {} sent part {} with {} elements but null data",
                      sender, part_index, values.count);
  }
  const std::size_t count = values.count;
  Copy copy;
  copy.held = std::move(values);
  copy.sink = std::move(sink);
  copy.gets = gets;
  if (count == 0) copy.held.bytes = nullptr;  // nothing to read: keep it as an empty vector
  return add_copy(sender, part_index, std::move(copy), count, weight);
}

Result<std::vector<std::size_t>> PartReducer::add_copy(std::size_t sender, std::size_t part_index, Copy copy,
                                                       std::size_t count, double weight) {
  if (sender >= received_.size()) {
    return make_error(errc::invalid_argument,
                      "reducer: sender {} is unknown; expected an index below {} (the senders "
                      "of this group)",
                      sender, received_.size());
  }
  if (failed_after_[sender]) {
    return make_error(errc::cancelled,
                      "reducer: sender {} was marked failed after {} parts; its part {} is "
                      "not accepted; close its stream",
                      sender, *failed_after_[sender], part_index);
  }
  if (part_index >= parts_.size()) {
    return make_error(errc::protocol,
                      "reducer: sender {} sent part {}, but this peer reduces only {} parts",
                      sender, part_index, parts_.size());
  }
  if (part_index != received_[sender]) {
    return make_error(errc::protocol,
                      "reducer: expected part {} from sender {}, got part {}; each sender "
                      "sends its parts in order, each once",
                      received_[sender], sender, part_index);
  }
  PartSlot& part = parts_[part_index];
  if (count != part.size) {
    return make_error(errc::invalid_argument, "reducer: part {} has {} elements, sender {} sent {}",
                      part_index, part.size, sender, count);
  }
  if (!std::isfinite(weight) || weight < 0.0) {
    return make_error(errc::invalid_argument,
                      "reducer: sender {} sent part {} with weight {}; expected a finite "
                      "weight >= 0",
                      sender, part_index, weight);
  }
  if (part.state != PartState::pending) {
    return make_error(errc::internal,
                      "reducer: part {} completed before sender {} (active) submitted it",
                      part_index, sender);
  }

  // Keep the copy and its weight: the part is averaged in one pass once it settles.
  if (part.weights.size() != received_.size()) part.weights.resize(received_.size(), 0.0f);
  part.weights[sender] = static_cast<float>(weight);
  part.denominator += part.weights[sender];  // the weights as the average divides by them
  ++part.contributions;
  if (part.copies.size() != received_.size()) part.copies.resize(received_.size());
  copy.present = true;
  part.copies[sender] = std::move(copy);
  ++received_[sender];
  return complete_ready_parts();
}

Result<std::vector<std::size_t>> PartReducer::on_sender_failed(std::size_t sender) {
  if (sender >= received_.size()) {
    return make_error(errc::invalid_argument,
                      "reducer: cannot mark sender {} failed; expected an index below {}",
                      sender, received_.size());
  }
  if (failed_after_[sender]) return std::vector<std::size_t>{};
  // Exclude it from every part it has not submitted yet.
  failed_after_[sender] = received_[sender];
  return complete_ready_parts();
}

PartState PartReducer::state(std::size_t part_index) const {
  return part_index < parts_.size() ? parts_[part_index].state : PartState::released;
}

Result<const PartReducer::PartSlot*> PartReducer::results_of(std::size_t part_index) const {
  if (part_index >= parts_.size()) {
    return make_error(errc::not_found, "reducer: part {} does not exist; this peer reduces {}",
                      part_index, parts_.size());
  }
  const PartSlot& part = parts_[part_index];
  switch (part.state) {
    case PartState::pending:
    case PartState::reducing:
      return make_error(errc::unavailable,
                        "reducer: part {} is not complete yet; wait until accumulate() or "
                        "on_sender_failed() reports it",
                        part_index);
    case PartState::failed:
      return part.error;
    case PartState::released:
      return make_error(errc::not_found, "reducer: part {} was already released", part_index);
    case PartState::averaged:
      break;
  }
  return &part;
}

Result<std::vector<float>> PartReducer::average(std::size_t part_index) const {
  auto part = results_of(part_index);
  if (!part) return part.error();
  const float* average = (*part)->average_at;
  return std::vector<float>(average, average + (*part)->size);
}

Result<std::vector<float>> PartReducer::delta(std::size_t sender, std::size_t part_index) const {
  auto found = results_of(part_index);
  if (!found) return found.error();
  std::vector<float> out((*found)->size);
  if (auto written = delta_into(sender, part_index, 0, out.size(), out.data()); !written) return written.error();
  return out;
}

Status PartReducer::delta_into(std::size_t sender, std::size_t part_index, std::size_t begin, std::size_t count,
                               float* out) const {
  auto found = results_of(part_index);
  if (!found) return found.error();
  const PartSlot& part = **found;
  if (sender >= part.copies.size() || !part.copies[sender].present) {
    return make_error(errc::not_found,
                      "reducer: sender {} did not contribute part {}; no delta to return",
                      sender, part_index);
  }
  if (begin > part.size || count > part.size - begin) {
    return make_error(errc::invalid_argument, "reducer: elements [{}, {}) lie beyond part {} of {} elements", begin,
                      begin + count, part_index, part.size);
  }
  const Copy& copy = part.copies[sender];
  if (copy.sunk) {
    return make_error(errc::unavailable,
                      "reducer: sender {}'s delta of part {} went to its sink when the part was "
                      "averaged; it is not kept",
                      sender, part_index);
  }
  if (deferred_) {  // the job left the delta in the copy's place
    if (count > 0) std::memcpy(out, copy.values.data() + begin, count * sizeof(float));
    return ok_status();
  }
  const std::byte* __restrict mine = copy.data() + begin * sizeof(float);
  const float* __restrict average = part.average_at + begin;
  float* __restrict o = out;
  for (std::size_t k = 0; k < count; ++k) o[k] = average[k] - load_float(mine + k * sizeof(float));
  return ok_status();
}

Status PartReducer::release(std::size_t part_index) {
  if (part_index >= parts_.size()) {
    return make_error(errc::not_found, "reducer: part {} does not exist; this peer reduces {}",
                      part_index, parts_.size());
  }
  PartSlot& part = parts_[part_index];
  if (part.state == PartState::pending || part.state == PartState::reducing) {
    return make_error(errc::unavailable,
                      "reducer: part {} is still pending; release it once it is complete",
                      part_index);
  }
  std::vector<float>().swap(part.average);
  std::vector<Copy>().swap(part.copies);
  std::vector<float>().swap(part.weights);
  part.state = PartState::released;
  return ok_status();
}

std::size_t PartReducer::parts_received(std::size_t sender) const {
  return sender < received_.size() ? received_[sender] : 0;
}

bool PartReducer::sender_failed(std::size_t sender) const {
  return sender < failed_after_.size() && failed_after_[sender].has_value();
}

std::vector<ReduceJob> PartReducer::take_jobs() {
  std::vector<ReduceJob> jobs;
  for (; next_job_ < next_pending_; ++next_job_) {
    PartSlot& part = parts_[next_job_];
    if (part.state != PartState::reducing) continue;
    ReduceJob job;
    job.id = next_job_;
    for (std::size_t s = 0; s < part.copies.size(); ++s) {
      Copy& copy = part.copies[s];
      if (!copy.present) continue;
      part.contributors.push_back(s);
      if (copy.held.bytes != nullptr) {  // the job owns its inputs: copy them out of the message
        copy.values.resize(part.size);
        std::memcpy(copy.values.data(), copy.held.bytes, part.size * sizeof(float));
        copy.held = PartBytes{};
      }
      job.inputs.push_back(std::move(copy.values));
      // The job's result goes to the sink (finish_job).
      PartSink sink = std::move(copy.sink);
      const SinkGets gets = copy.gets;
      copy = Copy{};
      copy.sink = std::move(sink);
      copy.gets = gets;
      job.weights.push_back(part.weights[s]);
    }
    part.taken = true;
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Status PartReducer::finish_job(std::size_t part_index, Result<ReducedPart> result) {
  if (part_index >= parts_.size() || parts_[part_index].state != PartState::reducing ||
      !parts_[part_index].taken) {
    return make_error(errc::not_found,
                      "reducer: part {} is not waiting for a job result; each job is finished once",
                      part_index);
  }
  PartSlot& part = parts_[part_index];
  Status status = ok_status();
  if (result) {
    bool shaped = result->average.size() == part.size && result->deltas.size() == part.contributors.size();
    for (std::size_t j = 0; shaped && j < result->deltas.size(); ++j) shaped = result->deltas[j].size() == part.size;
    if (!shaped) {
      status = make_error(errc::invalid_argument,
                          "reducer: the job of part {} returned {} values and {} deltas; expected {} "
                          "values and one delta of that length per contributor ({})",
                          part_index, result->average.size(), result->deltas.size(), part.size,
                          part.contributors.size());
      result = status.error();
    }
  }
  if (result) {
    for (std::size_t j = 0; j < part.contributors.size(); ++j) {
      Copy& copy = part.copies[part.contributors[j]];
      if (copy.sink && copy.gets == SinkGets::delta) copy.sink(result->deltas[j].data(), result->deltas[j].size());
      if (copy.sink && copy.gets == SinkGets::average) copy.sink(result->average.data(), result->average.size());
      copy.values = std::move(result->deltas[j]);
      copy.present = true;
    }
    drop_sunk_copies(part);
    if (part.average_at != nullptr) {
      if (part.size > 0) std::memcpy(part.average_at, result->average.data(), part.size * sizeof(float));
    } else {
      part.average = std::move(result->average);
      part.average_at = part.average.data();
    }
    part.state = PartState::averaged;
  } else {
    // No average: every contributor keeps its values (no delta is served).
    part.error = result.error();
    part.state = PartState::failed;
  }
  advance_ready();
  return status;
}

}  // namespace apiary::core::averaging
