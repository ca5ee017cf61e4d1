#include "actors/role_host.hpp"

#include <caf/all.hpp>

#include "actors/direct_host.hpp"
#include "actors/role_actor.hpp"
#include "actors/type_ids.hpp"

namespace apiary::actors {

const char* host_kind_name(HostKind kind) { return kind == HostKind::actor ? "actor" : "transport"; }

Result<HostKind> parse_host_kind(const std::string& text) {
  if (text == "actor") return HostKind::actor;
  if (text == "transport") return HostKind::transport_thread;
  return make_error(errc::invalid_argument, "unknown role host '{}': expected 'actor' or 'transport'", text);
}

RoleHost spawn_role(caf::actor_system& sys, std::shared_ptr<Gateway> gw, std::unique_ptr<core::Role> role,
                    HostKind kind, RoleRoutes routes) {
  if (kind == HostKind::transport_thread) return DirectHost::start(std::move(gw), std::move(role), std::move(routes));
  return spawn_role_actor(sys, std::move(gw), std::move(role), std::move(routes));
}

void stop_role(Gateway& gw, const RoleHost& host, const std::vector<std::string>& handles) {
  if (host.direct()) host.direct()->stop(handles);
  else stop_role_actor(gw, host.actor(), handles);
}

void call_role(const RoleHost& host, std::string role, std::string method, core::Value args, RoleDone done) {
  if (host.direct()) {
    host.direct()->call(std::move(role), std::move(method), std::move(args), std::move(done));
    return;
  }
  caf::anon_send(host.actor(), role_call_message{std::move(role), std::move(method), std::move(args),
                                                 std::make_shared<RoleReply>(std::move(done))});
}

std::future<Result<core::Value>> call_role(const RoleHost& host, std::string role, std::string method,
                                           core::Value args) {
  auto promise = std::make_shared<std::promise<Result<core::Value>>>();
  auto future = promise->get_future();
  call_role(host, std::move(role), std::move(method), std::move(args),
            [promise](Result<core::Value> r) { promise->set_value(std::move(r)); });
  return future;
}

}  // namespace apiary::actors
