#include "actors/rpc.hpp"

#include <optional>

#include "actors/role_actor.hpp"
#include "messages/identity/multiaddr.hpp"

namespace apiary::actors {

std::map<CallId, CallOutcome> await_calls(caf::scoped_actor& self, Gateway& gw, std::set<CallId> ids,
                                          std::chrono::milliseconds patience) {
  std::map<CallId, CallOutcome> out;
  const auto give_up = std::chrono::steady_clock::now() + patience;
  while (!ids.empty()) {
    const auto left = give_up - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) break;
    self->receive(
        [&](Delivery& d) {
          auto& o = out[d.call];
          if (d.kind == DeliveryKind::error) o.error = d.error;
          if (d.has_message) o.messages.push_back(std::move(d.data));
          if (d.final) {
            o.over = true;
            ids.erase(d.call);
          }
        },
        caf::after(std::chrono::duration_cast<std::chrono::milliseconds>(left) + std::chrono::milliseconds(1)) >>
            [] {});
  }
  for (CallId id : ids) {
    gw.cancel(id, "the caller stopped waiting");
    auto& o = out[id];
    o.error = make_error(errc::deadline_exceeded, "no answer within {} ms", patience.count());
    o.over = true;
  }
  return out;
}

Result<Buffer> call_unary(caf::scoped_actor& self, Gateway& gw, const PeerKey& peer, const std::string& handle,
                          Buffer request, std::chrono::milliseconds timeout) {
  const CallId id = gw.unary(self, peer, handle, std::move(request), timeout);
  // The engine enforces the deadline; the extra second only guards against a bug.
  auto outcome = await_calls(self, gw, {id}, timeout + std::chrono::seconds(1));
  auto& o = outcome[id];
  if (o.error) return *o.error;
  if (o.messages.empty()) return make_error(errc::protocol, "'{}' at {} ended without a response", handle, peer);
  return std::move(o.messages.front());
}

namespace {

struct service_state {
  std::shared_ptr<Gateway> gw;
  UnaryFn fn;
  std::string handle;
};

caf::behavior unary_service(caf::stateful_actor<service_state>* self, std::shared_ptr<Gateway> gw,
                            std::string handle, UnaryFn fn) {
  self->state.gw = std::move(gw);
  self->state.fn = std::move(fn);
  self->state.handle = std::move(handle);
  return {
      [self](Delivery& d) {
        auto& st = self->state;
        if (d.kind != DeliveryKind::open) return;  // cancels and deadlines need no action here
        Result<Buffer> result = make_error(errc::internal, "unset");
        try {
          result = st.fn(d);
        } catch (const std::exception& e) {
          result = make_error(errc::handler_error, "handler for '{}' threw: {}", st.handle, e.what());
        } catch (...) {
          result = make_error(errc::handler_error, "handler for '{}' threw a non-standard exception", st.handle);
        }
        if (result) {
          st.gw->send(d.call, std::move(*result), true);
        } else {
          st.gw->fail(d.call, result.error());
        }
      },
  };
}

}  // namespace

caf::actor serve_unary(caf::actor_system& sys, std::shared_ptr<Gateway> gw, const std::string& handle, UnaryFn fn) {
  auto gw_ref = gw;
  auto a = sys.spawn(unary_service, std::move(gw), handle, std::move(fn));
  gw_ref->serve(handle, a);
  return a;
}

core::PeerAddr peer_addr_of(const std::string& listen_host_port, const std::string& peer_id_bytes) {
  std::optional<messages::PeerId> peer;
  if (!peer_id_bytes.empty()) {
    if (auto id = messages::PeerId::from_bytes(peer_id_bytes)) peer = *id;
  }
  auto addr = messages::Multiaddr::from_host_port(listen_host_port, "caller", peer);
  if (!addr || addr->port == 0) return {};
  return core::PeerAddr(std::move(*addr));
}

}  // namespace apiary::actors
