#pragma once
/// The transport-thread host: runs any core::Role on the gateway's transport thread. A
/// request is fed to the role where the frame is read, and the role's calls and replies
/// go out from there: no thread hand-off per call on either side. Its timers tick with
/// the transport's loop. Local operations from other threads are posted to that thread.
/// For roles whose work per message is short (a DHT node, a ping responder): a slow
/// role here delays every other call of the process.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "actors/role_host.hpp"

namespace apiary::actors {

class DirectHost final : public DirectSink, public std::enable_shared_from_this<DirectHost> {
 public:
  /// Starts a host of `role` on `gw`'s transport thread (see spawn_role).
  static std::shared_ptr<DirectHost> start(std::shared_ptr<Gateway> gw, std::unique_ptr<core::Role> role,
                                           RoleRoutes routes);
  ~DirectHost() override;

  /// Any thread: runs local operation `method` of `role`; `done` hears the result on the
  /// transport thread (errc::cancelled when the host stops first).
  void call(std::string role, std::string method, core::Value args, RoleDone done);
  /// Any thread: unregisters `handles` and stops the role. Idempotent.
  void stop(const std::vector<std::string>& handles);

 private:
  class Runner;
  explicit DirectHost(std::shared_ptr<Gateway> gw);

  void deliver(Delivery d) override;
  std::optional<core::TimePoint> next_wakeup() override;
  void on_tick(core::TimePoint now) override;
  void on_gateway_stopped() override;

  std::shared_ptr<Gateway> gw_;
  std::unique_ptr<Runner> runner_;  ///< transport thread only; null once stopped
};

}  // namespace apiary::actors
