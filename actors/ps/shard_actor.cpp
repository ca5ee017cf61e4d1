#include "actors/ps/shard_actor.hpp"

#include <caf/all.hpp>

#include "actors/effects_executor.hpp"
#include "actors/type_ids.hpp"
#include "core/ps/wire.hpp"

namespace apiary::actors {
namespace {

struct ps_state {
  std::unique_ptr<core::ps::ShardServer> server;
  std::unique_ptr<EffectExecutor> fx;
};

using ps_actor_t = caf::stateful_actor<ps_state>;

caf::behavior ps_actor(ps_actor_t* self, std::shared_ptr<Gateway> gw, core::ps::ShardServer server) {
  self->state.server = std::make_unique<core::ps::ShardServer>(std::move(server));
  self->state.server->set_splice_pulls(true);  // the gateway sends the parameters from where they lie
  self->state.fx = std::make_unique<EffectExecutor>(self, std::move(gw));
  return {
      [self](Delivery& d) {
        auto& st = self->state;
        // The server only replies; nothing it returns can fail to be issued. A unary
        // request its caller gave up on is dropped by the executor (its answer too).
        // The body stays in the received buffer: a dense push is summed straight from it
        // when its step is complete, and the buffer is held until then.
        if (auto req = st.fx->request_view_of(d)) {
          // Name the caller by its listen address when it has one (inbound keys are opaque).
          const auto from = d.peer_listen_addr.empty() ? req->from : d.peer_listen_addr;
          (void)st.fx->execute(st.server->on_request(core_now(), req->id, req->handle, from, req->body));
        }
        if (auto m = st.fx->request_message_of(d)) {
          (void)st.fx->execute(st.server->on_request_message(core_now(), m->request, m->message, m->last));
        }
      },
  };
}

}  // namespace

caf::actor spawn_ps_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, core::ps::ShardServer server) {
  auto gw_ref = gw;
  auto a = sys.spawn(ps_actor, std::move(gw), std::move(server));
  gw_ref->serve(core::ps::k_ps_push_handle, a);
  gw_ref->serve(core::ps::k_ps_pull_handle, a);
  gw_ref->serve(core::ps::k_ps_join_handle, a);
  gw_ref->serve(core::ps::k_ps_optimizer_state_handle, a);
  return a;
}

void stop_ps_actor(Gateway& gw, const caf::actor& ps) {
  gw.unserve(core::ps::k_ps_push_handle);
  gw.unserve(core::ps::k_ps_pull_handle);
  gw.unserve(core::ps::k_ps_join_handle);
  gw.unserve(core::ps::k_ps_optimizer_state_handle);
  if (ps) caf::anon_send_exit(ps, caf::exit_reason::user_shutdown);
}

}  // namespace apiary::actors
