#include "sim/scenarios/averaging_host.hpp"

#include <algorithm>
#include <chrono>

#include <utility>

#include "core/averaging/dht_declarations.hpp"

namespace apiary::sim::scenarios {

namespace mm = core::averaging;
using core::Effects;
using core::TimePoint;

namespace {

/// The DHT node's op id of the bootstrap (the role's operations use later ids).
constexpr core::dht::OpId k_bootstrap = 1;

void append(Effects& out, Effects more) {
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

AveragerHost::AveragerHost(core::dht::NodeId id, core::PeerAddr self, const AveragerSettings& settings,
                           std::uint64_t seed, std::vector<float> values,
                           std::vector<core::PeerAddr> bootstrap)
    : settings_(settings),
      rng_(seed),
      node_(id, self, [&] {
        core::dht::NodeConfig config = settings.node;
        config.seed = seed ^ 0x5bd1e995u;
        return config;
      }(), nullptr, settings.dht_epoch),
      role_([&] {
        mm::AveragerRoleConfig config;
        config.peer_id = self;
        config.dht_epoch = settings.dht_epoch;
        config.id_base = k_role_id_base;
        config.deferred_reductions = settings.device_ns_per_value > 0;
        return config;
      }(), [this] { return rng_.next_u64(); }),
      bootstrap_(std::move(bootstrap)),
      values_(std::move(values)) {}

PeerRound AveragerHost::round(std::size_t round) const {
  auto it = rounds_.find(round);
  return it == rounds_.end() ? PeerRound{} : it->second;
}

Effects AveragerHost::on_start(TimePoint now) {
  Effects out = node_.start(now, k_bootstrap, bootstrap_);
  drain(now, out);
  return out;
}

Effects AveragerHost::on_request(TimePoint now, core::RequestId id, const std::string& handle,
                                 const std::string& request) {
  return on_request_from(now, id, handle, core::PeerAddr{}, request);
}

Effects AveragerHost::on_request_from(TimePoint now, core::RequestId id, const std::string& handle,
                                      const core::PeerAddr& from, const std::string& request) {
  if (role_.serves(handle)) return absorb(now, role_.on_request(now, id, handle, from, Buffer::copy_of(request)));
  Effects out = node_.on_request(now, id, handle, from, request);
  drain(now, out);
  return out;
}

Effects AveragerHost::on_request_message(TimePoint now, core::RequestId id,
                                         const Result<std::string>& message, bool last) {
  if (!role_.owns_request(id)) return {};
  Result<Buffer> bytes = message ? Result<Buffer>(Buffer::copy_of(*message)) : Result<Buffer>(message.error());
  return absorb(now, role_.on_request_message(now, id, std::move(bytes), last));
}

Effects AveragerHost::on_response(TimePoint now, core::CallId call, const Result<std::string>& response) {
  if (role_.owns(call)) return absorb(now, role_.on_response(now, call, response));
  Effects out = node_.on_response(now, call, response);
  drain(now, out);
  return out;
}

Effects AveragerHost::on_message(TimePoint now, core::CallId call, const std::string& message) {
  if (!role_.owns(call)) return {};
  return absorb(now, role_.on_message(now, call, message));
}

Effects AveragerHost::on_timer(TimePoint now, core::TimerId id) {
  if (auto job = device_jobs_.find(id); job != device_jobs_.end()) {
    // The modelled device finished this job: its result goes back to the role.
    mm::ReduceJob done = std::move(job->second);
    device_jobs_.erase(job);
    const std::uint64_t job_id = done.id;
    return absorb(now, role_.on_reduced(now, job_id, mm::reduce_part(std::move(done))));
  }
  if (role_.owns(id)) return absorb(now, role_.on_timer(now, id));
  Effects out = node_.on_timer(now, id);
  drain(now, out);
  return out;
}

Effects AveragerHost::begin_round(TimePoint now, std::size_t round, mm::StepParams params) {
  Effects out;
  // Leave what is left of the previous round.
  if (role_.busy()) append(out, absorb(now, role_.cancel(now)));
  round_ = round;
  rounds_[round].started = true;
  mm::AveragerStep step;
  step.params = std::move(params);
  step.tensors = {values_};
  step.part_size_bytes = settings_.part_size_bytes;
  step.sender_timeout = settings_.sender_timeout;
  step.reducer_timeout = settings_.reducer_timeout;
  step.call_timeout = settings_.call_timeout;
  append(out, absorb(now, role_.step(now, std::move(step))));
  return out;
}

Effects AveragerHost::absorb(TimePoint now, mm::AveragerEffects afx) {
  Effects out = std::move(afx.rpc);
  for (auto& op : afx.dht) {
    const core::dht::OpId id = next_op_++;
    if (auto* d = std::get_if<mm::DhtDeclare>(&op)) {
      dht_ops_[id] = PendingDht{d->op, true};
      append(out, node_.store(now, id, {mm::declaration_item(*d)}));
    } else if (auto* g = std::get_if<mm::DhtGetAveragers>(&op)) {
      dht_ops_[id] = PendingDht{g->op, false};
      append(out, node_.get(now, id, {mm::averagers_key(*g)}, true));
    }
  }
  for (auto& job : afx.reduce) {
    // One job at a time on the device, in arrival order.
    std::size_t values = 0;
    for (const auto& input : job.inputs) values += input.size();
    const auto cost = std::chrono::duration_cast<core::Duration>(
        std::chrono::duration<double, std::nano>(settings_.device_ns_per_value * static_cast<double>(values)));
    device_free_ = std::max(device_free_, now) + cost;
    const core::TimerId timer = next_device_timer_++;
    device_jobs_.emplace(timer, std::move(job));
    out.push_back(core::SetTimer{timer, device_free_});
  }
  if (afx.outcome) on_outcome(std::move(*afx.outcome));
  drain(now, out);
  return out;
}

void AveragerHost::drain(TimePoint now, Effects& out) {
  for (auto& result : node_.take_completed()) {
    if (result.op == k_bootstrap) {
      bootstrapped_ = true;
      continue;
    }
    auto it = dht_ops_.find(result.op);
    if (it == dht_ops_.end()) continue;
    const PendingDht pending = it->second;
    dht_ops_.erase(it);
    if (pending.declare) {
      const bool ok = result.status.ok() && !result.stored.empty() && result.stored[0];
      append(out, absorb(now, role_.on_declared(now, pending.op, ok)));
    } else {
      const std::optional<core::dht::FoundValue> none;
      const auto& found = result.found.empty() ? none : result.found[0];
      append(out, absorb(now, role_.on_averagers(now, pending.op, averagers_of(now, found))));
    }
  }
}

std::vector<mm::Averager> AveragerHost::averagers_of(
    TimePoint now, const std::optional<core::dht::FoundValue>& found) const {
  return mm::declared_averagers(found, node_.dht_time(now));
}

void AveragerHost::on_outcome(Result<mm::AveragerStepResult> outcome) {
  PeerRound& record = rounds_[round_];
  if (!outcome) {
    if (record.error.empty()) record.error = outcome.error().what();
    return;
  }
  const mm::AveragerStepResult& result = outcome.value();
  record.grouped = true;
  record.group_id = result.group.group_id;
  record.group_size = result.group.peers.size();
  if (result.deltas.empty()) {
    record.error = "expected one delta per tensor, got none";
    return;
  }
  // tensor += alpha * delta with alpha = 1.
  const std::vector<float>& delta = result.deltas[0];
  for (std::size_t i = 0; i < values_.size() && i < delta.size(); ++i) values_[i] += delta[i];
  record.completed = true;
  record.failed_peers = result.failed_senders.size() + result.failed_reducers.size();
}

}  // namespace apiary::sim::scenarios
