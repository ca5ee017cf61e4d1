#include "actors/role_actor.hpp"

#include <map>
#include <optional>
#include <unordered_map>

#include <caf/all.hpp>

#include "actors/effects_executor.hpp"
#include "actors/type_ids.hpp"

namespace apiary::actors {
namespace {

struct role_host_state {
  std::unique_ptr<core::Role> role;
  std::unique_ptr<EffectExecutor> fx;
  RoleRoutes routes;  ///< other hosts of the process, by the role names Asks use
  /// Local operations in the role -> their callers (told errc::cancelled if the host
  /// stops first: the replies go with the state).
  std::map<core::OpId, std::shared_ptr<RoleReply>> waiting;
  core::OpId next_op = 1;
  /// A caller's name, parsed once per peer: by listen "host:port", with the PeerID bytes
  /// it was made from (a new PeerID at the same address is parsed again).
  struct Caller {
    std::string peer_id;
    core::PeerAddr addr;
  };
  std::unordered_map<std::string, Caller> from;
};

using self_t = caf::stateful_actor<role_host_state>;

/// The core's name for the caller of delivery `d`, from the cache.
const core::PeerAddr& caller_of(self_t* self, const Delivery& d) {
  auto& cache = self->state.from;
  auto it = cache.find(d.peer_listen_addr);
  if (it == cache.end()) {
    it = cache.emplace(d.peer_listen_addr, role_host_state::Caller{d.peer_id, peer_addr_of(d.peer_listen_addr, d.peer_id)})
             .first;
  } else if (it->second.peer_id != d.peer_id) {
    it->second = role_host_state::Caller{d.peer_id, peer_addr_of(d.peer_listen_addr, d.peer_id)};
  }
  return it->second.addr;
}

/// Feeds one input to the role and executes what it returns: calls, messages and timers
/// through the executor (calls that cannot be issued come straight back as responses),
/// each Complete to its caller, an Ask no role here serves answered with an error.
void feed(self_t* self, core::Input input) {
  auto& st = self->state;
  core::Effects fx = st.role->on(st.fx->now(), std::move(input));
  auto local = core::take_local(fx);
  for (auto& failed : st.fx->execute(std::move(fx))) feed(self, core::Response{failed.call, std::move(failed.result)});
  for (auto& done : local.completed) {
    auto it = st.waiting.find(done.op);
    if (it == st.waiting.end()) continue;  // an operation the role started itself
    auto reply = std::move(it->second);
    st.waiting.erase(it);
    reply->deliver(std::move(done.result));
  }
  for (auto& ask : local.asks) {
    auto route = st.routes.find(ask.role);
    if (route == st.routes.end()) {
      feed(self, core::no_such_role(ask));
      continue;
    }
    // The other host answers on its own thread; the answer comes back here as a message.
    auto me = caf::actor_cast<caf::actor>(self);
    call_role(route->second, ask.role, std::move(ask.method), std::move(ask.args),
              [me, op = ask.op](Result<core::Value> r) { caf::anon_send(me, role_reply_message{op, std::move(r)}); });
  }
}

caf::behavior role_host(self_t* self, std::shared_ptr<Gateway> gw, std::shared_ptr<std::unique_ptr<core::Role>> role,
                       RoleRoutes routes) {
  self->state.role = std::move(*role);
  self->state.routes = std::move(routes);
  self->state.fx = std::make_unique<EffectExecutor>(self, std::move(gw));
  feed(self, core::Start{});
  return {
      [self](Delivery& d) {
        auto& st = self->state;
        if (auto req = st.fx->request_view_of(d)) {
          feed(self, core::Request{req->id, std::move(req->handle), caller_of(self, d), std::move(req->body)});
        }
        if (auto m = st.fx->request_message_view_of(d)) {
          feed(self, core::RequestMessage{m->request, std::move(m->message), m->last});
        }
        if (auto m = st.fx->message_view_of(d)) feed(self, core::StreamMessage{m->call, std::move(m->message), m->landed});
        if (auto r = st.fx->response_of(d)) {
          feed(self, core::Response{r->call, std::move(r->result), std::move(r->body), r->landed});
        }
      },
      [self](timer_atom, core::TimerId id, std::uint64_t generation) {
        if (self->state.fx->timer_is_current(id, generation)) feed(self, core::TimerFired{id});
      },
      [self](role_reply_message& m) { feed(self, core::LocalReply{m.op, std::move(m.result)}); },
      [self](role_call_message& m) {
        auto& st = self->state;
        const core::OpId op = st.next_op++;
        st.waiting.emplace(op, std::move(m.reply));
        feed(self, core::LocalCall{op, std::move(m.role), std::move(m.method), std::move(m.args)});
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
  return a;
}

void stop_role_actor(Gateway& gw, const caf::actor& host, const std::vector<std::string>& handles) {
  for (const auto& h : handles) gw.unserve(h);
  if (host) caf::anon_send_exit(host, caf::exit_reason::user_shutdown);
}

void call_role(const caf::actor& host, std::string role, std::string method, core::Value args, RoleDone done) {
  caf::anon_send(host, role_call_message{std::move(role), std::move(method), std::move(args),
                                         std::make_shared<RoleReply>(std::move(done))});
}

std::future<Result<core::Value>> call_role(const caf::actor& host, std::string role, std::string method,
                                           core::Value args) {
  auto promise = std::make_shared<std::promise<Result<core::Value>>>();
  auto future = promise->get_future();
  call_role(host, std::move(role), std::move(method), std::move(args),
            [promise](Result<core::Value> r) { promise->set_value(std::move(r)); });
  return future;
}

}  // namespace apiary::actors
