#include "api/parameter_server.hpp"

#include <thread>

#include <caf/all.hpp>

#include "actors/gateway.hpp"
#include "actors/ps/shard_actor.hpp"
#include "api/runtime.hpp"
#include "api/startup.hpp"
#include "core/ps/server.hpp"

namespace apiary {

namespace cps = core::ps;

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
  auto shards = cps::device_shards(plan, options.device, options.initial, options.states);
  if (!shards) return shards.error();
  std::unique_ptr<ParameterServer> ps(new ParameterServer());
  for (auto id : ids) ps->names_ += (ps->names_.empty() ? "" : ",") + plan.shards[id].config.variable;
  ps->gateway_ = gateway;
  cps::ShardServer server(options.device, std::move(*shards));
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

bool ParameterServer::wait_replicas_done(std::chrono::milliseconds patience, const std::atomic<bool>* stop) const {
  const auto until = std::chrono::steady_clock::now() + patience;
  while (!replicas_done()) {
    if ((stop != nullptr && *stop) || std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

ParameterServer::~ParameterServer() {
  if (actor_) actors::stop_ps_actor(*gateway_, *actor_);
}

}  // namespace apiary
