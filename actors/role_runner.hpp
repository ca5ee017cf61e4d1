#pragma once
/// What both role hosts do with their role, the same for every role: feed it inputs,
/// execute its effects through the host's call table, hand each Complete to the caller of
/// its local operation, route its Asks to the process's other hosts, and name the caller
/// of each request. A host supplies its time, its call table and the way an Ask's answer
/// comes back to its thread.
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "actors/call_table.hpp"
#include "actors/role_host.hpp"

namespace apiary::actors {

class RoleRunner {
 public:
  RoleRunner(std::unique_ptr<core::Role> role, RoleRoutes routes)
      : role_(std::move(role)), routes_(std::move(routes)) {}
  virtual ~RoleRunner() = default;
  RoleRunner(const RoleRunner&) = delete;
  RoleRunner& operator=(const RoleRunner&) = delete;

  /// Feeds one input to the role and executes what it returns.
  void feed(core::Input input);
  /// One gateway delivery: every core input it holds, in order.
  void on_delivery(Delivery& d);
  /// A local operation asked of the role; `reply` hears its Complete.
  void on_local_call(std::string role, std::string method, core::Value args, std::shared_ptr<RoleReply> reply);

 protected:
  [[nodiscard]] virtual core::TimePoint now() const = 0;
  virtual CallTable& calls() = 0;
  /// A callback, callable on any thread, that brings the answer to Ask{op} back to this
  /// host's thread as LocalReply{op}.
  virtual RoleDone reply_path(core::OpId op) = 0;

 private:
  const core::PeerAddr& caller_of(const Delivery& d);

  std::unique_ptr<core::Role> role_;
  RoleRoutes routes_;  ///< other hosts of the process, by the role names Asks use
  /// Local operations in the role -> their callers (told errc::cancelled if the host
  /// stops first: the replies go with the runner).
  std::map<core::OpId, std::shared_ptr<RoleReply>> waiting_;
  core::OpId next_op_ = 1;
  /// A caller's name, parsed once per peer: by listen "host:port", with the PeerID bytes
  /// it was made from (a new PeerID at the same address is parsed again).
  struct Caller {
    std::string peer_id;
    core::PeerAddr addr;
  };
  std::unordered_map<std::string, Caller> from_;
};

}  // namespace apiary::actors
