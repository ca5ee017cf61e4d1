#pragma once
/// RoleHost: the simulator's one host, generic over the role. It turns the World's
/// callbacks into core::Inputs for any core::Role (a Mux of several included) and hands
/// the role's effects back to the World; a finished local operation (Complete) goes to
/// the callback its caller gave. A scenario starts local operations with call() and
/// executes the effects it returns through World::submit.
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "core/role.hpp"
#include "sim/host.hpp"

namespace apiary::sim {

template <class R>
class RoleHost : public Host {
  static_assert(std::is_base_of_v<core::Role, R>, "RoleHost hosts a core::Role");

 public:
  /// Called with the result of a local operation.
  using Done = std::function<void(Result<core::Value>)>;

  /// Builds the role in place from `args`.
  template <class... Args>
  explicit RoleHost(Args&&... args) : role_(std::forward<Args>(args)...) {
    for (auto& h : role_.handles()) handles_.insert(std::move(h));
  }

  /// The hosted role (for checkers).
  [[nodiscard]] R& role() { return role_; }
  [[nodiscard]] const R& role() const { return role_; }

  /// Starts local operation `method` on the role (`target`: its name in a Mux, "" for a
  /// lone role); `done` hears its result. Returns the effects to execute (World::submit).
  [[nodiscard]] core::Effects call(core::TimePoint now, std::string target, std::string method, core::Value args,
                                   Done done) {
    const core::OpId op = next_op_++;
    waiting_.emplace(op, std::move(done));
    return feed(now, core::LocalCall{op, std::move(target), std::move(method), std::move(args)});
  }

  /// Feeds any input to the role now (a fault injector's PeerDown, for one); returns the
  /// effects to execute (World::submit).
  [[nodiscard]] core::Effects input(core::TimePoint now, core::Input in) { return feed(now, std::move(in)); }
  /// input(now, PeerDown{peer}).
  [[nodiscard]] core::Effects peer_down(core::TimePoint now, const core::PeerAddr& peer) {
    return feed(now, core::PeerDown{peer});
  }
  core::Effects on_peer_down(core::TimePoint now, const core::PeerAddr& peer) override { return peer_down(now, peer); }

  /// Local operations started and not finished yet.
  [[nodiscard]] std::size_t waiting() const { return waiting_.size(); }

  core::Effects on_start(core::TimePoint now) override { return feed(now, core::Start{}); }
  core::Effects on_request(core::TimePoint now, core::RequestId id, const std::string& handle,
                           const std::string& request) override {
    return on_request_from(now, id, handle, {}, request);
  }
  core::Effects on_request_from(core::TimePoint now, core::RequestId id, const std::string& handle,
                                const core::PeerAddr& from, const std::string& request) override {
    if (handles_.count(handle) == 0) {
      return {core::Reply{id, make_error(errc::not_found, "no role on this node serves '{}'", handle)}};
    }
    return feed(now, core::Request{id, handle, from, Buffer::copy_of(request)});
  }
  core::Effects on_response(core::TimePoint now, core::CallId call, Result<std::string> response) override {
    return feed(now, core::Response{call, std::move(response)});
  }
  core::Effects on_timer(core::TimePoint now, core::TimerId id) override { return feed(now, core::TimerFired{id}); }
  core::Effects on_message(core::TimePoint now, core::CallId call, const std::string& message) override {
    return feed(now, core::StreamMessage{call, Buffer::copy_of(message), false});
  }
  core::Effects on_request_message(core::TimePoint now, core::RequestId id, const Result<std::string>& message,
                                   bool last) override {
    Result<Buffer> m = message.ok() ? Result<Buffer>(Buffer::copy_of(*message)) : Result<Buffer>(message.error());
    return feed(now, core::RequestMessage{id, std::move(m), last});
  }

 private:
  /// One input to the role; Completes go to their callers, Asks no role here serves are
  /// answered with an error, the rest goes to the World.
  core::Effects feed(core::TimePoint now, core::Input input) {
    core::Effects fx = role_.on(now, std::move(input));
    auto local = core::take_local(fx);
    for (auto& done : local.completed) {
      auto it = waiting_.find(done.op);
      if (it == waiting_.end()) continue;  // an op the role started itself
      Done cb = std::move(it->second);
      waiting_.erase(it);
      if (cb) cb(std::move(done.result));
    }
    for (auto& ask : local.asks) {
      auto more = feed(now, core::no_such_role(ask));
      fx.insert(fx.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
    }
    return fx;
  }

  R role_;
  std::set<std::string> handles_;  ///< what the role serves; other requests get not_found
  std::map<core::OpId, Done> waiting_;
  core::OpId next_op_ = 1;
};

}  // namespace apiary::sim
