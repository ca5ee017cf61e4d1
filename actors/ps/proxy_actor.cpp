#include "actors/ps/proxy_actor.hpp"

#include "actors/role_actor.hpp"
#include "core/ps/wire.hpp"

namespace apiary::actors {

caf::actor spawn_ps_proxy_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, core::ps::ProxyServer proxy,
                                std::shared_ptr<ProxyCounters> counters) {
  auto role = std::make_unique<core::ps::ProxyServer>(std::move(proxy));
  role->set_splice_reads(true);  // the gateway sends the cached copy from where it lies, to every reader
  if (!counters) return spawn_role_actor(sys, std::move(gw), std::move(role));
  return spawn_role_actor(sys, std::move(gw),
                          watched<core::ps::ProxyServer>(std::move(role), [counters](const core::ps::ProxyServer& p) {
                            counters->pulls = p.pulls();
                            counters->reads = p.reads();
                            counters->done = p.done();
                          }));
}

void stop_ps_proxy_actor(Gateway& gw, const caf::actor& proxy) {
  stop_role_actor(gw, proxy, {core::ps::k_ps_pull_handle, core::ps::k_ps_proxy_done_handle});
}

}  // namespace apiary::actors
