#pragma once
/// The generic actor host: one CAF actor that runs any core::Role (a core::Mux of several
/// included) over the gateway. It serves the role's handles, turns deliveries and timer
/// wake-ups into core::Inputs, executes the effects through the shared EffectExecutor,
/// and hands each Complete to the caller of its local operation. It holds no protocol
/// decision: everything it does is the same for every role.
#include <functional>
#include <map>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/gateway.hpp"
#include "core/role.hpp"

namespace apiary::actors {

/// Hears the result of a local operation; runs on the host actor's thread.
using RoleDone = std::function<void(Result<core::Value>)>;

/// Hands a local operation's result to its caller exactly once: the role's result when
/// the operation completes, or errc::cancelled when the last reference is dropped first
/// (the host stopped, or the message never reached it), so a caller never waits forever.
class RoleReply {
 public:
  explicit RoleReply(RoleDone done) : done_(std::move(done)) {}
  ~RoleReply() { deliver(make_error(errc::cancelled, "the role's host stopped before the operation finished")); }
  RoleReply(const RoleReply&) = delete;
  RoleReply& operator=(const RoleReply&) = delete;
  /// Delivers `result`; later calls do nothing.
  void deliver(Result<core::Value> result) {
    if (!done_) return;
    auto fn = std::move(done_);
    done_ = nullptr;
    fn(std::move(result));
  }

 private:
  RoleDone done_;
};

/// A local operation for an actor-hosted role (see call_role).
struct role_call_message {
  std::string role;    ///< the target's name in the host's Mux ("" for a lone role)
  std::string method;  ///< the role's local method
  core::Value args;
  std::shared_ptr<RoleReply> reply;
};

/// The other role hosts of the process a host's roles may Ask, by role name (e.g. an
/// averager's "dht" is the host of the process's DHT node). An Ask for a name the role's
/// own Mux does not have goes to the host named here, as a local call to its lone role
/// (or the role of that name in its Mux); the answer comes back as the LocalReply.
using RoleRoutes = std::map<std::string, caf::actor>;

/// The answer to a routed Ask, on its way back to the asking host.
struct role_reply_message {
  core::OpId op = 0;
  Result<core::Value> result{core::Value{}};
};

/// Spawns the host of `role`, registers every handle it serves with `gw`, and starts it
/// (core::Start). The actor owns the role until it exits. Asks for the names in `routes`
/// go to those hosts; any other unknown name is answered with errc::not_found.
caf::actor spawn_role_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, std::unique_ptr<core::Role> role,
                            RoleRoutes routes = {});

/// `role`, with `watch(role)` run after every input it takes (on the host's thread), e.g.
/// to publish counters that other threads read while it runs.
template <class R>
std::unique_ptr<core::Role> watched(std::unique_ptr<R> role, std::function<void(const R&)> watch) {
  struct Watched final : core::Role {
    std::unique_ptr<R> inner;
    std::function<void(const R&)> watch;
    std::vector<std::string> handles() const override { return inner->handles(); }
    core::Effects on(core::TimePoint now, core::Input input) override {
      core::Effects fx = inner->on(now, std::move(input));
      watch(*inner);
      return fx;
    }
  };
  auto out = std::make_unique<Watched>();
  out->inner = std::move(role);
  out->watch = std::move(watch);
  return out;
}

/// Unregisters the handles of a role host and stops it.
void stop_role_actor(Gateway& gw, const caf::actor& host, const std::vector<std::string>& handles);

/// Runs local operation `method` of role `role` in `host`; `done` hears the result, on
/// the host's thread, or errc::cancelled when the host stops first.
void call_role(const caf::actor& host, std::string role, std::string method, core::Value args, RoleDone done);

/// call_role() with the result as a future.
[[nodiscard]] std::future<Result<core::Value>> call_role(const caf::actor& host, std::string role, std::string method,
                                                         core::Value args = {});

/// The core's name for a caller, from its connection: its listen "host:port" (as the
/// caller announced it) and its PeerID bytes, as a multiaddr with /p2p/ when the PeerID
/// is known; "" when the caller announced no listen address, or a malformed one.
[[nodiscard]] core::PeerAddr peer_addr_of(const std::string& listen_host_port, const std::string& peer_id_bytes);

}  // namespace apiary::actors
