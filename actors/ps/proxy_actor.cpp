#include "actors/ps/proxy_actor.hpp"

#include <caf/all.hpp>

#include "actors/effects_executor.hpp"
#include "actors/type_ids.hpp"
#include "core/ps/wire.hpp"

namespace apiary::actors {
namespace {

struct proxy_state {
  std::unique_ptr<core::ps::ProxyServer> proxy;
  std::unique_ptr<EffectExecutor> fx;
  std::shared_ptr<ProxyCounters> counters;
};

using proxy_actor_t = caf::stateful_actor<proxy_state>;

/// Executes effects; refreshes that fail on the spot go straight back to the proxy.
void run(proxy_actor_t* self, core::Effects effects) {
  auto& st = self->state;
  for (auto& r : st.fx->execute(std::move(effects))) run(self, st.proxy->on_response(core_now(), r.call, r.result));
  if (st.counters) {
    st.counters->pulls = st.proxy->pulls();
    st.counters->reads = st.proxy->reads();
  }
}

caf::behavior proxy_actor(proxy_actor_t* self, std::shared_ptr<Gateway> gw, core::ps::ProxyServer proxy,
                          std::shared_ptr<ProxyCounters> counters) {
  self->state.proxy = std::make_unique<core::ps::ProxyServer>(std::move(proxy));
  self->state.fx = std::make_unique<EffectExecutor>(self, std::move(gw));
  self->state.counters = std::move(counters);
  return {
      [self](Delivery& d) {
        auto& st = self->state;
        if (auto req = st.fx->request_of(d))
          run(self, st.proxy->on_request(core_now(), req->id, req->handle, req->body));
        if (auto resp = st.fx->response_of(d)) run(self, st.proxy->on_response(core_now(), resp->call, resp->result));
      },
  };
}

}  // namespace

caf::actor spawn_ps_proxy_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, core::ps::ProxyServer proxy,
                                std::shared_ptr<ProxyCounters> counters) {
  auto gw_ref = gw;
  auto a = sys.spawn(proxy_actor, std::move(gw), std::move(proxy), std::move(counters));
  gw_ref->serve(core::ps::k_ps_pull_handle, a);
  return a;
}

void stop_ps_proxy_actor(Gateway& gw, const caf::actor& proxy) {
  gw.unserve(core::ps::k_ps_pull_handle);
  if (proxy) caf::anon_send_exit(proxy, caf::exit_reason::user_shutdown);
}

}  // namespace apiary::actors
