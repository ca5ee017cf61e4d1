#include "actors/averaging/averager_actor.hpp"

#include <chrono>
#include <random>

#include <caf/all.hpp>

#include "actors/averaging/averager_messages.hpp"
#include "actors/dht/dht_actor.hpp"
#include "actors/effects_executor.hpp"
#include "actors/type_ids.hpp"
#include "core/averaging/dht_declarations.hpp"

namespace apiary::actors {
namespace {

namespace mm = core::averaging;

struct averager_state {
  std::unique_ptr<mm::AveragerRole> role;
  std::unique_ptr<EffectExecutor> fx;
  std::mt19937_64 rng;
  caf::actor dht;
  std::shared_ptr<StepDoneOnce> done;  ///< the running step's caller
  std::string caller;                  ///< PeerID bytes named in calls
};

using self_t = caf::stateful_actor<averager_state>;

/// Executes one input's effects: calls and timers on the gateway, DHT operations on the
/// DHT actor, the outcome to the step's caller.
void apply(self_t* self, mm::AveragerEffects afx) {
  auto& st = self->state;
  for (auto& op : afx.dht) {
    auto me = caf::actor_cast<caf::actor>(self);
    if (auto* d = std::get_if<mm::DhtDeclare>(&op)) {
      submit_dht_op(
          st.dht,
          [item = mm::declaration_item(*d)](core::dht::Node& node, core::TimePoint now, core::dht::OpId id) {
            return node.store(now, id, {item});
          },
          [me, op = d->op](core::dht::OpResult r) { caf::anon_send(me, averager_dht_message{op, true, std::move(r)}); });
    } else if (auto* g = std::get_if<mm::DhtGetAveragers>(&op)) {
      submit_dht_op(
          st.dht,
          [key = mm::averagers_key(*g)](core::dht::Node& node, core::TimePoint now, core::dht::OpId id) {
            return node.get(now, id, {key}, true);
          },
          [me, op = g->op](core::dht::OpResult r) { caf::anon_send(me, averager_dht_message{op, false, std::move(r)}); });
    }
  }
  if (afx.outcome && st.done) {
    auto done = std::move(st.done);
    done->deliver(std::move(*afx.outcome));
  }
  for (auto& effect : afx.rpc) {
    if (auto* call = std::get_if<core::Call>(&effect)) call->caller = st.caller;
  }
  for (auto& failed : st.fx->execute(std::move(afx.rpc))) {
    apply(self, st.role->on_response(core_now(), failed.call, failed.result));
  }
}

caf::behavior averager_actor(self_t* self, std::shared_ptr<Gateway> gw, AveragerActorConfig config) {
  auto& st = self->state;
  // DHT time is Unix time, as on the DHT actor.
  config.role.dht_epoch =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
      core::to_seconds(core_now());
  st.rng.seed(config.seed);
  st.role = std::make_unique<mm::AveragerRole>(config.role, [self] { return self->state.rng(); });
  st.fx = std::make_unique<EffectExecutor>(self, std::move(gw));
  st.dht = config.dht;
  st.caller = config.caller;
  return {
      [self](Delivery& d) {
        auto& st = self->state;
        if (auto req = st.fx->request_of(d)) {
          const auto from = peer_addr_of(d.peer_listen_addr, d.peer_id);
          apply(self, st.role->on_request(core_now(), req->id, req->handle, from, req->body));
        }
        if (auto m = st.fx->request_message_of(d)) {
          apply(self, st.role->on_request_message(core_now(), m->request, m->message, m->last));
        }
        if (auto m = st.fx->message_of(d)) apply(self, st.role->on_message(core_now(), m->call, m->message));
        if (auto r = st.fx->response_of(d)) apply(self, st.role->on_response(core_now(), r->call, r->result));
      },
      [self](timer_atom, core::TimerId id, std::uint64_t generation) {
        if (self->state.fx->timer_is_current(id, generation)) {
          apply(self, self->state.role->on_timer(core_now(), id));
        }
      },
      [self](averager_step_message& m) {
        auto& st = self->state;
        if (st.role->busy()) {
          m.done->deliver(make_error(errc::unavailable, "expected one averaging step at a time, but a step "
                                                        "is running; wait for it or cancel it first"));
          return;
        }
        st.done = std::move(m.done);
        apply(self, st.role->step(core_now(), std::move(m.step)));
      },
      [self](averager_control_message& m) { apply(self, m.run(*self->state.role, core_now())); },
      [self](averager_dht_message& m) {
        auto& st = self->state;
        const core::TimePoint now = core_now();
        if (m.declare) {
          const bool ok = m.result.status.ok() && !m.result.stored.empty() && m.result.stored[0];
          apply(self, st.role->on_declared(now, m.op, ok));
        } else {
          const std::optional<core::dht::FoundValue> none;
          const auto& found = m.result.found.empty() ? none : m.result.found[0];
          const double dht_now = core::to_seconds(now) +
                                 (std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
                                  core::to_seconds(core_now()));
          apply(self, st.role->on_averagers(now, m.op, mm::declared_averagers(found, dht_now)));
        }
      },
  };
}

std::vector<std::string> handles_of(const AveragerActorConfig& config) {
  std::vector<std::string> out{config.role.part_handle};
  if (config.serve_join) out.emplace_back(mm::k_join_handle);
  return out;
}

}  // namespace

caf::actor spawn_averager_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, AveragerActorConfig config) {
  const auto handles = handles_of(config);
  auto gw_ref = gw;
  auto a = sys.spawn(averager_actor, std::move(gw), std::move(config));
  for (const auto& handle : handles) gw_ref->serve(handle, a);
  return a;
}

void stop_averager_actor(Gateway& gw, const caf::actor& averager, const AveragerActorConfig& config) {
  for (const auto& handle : handles_of(config)) gw.unserve(handle);
  if (averager) caf::anon_send_exit(averager, caf::exit_reason::user_shutdown);
}

void submit_step(const caf::actor& averager, mm::AveragerStep step, StepDone done) {
  caf::anon_send(averager, averager_step_message{std::move(step), std::make_shared<StepDoneOnce>(std::move(done))});
}

void submit_control(const caf::actor& averager,
                    std::function<mm::AveragerEffects(mm::AveragerRole&, core::TimePoint)> control) {
  caf::anon_send(averager, averager_control_message{std::move(control)});
}

}  // namespace apiary::actors
