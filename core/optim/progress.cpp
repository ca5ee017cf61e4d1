#include "core/optim/progress.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <msgpack.hpp>

#include "core/dht/msgpack_value.hpp"

namespace apiary::core::optim {
namespace {

constexpr const char* k_fields[] = {"peer_id", "epoch", "samples_accumulated", "samples_per_second", "time",
                                    "client_mode"};

bool is_float(const msgpack::object& o) {
  return o.type == msgpack::type::FLOAT32 || o.type == msgpack::type::FLOAT64;
}

}  // namespace

std::string pack_progress(const LocalProgress& p) {
  auto pack_int = [](std::int64_t v) {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer>(buffer).pack(v);
    return std::string(buffer.data(), buffer.size());
  };
  // Floats as float64 always (msgpack-c's pack_double writes integral values as ints).
  std::string out(1, '\x86');
  out += dht::pack_str(k_fields[0]) + dht::pack_bin(p.peer_id);
  out += dht::pack_str(k_fields[1]) + pack_int(p.epoch);
  out += dht::pack_str(k_fields[2]) + pack_int(p.samples_accumulated);
  out += dht::pack_str(k_fields[3]) + dht::pack_float(p.samples_per_second);
  out += dht::pack_str(k_fields[4]) + dht::pack_float(p.time);
  out += dht::pack_str(k_fields[5]) + std::string(1, p.client_mode ? '\xc3' : '\xc2');
  return out;
}

Result<LocalProgress> unpack_progress(std::string_view packed) {
  auto handle = dht::unpack_one(packed);
  if (!handle) return handle.error();
  const msgpack::object& o = handle->get();
  if (o.type != msgpack::type::MAP || o.via.map.size != 6) {
    return make_error(errc::malformed, "a training progress record: expected a map of 6 fields, got {}",
                      o.type == msgpack::type::MAP ? std::to_string(o.via.map.size) + " fields" : "no map");
  }
  LocalProgress p;
  unsigned seen = 0;
  for (std::uint32_t i = 0; i < o.via.map.size; ++i) {
    const msgpack::object_kv& kv = o.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR) return make_error(errc::malformed, "a training progress record: a key that is not a str");
    const std::string_view name(kv.key.via.str.ptr, kv.key.via.str.size);
    unsigned f = 0;
    while (f < 6 && name != k_fields[f]) ++f;
    if (f == 6 || (seen & (1u << f)) != 0) {
      return make_error(errc::malformed, "a training progress record: unexpected or repeated field '{}'", name);
    }
    seen |= 1u << f;
    const msgpack::object& v = kv.val;
    const bool ok = (f == 0 && v.type == msgpack::type::BIN) ||
                    ((f == 1 || f == 2) && v.type == msgpack::type::POSITIVE_INTEGER) ||
                    (f == 3 && is_float(v) && v.via.f64 >= 0) || (f == 4 && is_float(v)) ||
                    (f == 5 && v.type == msgpack::type::BOOLEAN);
    if (!ok) return make_error(errc::malformed, "a training progress record: field '{}' has the wrong type", name);
    switch (f) {
      case 0: p.peer_id.assign(v.via.bin.ptr, v.via.bin.size); break;
      case 1: p.epoch = static_cast<std::int64_t>(std::min<std::uint64_t>(v.via.u64, std::numeric_limits<std::int64_t>::max())); break;
      case 2: p.samples_accumulated = static_cast<std::int64_t>(std::min<std::uint64_t>(v.via.u64, std::numeric_limits<std::int64_t>::max())); break;
      case 3: p.samples_per_second = v.via.f64; break;
      case 4: p.time = v.via.f64; break;
      default: p.client_mode = v.via.boolean; break;
    }
  }
  return p;
}

std::string progress_key(const std::string& run_id) { return run_id + "_progress"; }

dht::SchemaField progress_schema_field() {
  using dht::schema_type;
  return dht::SchemaField::dictionary_of_records("progress", schema_type::bytes_with_owner,
                                                 {{"peer_id", schema_type::bytes, false},
                                                  {"epoch", schema_type::nonnegative_int, false},
                                                  {"samples_accumulated", schema_type::nonnegative_int, false},
                                                  {"samples_per_second", schema_type::nonnegative_float, false},
                                                  {"time", schema_type::float64, false},
                                                  {"client_mode", schema_type::boolean, false}},
                                                 true);
}

double PerformanceEma::update(double task_size, double interval) {
  seconds_per_sample_ = alpha_ * interval / task_size + (1 - alpha_) * seconds_per_sample_;
  ++updates_;
  const double adjusted = seconds_per_sample_ / (1 - std::pow(1 - alpha_, static_cast<double>(updates_)));
  speed_ = 1 / std::max(adjusted, eps_);
  return speed_;
}

Status ProgressConfig::validate() const {
  if (target_batch_size <= 0) {
    return make_error(errc::invalid_argument, "expected target_batch_size > 0, got {}", target_batch_size);
  }
  if (!(min_refresh_period > 0) || !(max_refresh_period >= min_refresh_period) || !(default_refresh_period > 0)) {
    return make_error(errc::invalid_argument,
                      "expected 0 < min_refresh_period <= max_refresh_period and default_refresh_period > 0, got "
                      "{}, {}, {}", min_refresh_period, max_refresh_period, default_refresh_period);
  }
  if (!(expected_drift_peers >= 0) || !(expected_drift_rate >= 0)) {
    return make_error(errc::invalid_argument, "expected drift peers and rate >= 0, got {} and {}",
                      expected_drift_peers, expected_drift_rate);
  }
  if (!(performance_ema_alpha > 0 && performance_ema_alpha <= 1)) {
    return make_error(errc::invalid_argument, "expected 0 < performance_ema_alpha <= 1, got {}", performance_ema_alpha);
  }
  if (!(metadata_expiration > 0)) {
    return make_error(errc::invalid_argument, "expected metadata_expiration > 0 s, got {}", metadata_expiration);
  }
  return ok_status();
}

ProgressTracker::ProgressTracker(ProgressConfig config, std::string peer_id, double mono_now, double dht_now)
    : config_(std::move(config)), ema_(config_.performance_ema_alpha), ema_clock_(mono_now) {
  local_ = LocalProgress{std::move(peer_id), 0, 0, ema_.samples_per_second(), dht_now, config_.client_mode};
  on_fetched(dht_now, {});
  fetched_this_epoch_ = false;
}

void ProgressTracker::report(double mono_now, double dht_now, std::int64_t local_epoch,
                             std::int64_t samples_accumulated, bool update_global_samples) {
  const std::int64_t extra = samples_accumulated - local_.samples_accumulated;
  if (update_global_samples && local_epoch == local_.epoch && local_.epoch == global_.epoch) {
    global_.samples_accumulated += extra;  // may go down, e.g. when a peer resets its count
  }
  if (extra > 0) (void)ema_.update(static_cast<double>(extra), std::max(0.0, mono_now - ema_clock_));
  ema_clock_ = mono_now;  // a drop restarts the clock, as an update does
  local_ = LocalProgress{local_.peer_id, local_epoch, samples_accumulated, ema_.samples_per_second(), dht_now,
                         config_.client_mode};
}

std::int64_t ProgressTracker::update_epoch(double mono_now, double dht_now, std::optional<std::int64_t> new_epoch) {
  const std::int64_t epoch = new_epoch ? *new_epoch : local_.epoch + 1;
  if (epoch > global_.epoch) {
    global_.epoch = epoch;
    global_.samples_accumulated = 0;
    global_.eta_next_epoch = std::numeric_limits<double>::infinity();
  }
  report(mono_now, dht_now, epoch, 0);
  fetched_this_epoch_ = false;
  return epoch;
}

void ProgressTracker::on_fetched(double dht_now, const std::vector<std::optional<LocalProgress>>& peers) {
  GlobalProgress g;
  g.target_batch_size = config_.target_batch_size;
  std::vector<const LocalProgress*> live;
  for (const auto& p : peers) {
    if (p) live.push_back(&*p);
  }
  if (peers.empty()) {
    // Nobody reported (not even this peer: its first report may not have reached the DHT yet):
    // our own progress and speed, looked at again after the default period, within the
    // bounds the trainer set (a default of 3 s past a max_refresh_period of 1 s would leave
    // this peer blind to a swarm that filled up meanwhile, and late for its first round).
    const double remaining = static_cast<double>(std::max<std::int64_t>(0, config_.target_batch_size - local_.samples_accumulated));
    g.epoch = local_.epoch;
    g.samples_accumulated = local_.samples_accumulated;
    g.eta_next_epoch = dht_now + remaining / ema_.samples_per_second();
    g.next_fetch_time =
        dht_now + std::clamp(config_.default_refresh_period, config_.min_refresh_period, config_.max_refresh_period);
  } else {
    g.num_peers = live.size();
    g.epoch = local_.epoch;
    for (const LocalProgress* p : live) {
      if (p->client_mode) {
        ++g.num_clients;
      } else {
        g.epoch = std::max(g.epoch, p->epoch);
      }
    }
    double speed = ema_.eps();
    double estimated = 0;
    for (const LocalProgress* p : live) {
      speed += p->samples_per_second;
      if (p->epoch == g.epoch) {
        g.samples_accumulated += p->samples_accumulated;
        estimated += static_cast<double>(p->samples_accumulated) + std::max(0.0, dht_now - p->time) * p->samples_per_second;
      }
    }
    const double remaining = static_cast<double>(config_.target_batch_size) - estimated;
    const double eta = std::max(0.0, remaining) / speed;
    const double n = static_cast<double>(g.num_peers);
    const double expected_max_peers = std::max(n + config_.expected_drift_peers, n * (1 + config_.expected_drift_rate));
    const double to_next_fetch =
        std::clamp(eta * n / expected_max_peers, config_.min_refresh_period, config_.max_refresh_period);
    g.eta_next_epoch = dht_now + eta;
    g.next_fetch_time = dht_now + to_next_fetch;
  }
  global_ = g;
  fetched_this_epoch_ = true;
}

bool ProgressTracker::ready_to_update_epoch(double dht_now) const {
  return global_.epoch > local_.epoch || global_.samples_accumulated >= config_.target_batch_size ||
         dht_now >= global_.eta_next_epoch;
}

double ProgressTracker::estimated_next_update_time(double dht_now) const {
  return ready_to_update_epoch(dht_now) ? dht_now : global_.eta_next_epoch;
}

}  // namespace apiary::core::optim
