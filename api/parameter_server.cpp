#include "api/parameter_server.hpp"

#include <algorithm>

#include <caf/all.hpp>

#include "actors/gateway.hpp"
#include "actors/ps/shard_actor.hpp"
#include "api/runtime.hpp"
#include "api/startup.hpp"
#include "core/ps/server.hpp"

namespace apiary {

namespace cps = core::ps;

namespace {

/// The optimizer state of every shard of `plan` (by shard id) from the whole variables'
/// `states`, each slot cut as the values are.
Result<std::vector<cps::Optimizer::State>> shard_states(const cps::TrainingPlan& plan,
                                                        const std::map<std::string, cps::Optimizer::State>& states) {
  std::vector<cps::Optimizer::State> out(plan.shards.size());
  for (auto slot : {&cps::Optimizer::State::m, &cps::Optimizer::State::v}) {
    std::map<std::string, std::vector<float>> whole;
    for (const auto& v : plan.variables) {
      auto it = states.find(v.name);
      if (it == states.end()) return make_error(errc::invalid_argument, "optimizer state: expected one for {}, got none", v.name);
      whole[v.name] = it->second.*slot;
    }
    if (std::all_of(whole.begin(), whole.end(), [](const auto& w) { return w.second.empty(); })) continue;
    auto pieces = cps::initial_pieces(plan, whole);
    if (!pieces) return make_error(pieces.error().code, "optimizer state: {}", pieces.error().message);
    for (std::size_t id = 0; id < plan.shards.size(); ++id) out[id].*slot = std::move((*pieces)[id]);
  }
  for (std::size_t id = 0; id < plan.shards.size(); ++id) out[id].updates = states.at(plan.shards[id].variable).updates;
  return out;
}

}  // namespace

Result<std::unique_ptr<ParameterServer>> ParameterServer::start(Runtime& runtime, ParameterServerOptions options) {
  return start(runtime.system(), runtime.gateway(), std::move(options));
}

Result<std::unique_ptr<ParameterServer>> ParameterServer::start(caf::actor_system& system,
                                                                std::shared_ptr<actors::Gateway> gateway,
                                                                ParameterServerOptions options) {
  const api::CafThreadRelease released;
  if (!options.plan) return make_error(errc::invalid_argument, "parameter server: expected a training plan, got none");
  const auto& plan = *options.plan;
  const auto ids = plan.shards_on(options.device);
  if (ids.empty()) {
    std::string servers;
    for (const auto& s : plan.servers) servers += (servers.empty() ? "" : ", ") + s;
    return make_error(errc::invalid_argument, "--device: expected a PS device of the strategy ({}), got '{}'", servers,
                      options.device);
  }
  auto initial = cps::initial_pieces(plan, options.initial);
  if (!initial) return initial.error();
  std::vector<cps::Optimizer::State> states;
  if (!options.states.empty()) {
    auto cut = shard_states(plan, options.states);
    if (!cut) return cut.error();
    states = std::move(*cut);
  }
  std::unique_ptr<ParameterServer> ps(new ParameterServer());
  std::map<std::string, cps::Shard> shards;
  for (auto id : ids) {
    auto shard = cps::Shard::create(plan.shards[id].config, std::move((*initial)[id]));
    if (!shard) return shard.error();
    if (!states.empty()) {
      if (auto st = shard->restore_optimizer(std::move(states[id])); !st) return st.error();
    }
    ps->names_ += (ps->names_.empty() ? "" : ",") + plan.shards[id].config.variable;
    shards.emplace(plan.shards[id].config.variable, std::move(*shard));
  }
  ps->gateway_ = gateway;
  cps::ShardServer server(options.device, std::move(shards));
  if (options.drop_lost_replicas_after) server.set_drop_lost_after(core::Duration(*options.drop_lost_replicas_after));
  if (options.resume_at) {
    if (auto st = server.resume_at(*options.resume_at); !st) return st.error();
  }
  ps->counters_ = std::make_shared<actors::PsCounters>();
  ps->replicas_ = plan.replicas.size();
  ps->actor_ = std::make_shared<caf::actor>(
      actors::spawn_ps_actor(system, std::move(gateway), std::move(server), ps->counters_));
  (void)ps->gateway_->describe("").get();  // the transport thread has taken the serve() calls
  return ps;
}

bool ParameterServer::replicas_done() const { return counters_->replicas_done.load() >= replicas_; }

ParameterServer::~ParameterServer() {
  if (actor_) actors::stop_ps_actor(*gateway_, *actor_);
}

}  // namespace apiary
