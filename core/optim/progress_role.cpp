#include "core/optim/progress_role.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/dht/msgpack_value.hpp"
#include "core/dht/node_role.hpp"

namespace apiary::core::optim {
namespace {

constexpr TimerId k_report_timer = 1;
constexpr TimerId k_fetch_timer = 2;

void append(Effects& fx, Effects more) {
  fx.insert(fx.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

ProgressRole::ProgressRole(ProgressRoleConfig config)
    : config_(std::move(config)),
      tracker_(config_.tracker, config_.peer_id, 0.0, config_.dht_epoch) {}

TimePoint ProgressRole::at_dht_time(double t) const { return from_seconds(std::max(0.0, t - config_.dht_epoch)); }

ProgressSnapshot ProgressRole::snapshot(TimePoint now) const {
  const double t = dht_time(now);
  return ProgressSnapshot{tracker_.local(),
                          tracker_.global(),
                          tracker_.ready_to_update_epoch(t),
                          tracker_.estimated_next_update_time(t),
                          tracker_.fetched_this_epoch(),
                          reports_stored_,
                          fetches_};
}

Effects ProgressRole::publish(TimePoint now) {
  if (store_in_flight_ || (paused_ && !left_)) {
    publish_again_ = true;
    return {};
  }
  const std::string value = left_ ? std::string(1, '\xc0') : pack_progress(tracker_.local());  // None: left
  // Each record expires later than the one before, or the DHT keeps the older one.
  const double lifetime = config_.tracker.metadata_expiration;
  const double expiration = std::max(dht_time(now) + lifetime, std::nextafter(last_expiration_, 1e300));
  last_expiration_ = expiration;
  dht::StoreItem item{dht::NodeId::of_str_key(progress_key(config_.run_id)), dht::pack_bin(config_.owner_marker),
                      value, expiration};
  dht::NodeOp op = [item = std::move(item)](dht::Node& node, TimePoint at, OpId id) {
    return node.store(at, id, {item});
  };
  store_in_flight_ = next_ask_++;
  Effects fx{Ask{*store_in_flight_, config_.dht_role, dht::k_run_method, Value::of(std::move(op))}};
  if (!left_) {
    const auto half = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(lifetime / 2));
    fx.push_back(SetTimer{k_report_timer, now + half});
  }
  return fx;
}

Effects ProgressRole::fetch(TimePoint) {
  if (paused_) {
    fetch_waiting_ = true;
    return {};
  }
  if (fetch_in_flight_) return {};
  const dht::NodeId key = dht::NodeId::of_str_key(progress_key(config_.run_id));
  dht::NodeOp op = [key](dht::Node& node, TimePoint at, OpId id) { return node.get(at, id, {key}, true); };
  fetch_in_flight_ = next_ask_++;
  return {Ask{*fetch_in_flight_, config_.dht_role, dht::k_run_method, Value::of(std::move(op))}};
}

Effects ProgressRole::on(TimePoint now, Input input) {
  if (std::holds_alternative<Start>(input)) {
    tracker_ = ProgressTracker(config_.tracker, config_.peer_id, to_seconds(now), dht_time(now));  // the clocks start
    Effects fx = publish(now);
    append(fx, fetch(now));
    return fx;
  }
  if (auto* timer = std::get_if<TimerFired>(&input)) {
    if (left_) return {};
    if (timer->id == k_report_timer) return publish(now);
    if (timer->id == k_fetch_timer) return fetch(now);
    return {};
  }
  if (auto* call = std::get_if<LocalCall>(&input)) return on_call(now, *call);
  if (auto* reply = std::get_if<LocalReply>(&input)) return on_reply(now, *reply);
  return {};
}

Effects ProgressRole::on_call(TimePoint now, LocalCall& call) {
  const double t = dht_time(now);
  const double mono = to_seconds(now);
  if (call.method == k_look_method) return {Complete{call.op, Value::of(snapshot(now))}};
  if (left_) {
    return {Complete{call.op, make_error(errc::cancelled, "the progress tracker left the run; start a new one")}};
  }
  if (call.method == k_report_method) {
    const auto* report = call.args.as<ProgressReport>();
    if (report == nullptr || report->epoch < 0 || report->samples_accumulated < 0) {
      return {Complete{call.op, make_error(errc::invalid_argument, "'{}' takes a ProgressReport with epoch and "
                                                                   "samples >= 0", k_report_method)}};
    }
    tracker_.report(mono, t, report->epoch, report->samples_accumulated, report->update_global_samples);
    Effects fx{Complete{call.op, Value::of(snapshot(now))}};
    append(fx, publish(now));
    return fx;
  }
  if (call.method == k_update_epoch_method) {
    std::optional<std::int64_t> epoch;
    if (const auto* given = call.args.as<std::optional<std::int64_t>>()) epoch = *given;
    if (epoch && *epoch < 0) {
      return {Complete{call.op, make_error(errc::invalid_argument, "expected a new epoch >= 0, got {}", *epoch)}};
    }
    const std::int64_t updated = tracker_.update_epoch(mono, t, epoch);
    Effects fx{Complete{call.op, Value::of(updated)}};
    append(fx, publish(now));
    return fx;
  }
  if (call.method == k_pause_method) {
    const auto* pause = call.args.as<bool>();
    if (pause == nullptr) {
      return {Complete{call.op, make_error(errc::invalid_argument, "'{}' takes a bool", k_pause_method)}};
    }
    paused_ = *pause;
    Effects fx{Complete{call.op, Value{}}};
    if (!paused_) {
      if (publish_again_ && !store_in_flight_) {
        publish_again_ = false;
        append(fx, publish(now));
      }
      if (fetch_waiting_) {
        fetch_waiting_ = false;
        append(fx, fetch(now));
      }
    }
    return fx;
  }
  if (call.method == k_fetch_method) {
    fetch_ops_.push_back(call.op);
    return fetch(now);
  }
  if (call.method == k_leave_method) {
    left_ = true;
    leave_op_ = call.op;
    Effects fx{CancelTimer{k_report_timer}, CancelTimer{k_fetch_timer}};
    append(fx, publish(now));
    return fx;
  }
  return {unknown_method(call, "the progress tracker")};
}

Effects ProgressRole::on_reply(TimePoint now, LocalReply& reply) {
  const auto* done = reply.result ? reply.result->as<dht::OpResult>() : nullptr;
  Effects fx;
  if (store_in_flight_ && reply.op == *store_in_flight_) {
    store_in_flight_.reset();
    const bool stored = done != nullptr && done->status.ok() && !done->stored.empty() && done->stored[0];
    if (stored) ++reports_stored_;
    if (left_ && leave_op_ && !publish_again_) {
      fx.push_back(Complete{*leave_op_, Value::of(stored)});
      leave_op_.reset();
    }
    if (publish_again_ && (!paused_ || left_)) {
      publish_again_ = false;
      append(fx, publish(now));
    }
    return fx;
  }
  if (fetch_in_flight_ && reply.op == *fetch_in_flight_) {
    fetch_in_flight_.reset();
    ++fetches_;
    std::vector<std::optional<LocalProgress>> peers;
    if (done != nullptr && !done->found.empty() && done->found[0]) {
      if (const auto* dict = std::get_if<dht::FoundValue::Dictionary>(&done->found[0]->value)) {
        for (const auto& [subkey, entry] : *dict) {
          if (entry.value.size() == 1 && entry.value[0] == '\xc0') {
            peers.emplace_back(std::nullopt);  // a peer that left
            continue;
          }
          auto progress = unpack_progress(entry.value);
          if (progress) peers.emplace_back(std::move(*progress));  // others were refused by the schema already
        }
      }
    }
    tracker_.on_fetched(dht_time(now), peers);
    if (!left_) fx.push_back(SetTimer{k_fetch_timer, at_dht_time(tracker_.global().next_fetch_time)});
    for (OpId op : fetch_ops_) fx.push_back(Complete{op, Value::of(snapshot(now))});
    fetch_ops_.clear();
    return fx;
  }
  return fx;
}

}  // namespace apiary::core::optim
