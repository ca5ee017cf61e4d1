#pragma once
/// The service roles fuzz_services.cpp drives (fuzz/role_driver.hpp), each built small
/// and fixed, with what answers its Asks and starts its local operations from the input.
/// make_seeds.cpp builds the same roles to write seeds in their format.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/averaging/averager_role.hpp"
#include "core/averaging/state_roles.hpp"
#include "core/collective/barrier_role.hpp"
#include "core/collective/group_roles.hpp"
#include "core/dht/msgpack_value.hpp"
#include "core/dht/node_role.hpp"
#include "core/mux.hpp"
#include "core/optim/progress_role.hpp"
#include "core/ping/pinger.hpp"
#include "core/ps/proxy_server.hpp"
#include "core/ps/server.hpp"
#include "core/train/ps_client_role.hpp"
#include "fuzz/role_driver.hpp"

namespace apiary::fuzz {

/// DHT time at the driver's start (its `now` is 1000 s): roles get dht_epoch = this - 1000.
inline constexpr double k_services_dht_now = 1764517126.5;

/// The roles, in the order of the input's choice byte.
enum class Service : std::uint8_t {
  ping, ps_server, ps_proxy, ps_client, collective, averager, state, progress, averager_powersgd, count
};

/// A role with its Ask answers and local calls.
struct DrivenRole {
  std::unique_ptr<core::Role> role;
  AskAnswer answer_ask;
  LocalCallMaker make_call;
};

/// The address of the driven role's own process.
inline const core::PeerAddr& self_addr() {
  static const core::PeerAddr self = [] {
    auto addr = messages::PeerAddress::parse("/ip4/10.0.0.1/tcp/4100");
    if (!addr) __builtin_trap();
    return *addr;
  }();
  return self;
}

/// A DHT node's answer to a NodeOp Ask, from the input: whether the store was accepted,
/// and a found value, nothing, a regular value or a dictionary of up to 3 entries (each:
/// subkey = msgpack bin of a made-up peer's multiaddr or fuzzed bytes, value, expiration
/// a few seconds ahead).
inline Result<core::Value> dht_answer(const core::Ask&, FuzzInput& in) {
  core::dht::OpResult result;
  result.stored = {in.flag()};
  result.replicas = {in.pick(4)};
  switch (in.pick(3)) {
    case 0:
      result.found.emplace_back();
      break;
    case 1:
      result.found.push_back(core::dht::FoundValue{in.bytes(), k_services_dht_now + static_cast<double>(in.number(1))});
      break;
    default: {
      core::dht::FoundValue::Dictionary entries;
      const std::size_t n = in.pick(4);
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t who = in.pick(fuzz_peers().size() + 2);
        std::string subkey = who < fuzz_peers().size() ? core::dht::pack_bin(fuzz_peers()[who].multiaddr())
                                                        : in.bytes();
        std::string value = in.bytes();
        const double expiration = k_services_dht_now + static_cast<double>(in.number(1));
        entries[std::move(subkey)] = core::dht::ValueWithExpiration<std::string>{std::move(value), expiration};
      }
      double latest = k_services_dht_now;
      for (const auto& [subkey, entry] : entries) latest = std::max(latest, entry.expiration_time);
      result.found.push_back(core::dht::FoundValue{std::move(entries), latest});
      break;
    }
  }
  return core::Value::of(std::move(result));
}

/// A few float32 values from the input (0 to 7 of them).
inline std::vector<float> some_floats(FuzzInput& in, std::size_t n) {
  std::vector<float> out(n);
  for (float& v : out) v = static_cast<float>(static_cast<std::int8_t>(in.byte())) / 8.0F;
  return out;
}

inline DrivenRole make_pinger() {
  return {std::make_unique<core::ping::Pinger>(self_addr(), core::ping::Config{}, std::vector<core::PeerAddr>{fuzz_peers()}),
          nullptr, nullptr};
}

/// The shards of one PS device: a dense synchronous "w" of 4 values shared by 2 replicas,
/// an asynchronous sparse "emb" of 4 rows of 2, and a dense "m" with Adam (an optimizer
/// state to read).
inline std::map<std::string, core::ps::Shard> ps_shards() {
  std::map<std::string, core::ps::Shard> shards;
  core::ps::ShardConfig w;
  w.variable = "w";
  w.layout.shape = {4};
  w.replica_hosts = {0, 0};
  core::ps::ShardConfig emb;
  emb.variable = "emb";
  emb.layout.shape = {4, 2};
  emb.sparse = true;
  emb.sync = false;
  emb.replica_hosts = {0, 0};
  core::ps::ShardConfig m;
  m.variable = "m";
  m.layout.shape = {3};
  m.optimizer.kind = core::ps::OptimizerKind::adam;
  m.staleness = 1;
  m.replica_hosts = {0, 1};
  for (const auto* c : {&w, &emb, &m}) {
    auto shard = core::ps::Shard::create(*c, std::vector<float>(static_cast<std::size_t>(c->layout.size()), 0.5F));
    if (!shard) __builtin_trap();
    shards.emplace(c->variable, std::move(*shard));
  }
  return shards;
}

inline DrivenRole make_ps_server() {
  auto server = std::make_unique<core::ps::ShardServer>("localhost:CPU:0", ps_shards());
  return {std::move(server), nullptr, nullptr};
}

inline DrivenRole make_ps_proxy() {
  std::map<std::string, core::PeerAddr> shards{{"w", fuzz_peers()[0]}, {"m", fuzz_peers()[2]}};
  return {std::make_unique<core::ps::ProxyServer>("node0", std::move(shards), 0, std::chrono::seconds(5)), nullptr,
          nullptr};
}

/// A plan of ps_shards()'s three variables on one PS device, for two replicas.
inline std::shared_ptr<const core::ps::TrainingPlan> ps_plan() {
  auto plan = std::make_shared<core::ps::TrainingPlan>();
  auto shards = ps_shards();
  std::size_t id = 0;
  for (const char* name : {"w", "emb", "m"}) {
    const core::ps::Shard& shard = shards.at(name);
    core::ps::PlannedShard planned;
    planned.config = shard.config();
    planned.variable = name;
    planned.device = "localhost:CPU:0";
    plan->shards.push_back(planned);
    core::ps::VariablePlan variable;
    variable.name = name;
    variable.shape = planned.config.layout.shape;
    variable.sparse = planned.config.sparse;
    variable.shards = {id++};
    plan->variables.push_back(variable);
  }
  plan->replicas = {"localhost:GPU:0", "localhost:GPU:1"};
  plan->servers = {"localhost:CPU:0"};
  return plan;
}

/// The PS client's local calls: pull, push (dense "w" and "m", sparse "emb"), optimizer
/// states, leave, watch.
inline std::optional<core::LocalCall> ps_client_call(FuzzInput& in, core::OpId op) {
  switch (in.pick(5)) {
    case 0: return core::LocalCall{op, "", "pull", core::Value::of(core::train::PsPullArgs{})};
    case 1: {
      core::train::PsPushArgs args;
      args.gradients["w"] = some_floats(in, 4);
      args.gradients["m"] = some_floats(in, 3);
      args.gradients["emb"] = core::ps::SparseGradient{{static_cast<std::int64_t>(in.pick(4))}, some_floats(in, 2)};
      args.samples = 1.0 + static_cast<double>(in.pick(4));
      return core::LocalCall{op, "", "push", core::Value::of(std::move(args))};
    }
    case 2: return core::LocalCall{op, "", "optimizer_states", {}};
    case 3: return core::LocalCall{op, "", "leave", {}};
    default: return core::LocalCall{op, "", "watch", {}};
  }
}

inline DrivenRole make_ps_client() {
  core::train::PsClientConfig config;
  config.replica = 0;
  config.plan = ps_plan();
  config.servers = {{"localhost:CPU:0", fuzz_peers()[0]}};
  config.pull_via = {{0, fuzz_peers()[1]}};
  // A PS that goes down is waited for and replayed to (answers of a PS back from a
  // checkpoint come from the input); past the wait, the client fails as without it.
  config.ps_restart_wait = std::chrono::seconds(2);
  config.replay_steps = 3;
  auto role = core::train::PsClientRole::create(std::move(config));
  if (!role) __builtin_trap();
  return {std::move(*role), nullptr, ps_client_call};
}

/// A group of three: this process (rank 0) and two made-up peers.
inline core::collective::GroupConfig group_config() {
  core::collective::GroupConfig config;
  config.job = "job";
  config.rank = 0;
  config.members = {self_addr(), fuzz_peers()[0], fuzz_peers()[1]};
  config.timeout = std::chrono::seconds(2);
  config.part_size_bytes = 64;
  return config;
}

/// The group's local calls: a barrier, a mean, a gather, an all-reduce (op numbers from
/// the input), a stop.
inline std::optional<core::LocalCall> collective_call(FuzzInput& in, core::OpId op) {
  switch (in.pick(5)) {
    case 0:
      return core::LocalCall{op, "barrier", "meet",
                             core::Value::of(core::collective::BarrierMeet{in.pick(4), std::chrono::seconds(5)})};
    case 1: {
      core::collective::ExchangeMeanArgs args;
      args.tensors = {some_floats(in, 3), some_floats(in, 2)};
      if (in.flag()) args.codecs = {pb::FLOAT16};
      return core::LocalCall{op, "exchange", "mean", core::Value::of(std::move(args))};
    }
    case 2: return core::LocalCall{op, "exchange", "gather", core::Value::of(in.bytes())};
    case 3: {
      core::collective::GroupAllReduceArgs args;
      args.op = in.pick(4);
      args.tensors = {some_floats(in, 5)};
      args.identical_results = in.flag();
      return core::LocalCall{op, "allreduce", "allreduce", core::Value::of(std::move(args))};
    }
    default: return core::LocalCall{op, "exchange", "stop", core::Value::of(make_error(errc::cancelled, "stop"))};
  }
}

inline DrivenRole make_collective() {
  auto mux = std::make_unique<core::Mux>();
  if (!core::collective::add_group_roles(*mux, group_config()).ok()) __builtin_trap();
  return {std::move(mux), nullptr, collective_call};
}

/// The averager's local calls: a step (node, client or aux; with or without a trigger),
/// a trigger, a weight, a cancel.
inline std::optional<core::LocalCall> averager_call(FuzzInput& in, core::OpId op) {
  switch (in.pick(4)) {
    case 0: {
      core::averaging::AveragerStep step;
      step.params.group_key = "run.0b";
      step.params.scheduled_time = k_services_dht_now;
      step.params.deadline = k_services_dht_now + 30;
      step.params.schema_hash = "f32x6";
      step.params.gather = in.bytes();
      step.params.target_group_size = 1 + in.pick(3);
      step.params.request_timeout = std::chrono::seconds(3);
      step.params.min_matchmaking_time = std::chrono::seconds(2);
      step.mode = static_cast<core::averaging::AveragingMode>(in.pick(3));
      step.tensors = {some_floats(in, 4), some_floats(in, 2)};
      if (in.flag()) step.codecs = {pb::FLOAT16};
      step.part_size_bytes = 8;
      step.require_trigger = in.flag();
      return core::LocalCall{op, "", core::averaging::k_step_method, core::Value::of(std::move(step))};
    }
    case 1: return core::LocalCall{op, "", core::averaging::k_trigger_method, {}};
    case 2: return core::LocalCall{op, "", core::averaging::k_set_weight_method, core::Value::of(in.real())};
    default: return core::LocalCall{op, "", core::averaging::k_cancel_method, {}};
  }
}

/// An averager; `powersgd`: averaging by PowerSGD, its first tensor (4 values) a 2 x 2
/// matrix of rank 1.
inline DrivenRole make_averager(bool powersgd = false) {
  core::averaging::AveragerRoleConfig config;
  config.peer_id = self_addr().multiaddr();
  config.dht_epoch = k_services_dht_now - 1000;
  if (powersgd) config.powersgd = core::averaging::PowerSgdConfig{1, {{2, 2}, {0, 0}}, 5};
  std::uint64_t state = 7;
  return {std::make_unique<core::averaging::AveragerRole>(config, [state]() mutable { return state += 0x9e3779b97f4a7c15ULL; }),
          dht_answer, averager_call};
}

/// The state roles' local calls: a download (from the made-up peers, float32 only or
/// any dtype, shapes expected or not), a new priority.
inline std::optional<core::LocalCall> state_call(FuzzInput& in, core::OpId op) {
  if (in.flag()) {
    core::averaging::StateLoaderConfig config;
    config.donors = {fuzz_peers()[0], fuzz_peers()[2]};
    config.any_dtype = in.flag();
    if (in.flag()) config.expected_shapes = std::vector<messages::Shape>{{2, 2}, {3}};
    config.max_state_bytes = in.flag() ? 64 : 0;
    return core::LocalCall{op, "loading", core::averaging::k_load_method, core::Value::of(std::move(config))};
  }
  std::optional<double> priority;
  if (in.flag()) priority = in.real();
  return core::LocalCall{op, "sharing", core::averaging::k_set_priority_method, core::Value::of(priority)};
}

inline DrivenRole make_state() {
  core::averaging::StateSharingConfig sharing;
  sharing.peer_id = self_addr().multiaddr();
  sharing.prefix = "run";
  sharing.priority = 1.0;
  sharing.state_stream = [] {
    return core::averaging::make_state_stream("meta", {{1, 2, 3, 4}, {5, 6, 7}}, {{2, 2}, {3}}, pb::NONE, 8);
  };
  auto mux = std::make_unique<core::Mux>();
  if (!mux->add("sharing", std::make_unique<core::averaging::StateSharingRole>(std::move(sharing))).ok()) {
    __builtin_trap();
  }
  if (!mux->add("loading", std::make_unique<core::averaging::StateLoadingRole>()).ok()) __builtin_trap();
  mux->reach("dht");
  return {std::move(mux), dht_answer, state_call};
}

/// The progress role's local calls: a report, an epoch update, a look, a fetch, a leave,
/// a pause or resume.
inline std::optional<core::LocalCall> progress_call(FuzzInput& in, core::OpId op) {
  switch (in.pick(6)) {
    case 0: {
      core::optim::ProgressReport report{static_cast<std::int64_t>(in.pick(4)),
                                         static_cast<std::int64_t>(in.number(2)), in.flag()};
      return core::LocalCall{op, "", core::optim::k_report_method, core::Value::of(report)};
    }
    case 1: {
      std::optional<std::int64_t> epoch;
      if (in.flag()) epoch = static_cast<std::int64_t>(in.pick(8));
      return core::LocalCall{op, "", core::optim::k_update_epoch_method, core::Value::of(epoch)};
    }
    case 2: return core::LocalCall{op, "", core::optim::k_look_method, {}};
    case 3: return core::LocalCall{op, "", core::optim::k_fetch_method, {}};
    case 4: return core::LocalCall{op, "", core::optim::k_leave_method, {}};
    default: return core::LocalCall{op, "", core::optim::k_pause_method, core::Value::of(in.flag())};
  }
}

inline DrivenRole make_progress() {
  core::optim::ProgressRoleConfig config;
  config.run_id = "run";
  config.tracker.target_batch_size = 64;
  config.peer_id = "peer-self";
  config.owner_marker = "[owner:self]";
  config.dht_epoch = k_services_dht_now - 1000;
  return {std::make_unique<core::optim::ProgressRole>(std::move(config)), dht_answer, progress_call};
}

/// The role of `service`.
inline DrivenRole make_service(Service service) {
  switch (service) {
    case Service::ping: return make_pinger();
    case Service::ps_server: return make_ps_server();
    case Service::ps_proxy: return make_ps_proxy();
    case Service::ps_client: return make_ps_client();
    case Service::collective: return make_collective();
    case Service::averager: return make_averager();
    case Service::state: return make_state();
    case Service::averager_powersgd: return make_averager(true);
    default: return make_progress();
  }
}

}  // namespace apiary::fuzz
