#include "sim/scenarios/averaging_host.hpp"

#include <memory>
#include <utility>

#include "core/dht/node_role.hpp"
#include "core/rng.hpp"
#include "sim/scenarios/modelled_device.hpp"

namespace apiary::sim::scenarios {

namespace mm = core::averaging;
using core::Effects;
using core::TimePoint;

namespace {

void append(Effects& out, Effects more) {
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

/// The roles of one simulated averager.
core::Mux roles_of(core::dht::NodeId id, const core::PeerAddr& self, const AveragerSettings& settings,
                   std::uint64_t seed) {
  core::Mux mux;
  core::dht::NodeConfig node = settings.node;
  node.seed = seed ^ 0x5bd1e995u;
  core::dht::NodeRoleConfig dht;
  dht.addressed = false;  // every simulated address is one node
  (void)mux.add("dht", std::make_unique<core::dht::NodeRole>(
                           std::make_unique<core::dht::Node>(id, self, std::move(node), nullptr, settings.dht_epoch), dht));
  mm::AveragerRoleConfig config;
  config.peer_id = self.multiaddr();
  config.dht_epoch = settings.dht_epoch;
  if (settings.device_ns_per_value > 0) config.device_role = "device";
  config.powersgd = settings.powersgd;
  auto rng = std::make_shared<core::Rng>(seed);
  (void)mux.add("averager", std::make_unique<mm::AveragerRole>(std::move(config), [rng] { return rng->next_u64(); }));
  if (settings.device_ns_per_value > 0) {
    (void)mux.add("device", std::make_unique<ModelledDevice>(settings.device_ns_per_value));
  }
  return mux;
}

}  // namespace

AveragerHost::AveragerHost(core::dht::NodeId id, core::PeerAddr self, const AveragerSettings& settings,
                           std::uint64_t seed, std::vector<float> values,
                           std::vector<core::PeerAddr> bootstrap)
    : RoleHost<core::Mux>(roles_of(id, self, settings, seed)),
      settings_(settings),
      bootstrap_(std::move(bootstrap)),
      values_(std::move(values)) {
  averager_ = static_cast<const mm::AveragerRole*>(role().find("averager"));
}

PeerRound AveragerHost::round(std::size_t round) const {
  auto it = rounds_.find(round);
  return it == rounds_.end() ? PeerRound{} : it->second;
}

Effects AveragerHost::on_start(TimePoint now) {
  Effects out = RoleHost<core::Mux>::on_start(now);
  core::dht::NodeOp start = [bootstrap = bootstrap_](core::dht::Node& node, TimePoint at, core::dht::OpId op) {
    return node.start(at, op, bootstrap);
  };
  append(out, call(now, "dht", core::dht::k_run_method, core::Value::of(std::move(start)),
                   [this](Result<core::Value>) { bootstrapped_ = true; }));
  return out;
}

Effects AveragerHost::begin_round(TimePoint now, std::size_t round, mm::StepParams params) {
  // Leave what is left of the previous round (nothing happens when the averager is idle).
  Effects out = call(now, "averager", mm::k_cancel_method, {}, nullptr);
  rounds_[round].started = true;
  mm::AveragerStep step;
  step.params = std::move(params);
  step.tensors = {values_};
  step.part_size_bytes = settings_.part_size_bytes;
  step.sender_timeout = settings_.sender_timeout;
  step.reducer_timeout = settings_.reducer_timeout;
  step.call_timeout = settings_.call_timeout;
  append(out, call(now, "averager", mm::k_step_method, core::Value::of(std::move(step)),
                   [this, round](Result<core::Value> r) { on_outcome(round, std::move(r)); }));
  return out;
}

void AveragerHost::on_outcome(std::size_t round, Result<core::Value> outcome) {
  PeerRound& record = rounds_[round];
  if (!outcome) {
    if (record.error.empty()) record.error = outcome.error().what();
    return;
  }
  const auto* result = outcome->as<mm::AveragerStepResult>();
  if (result == nullptr) {
    record.error = "expected the step's AveragerStepResult, got another value";
    return;
  }
  record.grouped = true;
  record.group_id = result->group.group_id;
  record.group_size = result->group.peers.size();
  if (result->deltas.empty()) {
    record.error = "expected one delta per tensor, got none";
    return;
  }
  // tensor += alpha * delta with alpha = 1.
  const std::vector<float>& delta = result->deltas[0];
  for (std::size_t i = 0; i < values_.size() && i < delta.size(); ++i) values_[i] += delta[i];
  record.completed = true;
  record.failed_peers = result->failed_senders.size() + result->failed_reducers.size();
}

}  // namespace apiary::sim::scenarios
