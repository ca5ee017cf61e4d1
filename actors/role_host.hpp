#pragma once
/// What every role host of a process shares: the handle of a host of either kind
/// (RoleHost: the CAF actor of role_actor.hpp, or the transport-thread host of
/// direct_host.hpp), local operations on it (call_role) and the routes its roles' Asks
/// take to other hosts. Which kind runs a role is configuration (HostKind).
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/gateway.hpp"
#include "core/role.hpp"

namespace apiary::actors {

/// Hears the result of a local operation; runs on the host's thread.
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
using RoleRoutes = std::map<std::string, class RoleHost>;

/// The answer to a routed Ask, on its way back to the asking host.
struct role_reply_message {
  core::OpId op = 0;
  Result<core::Value> result{core::Value{}};
};

class DirectHost;

/// Which host runs a role: a CAF actor of its own (a hand-off to and from the transport
/// thread per message), or the gateway's transport thread itself (none; for roles whose
/// work per message is short, such as a DHT node or a ping responder).
using core::HostKind;

/// "actor" or "transport"; parse_host_kind reads those names back.
const char* host_kind_name(HostKind kind);
Result<HostKind> parse_host_kind(const std::string& text);

/// A role host of this process, of either kind.
class RoleHost {
 public:
  RoleHost() = default;
  RoleHost(caf::actor a) : actor_(std::move(a)) {}                      // NOLINT: implicit by design
  RoleHost(std::shared_ptr<DirectHost> d) : direct_(std::move(d)) {}  // NOLINT
  explicit operator bool() const { return actor_ || direct_; }
  /// The actor, for an actor host (null otherwise).
  const caf::actor& actor() const { return actor_; }
  const std::shared_ptr<DirectHost>& direct() const { return direct_; }

 private:
  caf::actor actor_;
  std::shared_ptr<DirectHost> direct_;
};

/// Spawns a host of `kind` for `role` on `gw`, registers the handles it serves and starts
/// it (core::Start). Asks for the names in `routes` go to those hosts; any other unknown
/// name is answered with errc::not_found.
RoleHost spawn_role(caf::actor_system& sys, std::shared_ptr<Gateway> gw, std::unique_ptr<core::Role> role,
                    HostKind kind, RoleRoutes routes = {});

/// Unregisters `handles` and stops the host (its role's waiting callers hear
/// errc::cancelled).
void stop_role(Gateway& gw, const RoleHost& host, const std::vector<std::string>& handles);

/// Runs local operation `method` of role `role` in `host`; `done` hears the result, on
/// the host's thread, or errc::cancelled when the host stops first.
void call_role(const RoleHost& host, std::string role, std::string method, core::Value args, RoleDone done);

/// call_role() with the result as a future.
[[nodiscard]] std::future<Result<core::Value>> call_role(const RoleHost& host, std::string role, std::string method,
                                                         core::Value args = {});

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

}  // namespace apiary::actors
