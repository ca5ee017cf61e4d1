#include "actors/role_actor.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <future>
#include <memory>

#include "actors/effects_executor.hpp"
#include "actors/role_runner.hpp"
#include "actors/type_ids.hpp"

namespace apiary::actors {
namespace {

/// How long settle_routes waits for the transport thread (a stopped one runs nothing).
constexpr auto k_settle_wait = std::chrono::seconds(5);

/// The runner of an actor host: the actor's clock and delayed messages, and Ask answers
/// that come back as role_reply_messages.
class ActorRunner final : public RoleRunner {
 public:
  ActorRunner(caf::event_based_actor* self, std::shared_ptr<Gateway> gw, std::unique_ptr<core::Role> role,
              RoleRoutes routes)
      : RoleRunner(std::move(role), std::move(routes)), self_(self), fx_(self, std::move(gw)) {}
  EffectExecutor& executor() { return fx_; }

 private:
  core::TimePoint now() const override { return fx_.now(); }
  CallTable& calls() override { return fx_; }
  RoleDone reply_path(core::OpId op) override {
    return [me = caf::actor_cast<caf::actor>(self_), op](Result<core::Value> r) {
      caf::anon_send(me, role_reply_message{op, std::move(r)});
    };
  }

  caf::event_based_actor* self_;
  EffectExecutor fx_;
};

struct role_host_state {
  std::unique_ptr<ActorRunner> runner;
};

using self_t = caf::stateful_actor<role_host_state>;

caf::behavior role_host(self_t* self, std::shared_ptr<Gateway> gw, std::shared_ptr<std::unique_ptr<core::Role>> role,
                        RoleRoutes routes) {
  self->state.runner = std::make_unique<ActorRunner>(self, std::move(gw), std::move(*role), std::move(routes));
  self->state.runner->feed(core::Start{});
  return {
      [self](Delivery& d) { self->state.runner->on_delivery(d); },
      [self](timer_atom, core::TimerId id, std::uint64_t generation) {
        auto& r = *self->state.runner;
        if (r.executor().timer_is_current(id, generation)) r.feed(core::TimerFired{id});
      },
      [self](role_reply_message& m) { self->state.runner->feed(core::LocalReply{m.op, std::move(m.result)}); },
      [self](role_call_message& m) {
        self->state.runner->on_local_call(std::move(m.role), std::move(m.method), std::move(m.args),
                                          std::move(m.reply));
      },
  };
}

}  // namespace

caf::actor spawn_role_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, std::unique_ptr<core::Role> role,
                            RoleRoutes routes) {
  const auto handles = role->handles();
  auto gw_ref = gw;
  // CAF copies spawn arguments; the role travels in a shared holder.
  auto holder = std::make_shared<std::unique_ptr<core::Role>>(std::move(role));
  auto a = sys.spawn(role_host, std::move(gw), std::move(holder), std::move(routes));
  for (const auto& h : handles) gw_ref->serve(h, a);
  settle_routes(*gw_ref);
  return a;
}

void settle_routes(Gateway& gw) {
  if (gw.on_thread()) return;
  auto reached = std::make_shared<std::promise<void>>();
  auto done = reached->get_future();
  gw.run_on_thread([reached] { reached->set_value(); });
  (void)done.wait_for(k_settle_wait);
}

void stop_role_actor(Gateway& gw, const caf::actor& host, const std::vector<std::string>& handles) {
  for (const auto& h : handles) gw.unserve(h);
  settle_routes(gw);  // then the exit: requests routed before it are in the mailbox ahead of it
  if (host) caf::anon_send_exit(host, caf::exit_reason::user_shutdown);
}

}  // namespace apiary::actors
