#include "api/progress.hpp"

#include <mutex>
#include <utility>

#include <caf/all.hpp>

#include "api/startup.hpp"
#include "actors/gateway.hpp"
#include "actors/role_actor.hpp"
#include "actors/type_ids.hpp"
#include "core/dht/ownership_validator.hpp"
#include "core/dht/schema_validator.hpp"

namespace apiary {

namespace optim = core::optim;

namespace {

/// The process's ownership key for trackers started without one.
Result<messages::Ed25519PrivateKey> process_key() {
  static std::mutex mutex;
  static std::optional<messages::Ed25519PrivateKey> key;
  std::lock_guard<std::mutex> lock(mutex);
  if (!key) {
    auto fresh = messages::Ed25519PrivateKey::generate();
    if (!fresh) return fresh.error();
    key = std::move(*fresh);
  }
  return *key;
}

template <class T>
Result<T> value_as(Result<core::Value> r, const char* what) {
  if (!r) return r.error();
  const T* v = r->as<T>();
  if (v == nullptr) return make_error(errc::internal, "the progress tracker answered {} with a {}", what, r->type_name());
  return *v;
}

}  // namespace

Result<std::unique_ptr<ProgressTracker>> ProgressTracker::start(Dht& dht, ProgressTrackerOptions options) {
  const api::CafThreadRelease released;
  if (options.run_id.empty()) return make_error(errc::invalid_argument, "expected a non-empty run_id (the prefix)");
  if (auto ok = options.tracker.validate(); !ok) return ok.error();
  if (!options.owner_key) {
    auto key = process_key();
    if (!key) return key.error();
    options.owner_key = std::move(*key);
  }
  auto owner = std::make_unique<core::dht::OwnershipValidator>(*options.owner_key);
  const std::string marker = owner->own_marker();
  core::dht::SchemaOptions schema_options;
  schema_options.prefix = options.run_id;
  schema_options.allow_extra_keys = true;  // the node keeps serving other keys
  std::vector<std::unique_ptr<core::dht::RecordValidator>> validators;
  validators.push_back(std::move(owner));
  validators.push_back(std::make_unique<core::dht::SchemaValidator>(
      std::vector<core::dht::SchemaField>{optim::progress_schema_field()}, schema_options));
  if (auto added = dht.add_validators(std::move(validators)); !added) return added.error();

  optim::ProgressRoleConfig config;
  config.run_id = options.run_id;
  config.tracker = options.tracker;
  config.peer_id = dht.peer_id().bytes();
  config.owner_marker = marker;
  config.dht_epoch = dht.runtime().dht_epoch();
  std::unique_ptr<ProgressTracker> tracker(new ProgressTracker());
  tracker->runtime_ = dht.own_runtime();
  tracker->gateway_ = dht.gateway();
  tracker->owner_marker_ = marker;
  tracker->actor_ = std::make_shared<caf::actor>(actors::spawn_role_actor(
      dht.system(), dht.gateway(), std::make_unique<optim::ProgressRole>(config), actors::RoleRoutes{{"dht", dht.host()}}));
  return tracker;
}

ProgressTracker::~ProgressTracker() {
  if (!actor_) return;
  if (!left_) (void)leave(std::chrono::seconds(1));
  actors::stop_role_actor(*gateway_, *actor_, {});
  actor_.reset();  // before the runtime, which may go with this tracker
}

Result<core::Value> ProgressTracker::call(const char* method, core::Value args, std::chrono::milliseconds patience) {
  auto future = actors::call_role(*actor_, "", method, std::move(args));
  if (future.wait_for(patience) != std::future_status::ready) {
    return make_error(errc::deadline_exceeded, "the progress tracker did not answer '{}' within {} ms", method,
                      patience.count());
  }
  return future.get();
}

Result<ProgressSnapshot> ProgressTracker::report(std::int64_t epoch, std::int64_t samples_accumulated,
                                                 bool update_global_samples) {
  if (epoch < 0 || samples_accumulated < 0) {
    return make_error(errc::invalid_argument, "expected epoch and samples_accumulated >= 0, got {} and {}", epoch,
                      samples_accumulated);
  }
  return value_as<ProgressSnapshot>(
      call(optim::k_report_method, core::Value::of(optim::ProgressReport{epoch, samples_accumulated, update_global_samples}),
           std::chrono::seconds(10)),
      "a report");
}

Result<std::int64_t> ProgressTracker::update_epoch(std::optional<std::int64_t> epoch) {
  return value_as<std::int64_t>(call(optim::k_update_epoch_method, core::Value::of(epoch), std::chrono::seconds(10)),
                                "update_epoch");
}

Result<ProgressSnapshot> ProgressTracker::look() {
  return value_as<ProgressSnapshot>(call(optim::k_look_method, {}, std::chrono::seconds(10)), "a look");
}

Result<ProgressSnapshot> ProgressTracker::fetch(std::chrono::milliseconds patience) {
  return value_as<ProgressSnapshot>(call(optim::k_fetch_method, {}, patience), "a fetch");
}

Status ProgressTracker::pause(bool paused) {
  auto done = call(optim::k_pause_method, core::Value::of(paused), std::chrono::seconds(10));
  if (!done) return done.error();
  return ok_status();
}

Result<bool> ProgressTracker::leave(std::chrono::milliseconds patience) {
  left_ = true;
  return value_as<bool>(call(optim::k_leave_method, {}, patience), "leave");
}

}  // namespace apiary
