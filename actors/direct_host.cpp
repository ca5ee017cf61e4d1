#include "actors/direct_host.hpp"

#include "actors/role_actor.hpp"
#include "actors/role_runner.hpp"

namespace apiary::actors {

/// The runner of a transport-thread host: the steady clock, timers in a queue the
/// transport's ticks drain, Ask answers posted back to the transport thread.
class DirectHost::Runner final : public RoleRunner, private HostTimers {
 public:
  Runner(DirectHost& host, std::unique_ptr<core::Role> role, RoleRoutes routes)
      : RoleRunner(std::move(role), std::move(routes)), host_(host), calls_(host.gw_, std::static_pointer_cast<DirectSink>(host.shared_from_this()), *this) {}

  std::optional<core::TimePoint> next_timer() const {
    if (due_.empty()) return std::nullopt;
    return due_.begin()->first;
  }
  /// Fires the timers due by `now`, earliest first (a timer armed meanwhile waits its turn).
  void fire(core::TimePoint now) {
    while (!due_.empty() && due_.begin()->first <= now) {
      const core::TimerId id = due_.begin()->second;
      due_.erase(due_.begin());
      armed_.erase(id);
      feed(core::TimerFired{id});
    }
  }

 private:
  core::TimePoint now() const override { return core_now(); }
  CallTable& calls() override { return calls_; }
  RoleDone reply_path(core::OpId op) override {
    return [host = host_.weak_from_this(), gw = host_.gw_, op](Result<core::Value> r) {
      gw->run_on_thread([host, op, r = std::move(r)]() mutable {
        auto h = host.lock();
        if (h && h->runner_) h->runner_->feed(core::LocalReply{op, std::move(r)});
      });
    };
  }
  void set(core::TimerId id, core::TimePoint at) override {
    cancel(id);
    armed_[id] = at;
    due_.emplace(at, id);
  }
  void cancel(core::TimerId id) override {
    auto it = armed_.find(id);
    if (it == armed_.end()) return;
    due_.erase({it->second, id});
    armed_.erase(it);
  }

  DirectHost& host_;
  CallTable calls_;
  std::map<core::TimerId, core::TimePoint> armed_;
  std::set<std::pair<core::TimePoint, core::TimerId>> due_;
};

std::shared_ptr<DirectHost> DirectHost::start(std::shared_ptr<Gateway> gw, std::unique_ptr<core::Role> role,
                                              RoleRoutes routes) {
  std::shared_ptr<DirectHost> host(new DirectHost(gw));
  const auto handles = role->handles();
  auto holder = std::make_shared<std::unique_ptr<core::Role>>(std::move(role));
  // In order on the transport thread: the role is up before the first request for it.
  gw->run_on_thread([host, holder, routes = std::move(routes)]() mutable {
    host->runner_ = std::make_unique<Runner>(*host, std::move(*holder), std::move(routes));
    host->gw_->attach(host);
    host->runner_->feed(core::Start{});
  });
  for (const auto& h : handles) gw->serve(h, std::static_pointer_cast<DirectSink>(host));
  settle_routes(*gw);  // a request sent after start returns reaches the role
  return host;
}

DirectHost::DirectHost(std::shared_ptr<Gateway> gw) : gw_(std::move(gw)) {}
DirectHost::~DirectHost() = default;

void DirectHost::call(std::string role, std::string method, core::Value args, RoleDone done) {
  auto reply = std::make_shared<RoleReply>(std::move(done));
  gw_->run_on_thread([host = shared_from_this(), role = std::move(role), method = std::move(method),
                      args = std::move(args), reply = std::move(reply)]() mutable {
    // A stopped host drops `reply`, whose caller hears errc::cancelled.
    if (host->runner_) host->runner_->on_local_call(std::move(role), std::move(method), std::move(args), reply);
  });
}

void DirectHost::stop(const std::vector<std::string>& handles) {
  for (const auto& h : handles) gw_->unserve(h);
  gw_->run_on_thread([host = shared_from_this()] {
    host->gw_->detach(host);
    host->runner_.reset();  // its waiting callers hear errc::cancelled
  });
}

void DirectHost::deliver(Delivery d) {
  if (runner_) runner_->on_delivery(d);
}

std::optional<core::TimePoint> DirectHost::next_wakeup() {
  return runner_ ? runner_->next_timer() : std::nullopt;
}

void DirectHost::on_tick(core::TimePoint now) {
  if (runner_) runner_->fire(now);
}

void DirectHost::on_gateway_stopped() {
  // The transport thread is gone, so this thread may touch the runner. Its call table
  // holds this host and the gateway: reset, it lets both go; waiting callers hear
  // errc::cancelled.
  runner_.reset();
}

}  // namespace apiary::actors
