#include "actors/gateway_actor.hpp"

#include <unordered_map>

#include "actors/type_ids.hpp"

namespace apiary::actors {
namespace {

struct gateway_state {
  std::shared_ptr<Gateway> gw;
  std::unordered_map<CallId, caf::response_promise> pending;  ///< unary calls awaiting their end
  std::unordered_map<CallId, Buffer> responses;               ///< response seen, end not yet
};

caf::behavior gateway_actor(caf::stateful_actor<gateway_state>* self, std::shared_ptr<Gateway> gw) {
  self->state.gw = std::move(gw);
  self->attach_functor([gw = self->state.gw] { gw->stop(); });
  return {
      [self](serve_atom, const std::string& handle, const caf::actor& service) {
        self->state.gw->serve(handle, service);
      },
      [self](call_atom, const std::string& peer, const std::string& handle, Buffer& request,
             caf::timespan timeout) -> caf::result<Result<Buffer>> {
        auto rp = self->make_response_promise<Result<Buffer>>();
        const CallId id = self->state.gw->unary(caf::actor_cast<caf::actor>(self), peer, handle,
                                                std::move(request), timeout);
        self->state.pending.emplace(id, rp);
        return rp;
      },
      [self](Delivery& d) {
        auto& st = self->state;
        auto it = st.pending.find(d.call);
        if (it == st.pending.end()) return;
        if (d.has_message) st.responses[d.call] = std::move(d.data);
        if (!d.final) return;
        Result<Buffer> r = make_error(errc::protocol, "'{}' at {} ended without a response", d.handle, d.peer);
        if (d.kind == DeliveryKind::error) {
          r = d.error;
        } else if (auto resp = st.responses.find(d.call); resp != st.responses.end()) {
          r = std::move(resp->second);
        }
        it->second.deliver(std::move(r));
        st.pending.erase(it);
        st.responses.erase(d.call);
      },
  };
}

}  // namespace

caf::actor spawn_gateway_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw) {
  return sys.spawn(gateway_actor, std::move(gw));
}

}  // namespace apiary::actors
