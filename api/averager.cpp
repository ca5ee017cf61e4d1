#include "api/averager.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <utility>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "api/startup.hpp"
#include "actors/device/device_actor.hpp"
#include "actors/device/device_route.hpp"
#include "actors/gateway.hpp"
#include "actors/role_actor.hpp"
#include "actors/type_ids.hpp"
#include "core/averaging/group_key.hpp"
#include "core/averaging/state_roles.hpp"
#include "core/averaging/state_sharing.hpp"
#include "core/dht/msgpack_value.hpp"
#include "core/mux.hpp"
#include "core/rng.hpp"
#include "messages/tensor/codec.hpp"

namespace apiary {

namespace mm = core::averaging;

struct Averager::Impl {
  AveragerOptions options;
  std::shared_ptr<actors::Gateway> gateway;
  caf::actor actor;                  ///< the role host: averager, state sharing, state loading
  std::vector<std::string> handles;  ///< what it serves
  std::optional<actors::device_actor> device;  ///< where part reductions run (if not in the role)
  caf::actor device_route;                     ///< the device as the roles' "device"
  caf::actor_system* system = nullptr;
  mutable std::mutex mutex;  ///< guards options.tensors and group_key
  std::string group_key;
  std::string schema_hash;
  std::string metadata;  ///< sent with this peer's state ("": msgpack str of the group key)
  /// Whether options.tensors mirrors device_tensors between steps: only the default shared
  /// state needs it; otherwise the device memory is read when needed (one copy fewer).
  bool keep_mirror = true;
  bool sharing = false;  ///< started with a state_sharing_priority (it may change, not begin later)
};

namespace {

/// The T a role's call completed with; null once `promise` is set to why there is none
/// (the call's error, or an internal one naming `missing` when it answered with
/// something else).
template <class T, class Promise>
T* completed_as(Result<core::Value>& outcome, Promise& promise, const char* missing) {
  if (!outcome) {
    promise.set_value(outcome.error());
    return nullptr;
  }
  auto* result = outcome->as<T>();
  if (result == nullptr) promise.set_value(make_error(errc::internal, "{}", missing));
  return result;
}

core::Duration seconds(double s) {
  return std::chrono::duration_cast<core::Duration>(std::chrono::duration<double>(s));
}

/// A handle of the averager with `prefix`: "<prefix>::<base>".
std::string prefixed_handle(const std::string& prefix, const char* base) { return fmt::format("{}::{}", prefix, base); }

/// What every groupmate must agree on: element counts and codecs.
std::string schema_of(const AveragerOptions& options) {
  std::string out = "float32";
  for (const auto& t : options.tensors) out += fmt::format(":{}", t.size());
  out += "|codecs";
  for (auto codec : options.codecs) out += fmt::format(":{}", static_cast<int>(codec));
  if (options.powersgd) {
    out += fmt::format("|powersgd:{}:{}", options.powersgd->rank, options.powersgd->seed);
    for (const auto& m : options.powersgd->matrices) out += fmt::format(":{}x{}", m.rows, m.cols);
  }
  return out;
}

Status check(const AveragerOptions& o) {
  auto key = mm::make_group_key(o.prefix, o.initial_group_bits);
  if (!key) return key.error();
  if (o.tensors.empty() && o.device_tensors.empty()) {
    return make_error(errc::invalid_argument, "expected at least one tensor to average, got none");
  }
  if (!o.device_tensors.empty()) {
    if (!o.tensors.empty()) {
      return make_error(errc::invalid_argument, "expected tensors or device_tensors, got both ({} and {})",
                        o.tensors.size(), o.device_tensors.size());
    }
    if (o.reduce_on != ReduceOn::cpu && o.reduce_on != ReduceOn::gpu) {
      return make_error(errc::invalid_argument,
                        "device_tensors live in the memory of one device actor: expected reduce_on cpu "
                        "(host memory) or gpu (that GPU's memory), got automatic or in_role");
    }
    for (std::size_t t = 0; t < o.device_tensors.size(); ++t) {
      if (o.device_tensors[t].data == nullptr && o.device_tensors[t].size > 0) {
        return make_error(errc::invalid_argument, "device tensor {} has {} elements but a null pointer", t,
                          o.device_tensors[t].size);
      }
    }
  }
  if (o.min_group_size < 1) return make_error(errc::invalid_argument, "expected min_group_size >= 1, got 0");
  if (o.target_group_size != 0 && o.target_group_size < o.min_group_size) {
    return make_error(errc::invalid_argument, "expected target_group_size 0 or >= min_group_size {}, got {}",
                      o.min_group_size, o.target_group_size);
  }
  if (o.identical_results && (o.averaging_alpha != 1.0 || o.mode == mm::AveragingMode::aux)) {
    return make_error(errc::invalid_argument, "expected averaging_alpha 1 and a sending mode with identical_results "
                                              "(the averages are written as they are), got alpha {}{}",
                      o.averaging_alpha, o.mode == mm::AveragingMode::aux ? " and mode aux" : "");
  }
  if (!(o.averaging_alpha > 0) || !std::isfinite(o.averaging_alpha)) {
    return make_error(errc::invalid_argument, "expected averaging_alpha > 0, got {}", o.averaging_alpha);
  }
  if (!(o.min_matchmaking_time > 0) || !(o.request_timeout > 0) || !(o.sender_timeout > 0) ||
      !(o.reducer_timeout > o.sender_timeout)) {
    return make_error(errc::invalid_argument,
                      "expected min_matchmaking_time, request_timeout, sender_timeout > 0 and "
                      "reducer_timeout > sender_timeout, got {}, {}, {}, {} s",
                      o.min_matchmaking_time, o.request_timeout, o.sender_timeout, o.reducer_timeout);
  }
  const std::size_t count = o.device_tensors.empty() ? o.tensors.size() : o.device_tensors.size();
  if (o.powersgd) {
    if (o.identical_results) {
      return make_error(errc::invalid_argument, "expected PowerSGD or identical_results, got both (every peer "
                                                "computes its own low-rank result)");
    }
    std::vector<std::int64_t> sizes;
    for (std::size_t t = 0; t < count; ++t) {
      sizes.push_back(static_cast<std::int64_t>(o.device_tensors.empty() ? o.tensors[t].size()
                                                                         : o.device_tensors[t].size));
    }
    if (auto valid = mm::validate(*o.powersgd, sizes); !valid) return valid;
  }
  if (o.codecs.size() != 1 && o.codecs.size() != count) {
    return make_error(errc::invalid_argument, "expected one codec, or one per tensor ({}), got {}", count,
                      o.codecs.size());
  }
  if (o.state_codecs.size() > 1 && o.state_codecs.size() != count) {
    return make_error(errc::invalid_argument, "expected no state codec, one, or one per tensor ({}), got {}", count,
                      o.state_codecs.size());
  }
  return ok_status();
}

/// The device tensors' values, read through the device actor (blocking).
Result<std::vector<std::vector<float>>> read_device_tensors(caf::actor_system& sys, const actors::device_actor& dev,
                                                            const std::vector<DeviceTensor>& tensors) {
  caf::scoped_actor self{sys};
  std::vector<std::vector<float>> out;
  for (const DeviceTensor& t : tensors) {
    Result<std::vector<float>> values = make_error(errc::unavailable, "the device actor did not answer a read");
    self->request(dev, caf::infinite, actors::read_request{t.data, t.size})
        .receive([&](Result<std::vector<float>>& r) { values = std::move(r); },
                 [&](caf::error& e) {
                   values = make_error(errc::unavailable, "the device actor failed a read: {}", sys.render(e));
                 });
    if (!values) return values.error();
    out.push_back(std::move(*values));
  }
  return out;
}

/// tensor += alpha * delta on the device, per device tensor (blocking); with
/// `overwrite`, tensor = the values given.
Status add_to_device_tensors(caf::actor_system& sys, const actors::device_actor& dev,
                             const std::vector<DeviceTensor>& tensors, std::vector<std::vector<float>> deltas,
                             double alpha, bool overwrite = false) {
  caf::scoped_actor self{sys};
  for (std::size_t t = 0; t < tensors.size() && t < deltas.size(); ++t) {
    Status done = make_error(errc::unavailable, "the device actor did not answer an update");
    self->request(dev, caf::infinite,
                  actors::add_scaled_request{tensors[t].data, std::move(deltas[t]), static_cast<float>(alpha), overwrite})
        .receive([&](Status& r) { done = std::move(r); },
                 [&](caf::error& e) {
                   done = make_error(errc::unavailable, "the device actor failed an update: {}", sys.render(e));
                 });
    if (!done) return done;
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<Averager>> Averager::start(Dht& dht, AveragerOptions options) {
  const api::CafThreadRelease released;
  if (auto status = check(options); !status) return status.error();
  std::unique_ptr<Averager> averager(new Averager());
  averager->impl_ = std::make_shared<Impl>();
  Impl& impl = *averager->impl_;
  averager->id_ = dht.address().to_string();
  impl.group_key = mm::make_group_key(options.prefix, options.initial_group_bits).value();
  impl.schema_hash = schema_of(options);
  impl.gateway = dht.gateway();
  mm::AveragerRoleConfig role;
  role.peer_id = averager->id_;
  role.dht_epoch = dht.runtime().dht_epoch();  // DHT time is the DHT node's
  role.caller = dht.peer_id().bytes();
  role.serve_join = options.mode != mm::AveragingMode::client;
  role.splice_parts = true;  // the gateway sends a part's pieces as they are
  role.identical_results = options.identical_results;
  role.powersgd = options.powersgd;
  // Addressed by PeerID: other averagers may share this gateway (its DHT node's does).
  const core::Addressing addressing(dht.peer_id(), dht.runtime().shares_gateway());
  role.addressing = addressing;
  // Handles carry the prefix (hivemind's "<prefix>::DecentralizedAverager.rpc_*"): the
  // averagers of one node (a trainer's gradient and state averagers) serve apart.
  role.part_handle = prefixed_handle(options.prefix, mm::k_aggregate_part_handle);
  role.join_handle = prefixed_handle(options.prefix, mm::k_join_handle);
  std::uint64_t seed = options.seed;
  if (seed == 0) {
    for (char c : dht.peer_id().bytes()) seed = seed * 1099511628211ULL ^ static_cast<unsigned char>(c);
  }
  mm::StateSharingConfig sharing;
  sharing.peer_id = averager->id_;
  sharing.prefix = options.prefix;
  sharing.priority = options.state_sharing_priority;
  sharing.declare_period = options.declare_state_period;
  sharing.addressing = addressing;
  sharing.handle = prefixed_handle(options.prefix, mm::k_download_state_handle);
  if (options.state_sharing_priority && options.current_state) {
    sharing.state_stream = [provide = options.current_state]() -> Result<std::vector<std::string>> {
      auto state = provide();
      if (!state) return state.error();
      return mm::make_state_stream(state->metadata, state->tensors);
    };
  } else if (options.state_sharing_priority) {
    std::weak_ptr<Impl> weak = averager->impl_;
    sharing.state_stream = [weak]() -> Result<std::vector<std::string>> {
      auto raw = weak.lock();
      if (!raw) return make_error(errc::cancelled, "expected a running averager to share its state, but it stopped");
      std::vector<std::vector<float>> tensors;
      std::string metadata;
      std::vector<pb::CompressionType> codecs;
      {
        std::lock_guard<std::mutex> lock(raw->mutex);
        tensors = raw->options.tensors;
        metadata = raw->metadata.empty() ? core::dht::pack_str(raw->group_key) : raw->metadata;
        codecs = raw->options.state_codecs;
      }
      if (codecs.size() <= 1) {
        const pb::CompressionType codec = codecs.empty() ? pb::NONE : codecs.front();
        std::vector<messages::Shape> shapes;
        for (const auto& t : tensors) shapes.push_back({static_cast<std::uint32_t>(t.size())});
        return mm::make_state_stream(metadata, tensors, shapes, codec);
      }
      std::vector<pb::Tensor> encoded;
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        auto tensor = messages::Tensor::copy_of(messages::dtype::float32, {static_cast<std::uint32_t>(tensors[i].size())},
                                                tensors[i].data(), tensors[i].size() * sizeof(float));
        if (!tensor) return tensor.error();
        auto message = messages::encode(*tensor, codecs[i]);
        if (!message) return message.error();
        encoded.push_back(std::move(*message));
      }
      return mm::make_state_stream(metadata, encoded);
    };
  }
  switch (options.reduce_on) {
    case ReduceOn::automatic:
      impl.device = actors::spawn_device_actor(dht.system(), options.gpu);
      break;
    case ReduceOn::cpu:
      impl.device = actors::spawn_cpu_device_actor(dht.system());
      break;
    case ReduceOn::gpu: {
      auto gpu = actors::spawn_cuda_device_actor(dht.system(), options.gpu);
      if (!gpu) return gpu.error();
      impl.device = *gpu;
      break;
    }
    case ReduceOn::in_role:
      break;
  }
  impl.system = &dht.system();
  if (!options.device_tensors.empty()) {
    auto mirror = read_device_tensors(dht.system(), *impl.device, options.device_tensors);
    if (!mirror) {
      caf::anon_send_exit(*impl.device, caf::exit_reason::user_shutdown);
      return mirror.error();
    }
    options.tensors = std::move(*mirror);
    impl.schema_hash = schema_of(options);
    impl.keep_mirror = options.state_sharing_priority.has_value() && !options.current_state;
    if (!impl.keep_mirror) options.tensors.clear();
  }
  impl.sharing = options.state_sharing_priority.has_value();
  averager->dht_ = &dht;
  averager->runtime_ = dht.own_runtime();
  impl.options = std::move(options);
  actors::RoleRoutes routes{{"dht", dht.host()}};
  auto mux = std::make_unique<core::Mux>();
  mux->reach("dht");
  if (impl.device) {
    role.device_role = "device";
    impl.device_route = actors::spawn_device_route(dht.system(), *impl.device);
    routes.emplace("device", impl.device_route);
    mux->reach("device");
  }
  auto rng = std::make_shared<core::Rng>(seed);
  (void)mux->add("averager", std::make_unique<mm::AveragerRole>(std::move(role), [rng] { return rng->next_u64(); }));
  (void)mux->add("state", std::make_unique<mm::StateSharingRole>(std::move(sharing)));
  (void)mux->add("loader", std::make_unique<mm::StateLoadingRole>(dht.peer_id().bytes(), addressing));
  impl.handles = mux->handles();
  impl.actor = actors::spawn_role_actor(dht.system(), impl.gateway, std::move(mux), std::move(routes));
  return averager;
}

Averager::~Averager() {
  if (impl_ && impl_->actor) actors::stop_role_actor(*impl_->gateway, impl_->actor, impl_->handles);
  if (impl_ && impl_->device_route) caf::anon_send_exit(impl_->device_route, caf::exit_reason::user_shutdown);
  if (impl_ && impl_->device) caf::anon_send_exit(*impl_->device, caf::exit_reason::user_shutdown);
}

std::future<Result<AveragerStepReport>> Averager::step(const AveragerStepOptions& options) {
  auto promise = std::make_shared<std::promise<Result<AveragerStepReport>>>();
  auto future = promise->get_future();
  if (!std::isfinite(options.weight) || options.weight < 0 || !(options.timeout > 0) || options.scheduled_in < 0) {
    promise->set_value(make_error(errc::invalid_argument,
                                  "expected weight >= 0, timeout > 0 and scheduled_in >= 0, got {}, {} s, {} s",
                                  options.weight, options.timeout, options.scheduled_in));
    return future;
  }
  const AveragerOptions& o = impl_->options;
  const double now = Dht::now();
  mm::AveragerStep s;
  s.params.scheduled_time = now + options.scheduled_in;
  s.params.deadline = now + options.timeout;
  s.params.weight = options.weight;
  s.params.gather = options.gather;
  s.params.target_group_size = o.target_group_size;
  s.params.min_group_size = o.min_group_size;
  s.params.min_matchmaking_time = seconds(o.min_matchmaking_time);
  s.params.request_timeout = seconds(o.request_timeout);
  s.params.schema_hash = impl_->schema_hash;
  s.mode = o.mode;
  s.bandwidth = o.bandwidth;
  s.codecs = o.codecs;
  s.part_size_bytes = o.part_size_bytes;
  s.min_vector_size = o.min_vector_size;
  s.sender_timeout = seconds(o.sender_timeout);
  s.reducer_timeout = seconds(o.reducer_timeout);
  s.call_timeout = seconds(options.timeout + o.reducer_timeout);
  s.require_trigger = options.require_trigger;
  if (!o.device_tensors.empty()) {
    // The device holds the tensors: the step sends what they hold now.
    auto mirror = read_device_tensors(*impl_->system, *impl_->device, o.device_tensors);
    if (!mirror) {
      promise->set_value(mirror.error());
      return future;
    }
    std::lock_guard<std::mutex> lock(impl_->mutex);
    s.params.group_key = impl_->group_key;
    if (impl_->keep_mirror) impl_->options.tensors = *mirror;
    s.tensors = std::move(*mirror);
  } else {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    s.params.group_key = impl_->group_key;
    s.tensors = impl_->options.tensors;
  }
  for (const auto& t : s.tensors) s.tensor_sizes.push_back(static_cast<std::int64_t>(t.size()));
  std::shared_ptr<Impl> impl = impl_;
  actors::call_role(impl_->actor, "averager", mm::k_step_method, core::Value::of(std::move(s)),
                    [impl, promise](Result<core::Value> outcome) {
    auto* result =
        completed_as<mm::AveragerStepResult>(outcome, *promise, "the averager's step completed without its result");
    if (result == nullptr) return;
    mm::AveragerStepResult& r = *result;
    AveragerStepReport report;
    {
      // The host copy first (it reads the deltas), then the device, which takes them.
      std::lock_guard<std::mutex> lock(impl->mutex);
      const double alpha = impl->options.averaging_alpha;
      auto& tensors = impl->options.tensors;
      for (std::size_t t = 0; t < tensors.size() && t < r.deltas.size(); ++t) {
        for (std::size_t i = 0; i < tensors[t].size() && i < r.deltas[t].size(); ++i) {
          tensors[t][i] += static_cast<float>(alpha * r.deltas[t][i]);
        }
      }
      for (std::size_t t = 0; t < tensors.size() && t < r.averages.size(); ++t) {  // identical_results
        if (tensors[t].size() == r.averages[t].size()) tensors[t] = r.averages[t];
      }
      if (!r.group.next_group_key.empty()) impl->group_key = r.group.next_group_key;
    }
    if (!impl->options.device_tensors.empty()) {
      const bool written = !r.averages.empty();  // identical_results: the averages, as they are
      auto updated = add_to_device_tensors(*impl->system, *impl->device, impl->options.device_tensors,
                                           written ? std::move(r.averages) : std::move(r.deltas),
                                           impl->options.averaging_alpha, written);
      if (!updated) {
        promise->set_value(updated.error());
        return;
      }
    }
    report.group_id = r.group.group_id;
    report.peers = r.group.peers;
    report.gathered = r.group.gathered;
    report.my_index = r.group.my_index;
    report.shares = r.shares;
    report.failed_senders = messages::multiaddrs_of(r.failed_senders);
    report.failed_reducers = messages::multiaddrs_of(r.failed_reducers);
    report.attempts = r.attempts;
    report.next_group_key = r.group.next_group_key;
    promise->set_value(std::move(report));
  });
  return future;
}

void Averager::trigger() {
  // The step averages the tensors as they are now (a pre-scheduled step was begun before
  // the trainer filled them).
  std::vector<std::vector<float>> now;
  if (!impl_->options.device_tensors.empty()) {
    auto mirror = read_device_tensors(*impl_->system, *impl_->device, impl_->options.device_tensors);
    if (mirror) {
      std::lock_guard<std::mutex> lock(impl_->mutex);
      if (impl_->keep_mirror) impl_->options.tensors = *mirror;
      now = std::move(*mirror);
    }
  } else {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    now = impl_->options.tensors;
  }
  actors::call_role(impl_->actor, "averager", mm::k_trigger_method,
                    now.empty() ? core::Value{} : core::Value::of(std::move(now)), nullptr);
}

void Averager::cancel() { actors::call_role(impl_->actor, "averager", mm::k_cancel_method, {}, nullptr); }

bool Averager::set_weight(double weight) {
  auto future = actors::call_role(impl_->actor, "averager", mm::k_set_weight_method, core::Value::of(weight));
  if (future.wait_for(std::chrono::seconds(5)) != std::future_status::ready) return false;
  auto changed = future.get();
  return changed.ok() && changed->as<bool>() != nullptr && *changed->as<bool>();
}

Status Averager::set_state_sharing_priority(std::optional<double> priority) {
  if (priority && !impl_->sharing) {
    return make_error(errc::invalid_argument, "expected an averager started with a state_sharing_priority, but this "
                                              "one does not share its state; start it sharing to change its priority");
  }
  auto future = actors::call_role(impl_->actor, "state", mm::k_set_priority_method, core::Value::of(priority));
  if (future.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    return make_error(errc::deadline_exceeded, "the averager did not take the new priority within 5 s");
  }
  auto done = future.get();
  if (!done) return done.error();
  return ok_status();
}

std::future<Result<AveragerState>> Averager::load_state_from_peers(double timeout, bool any_state) {
  auto promise = std::make_shared<std::promise<Result<AveragerState>>>();
  auto future = promise->get_future();
  const std::string key = mm::state_sharing_key(impl_->options.prefix);
  auto found = dht_->get(DhtKey::str(key), true).get();
  if (!found) {
    promise->set_value(found.error());
    return future;
  }
  std::vector<mm::StateDonor> donors;
  if (found->has_value()) {
    if (const auto* dict = std::get_if<core::dht::FoundValue::Dictionary>(&(*found)->value)) {
      donors = mm::order_state_donors(*dict, id_, Dht::now());
    }
  }
  if (donors.empty()) {
    promise->set_value(make_error(errc::not_found, "expected a peer sharing its state under {}, found none; "
                                                   "start one with state_sharing_priority set", key));
    return future;
  }
  mm::StateLoaderConfig config;
  for (const auto& donor : donors) config.donors.push_back(mm::address_of_multiaddr(donor.peer));
  config.handle = prefixed_handle(impl_->options.prefix, mm::k_download_state_handle);
  config.call_timeout = seconds(timeout);
  config.chunk_timeout = seconds(std::min(timeout, 15.0));
  if (any_state) {
    config.any_dtype = true;
  } else {
    std::vector<messages::Shape> shapes;
    if (impl_->options.device_tensors.empty()) {
      for (const auto& t : tensors()) shapes.push_back({static_cast<std::uint32_t>(t.size())});
    } else {
      for (const auto& t : impl_->options.device_tensors) shapes.push_back({static_cast<std::uint32_t>(t.size)});
    }
    config.expected_shapes = shapes;
  }
  std::shared_ptr<Impl> impl = impl_;
  actors::call_role(impl_->actor, "loader", mm::k_load_method, core::Value::of(std::move(config)),
                    [impl, promise](Result<core::Value> loaded) {
    auto* r = completed_as<mm::DownloadedState>(loaded, *promise, "the state download completed without a state");
    if (r == nullptr) return;
    if (!r->typed.empty() || r->tensors.empty()) {
      promise->set_value(AveragerState{std::move(r->metadata), r->donor.multiaddr(), std::move(r->typed)});
      return;
    }
    {
      std::lock_guard<std::mutex> lock(impl->mutex);
      impl->options.tensors = std::move(r->tensors);
      impl->keep_mirror = true;  // the host copy holds the state now (device memory is the trainer's)
    }
    promise->set_value(AveragerState{std::move(r->metadata), r->donor.multiaddr(), {}});
  });
  return future;
}

void Averager::set_state_metadata(std::string metadata) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->metadata = std::move(metadata);
}

void Averager::with_tensors(const std::function<void(std::vector<std::vector<float>>&)>& fn) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  fn(impl_->options.tensors);
}

std::vector<std::vector<float>> Averager::tensors() const {
  bool mirrored = true;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    mirrored = impl_->keep_mirror;
  }
  if (!impl_->options.device_tensors.empty() && !mirrored) {
    auto now = read_device_tensors(*impl_->system, *impl_->device, impl_->options.device_tensors);
    if (now) return std::move(*now);
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->options.tensors;
}

std::string Averager::group_key() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->group_key;
}

std::pair<std::uint64_t, std::uint64_t> Averager::transport_bytes() const {
  const transport::Stats s = impl_->gateway->transport_stats();
  return {s.bytes_sent, s.bytes_received};
}

double RoundClock::wait_for_round(double lead) {
  const double now = Dht::now();
  const double boundary = std::max(std::ceil((now + lead) / every_) * every_, last_ + every_);
  last_ = boundary;
  const double wait = boundary - lead - now;
  if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  return std::max(0.0, boundary - Dht::now());
}

}  // namespace apiary
