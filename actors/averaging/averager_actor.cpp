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

using declare_atom = caf::atom_constant<caf::atom("declare")>;

/// Call and timer ids of the state download (below the role's, above none of the
/// executor's: the actor hosts only these two cores).
constexpr std::uint64_t k_loader_base = std::uint64_t{1} << 40;

using LoadDone = std::function<void(Result<mm::DownloadedState>)>;

struct averager_state {
  std::unique_ptr<mm::AveragerRole> role;
  std::unique_ptr<EffectExecutor> fx;
  std::mt19937_64 rng;
  caf::actor dht;
  std::shared_ptr<StepDoneOnce> done;  ///< the running step's caller
  std::string caller;                  ///< PeerID bytes named in calls
  AveragerActorConfig config;
  std::optional<mm::StateLoader> loader;  ///< the running state download
  std::shared_ptr<LoadDone> loader_done;
};

using self_t = caf::stateful_actor<averager_state>;

/// Executes one input's effects: calls and timers on the gateway, DHT operations on the
/// DHT actor, the outcome to the step's caller.
void run(self_t* self, core::Effects effects);

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
  run(self, std::move(afx.rpc));
  // After the effects above: a part's answers must follow those already on their way.
  for (auto& job : afx.reduce) {
    const std::uint64_t id = job.id;
    if (!st.config.device) {
      // No device actor: a role with deferred reductions still gets its answers here.
      apply(self, st.role->on_reduced(core_now(), id, mm::reduce_part(std::move(job))));
      continue;
    }
    self->request(*st.config.device, caf::infinite, reduce_part_request{std::move(job)})
        .then([self, id](Result<mm::ReducedPart>& r) { apply(self, self->state.role->on_reduced(core_now(), id, std::move(r))); },
              [self, id](caf::error& e) {
                apply(self, self->state.role->on_reduced(
                                core_now(), id,
                                make_error(errc::unavailable, "the device actor did not reduce the part ({}); "
                                                              "this part keeps its local values",
                                           self->system().render(e))));
              });
  }
}

bool for_loader(std::uint64_t id) { return id >= k_loader_base && id < k_loader_base + mm::k_round_ids; }

/// Hands a finished download to its caller.
void settle_loader(self_t* self) {
  auto& st = self->state;
  if (!st.loader || !st.loader->finished()) return;
  auto outcome = st.loader->take_outcome();
  st.loader.reset();
  auto done = std::move(st.loader_done);
  if (done && *done && outcome) (*done)(std::move(*outcome));
}

/// Executes calls, replies and timers; calls that fail on the spot go back to their core.
void run(self_t* self, core::Effects effects) {
  auto& st = self->state;
  for (auto& effect : effects) {
    if (auto* call = std::get_if<core::Call>(&effect)) call->caller = st.caller;
  }
  for (auto& failed : st.fx->execute(std::move(effects))) {
    if (for_loader(failed.call)) {
      if (st.loader) run(self, st.loader->on_response(core_now(), failed.call, failed.result));
      settle_loader(self);
    } else {
      apply(self, st.role->on_response(core_now(), failed.call, failed.result));
    }
  }
}

/// Stores this peer's state-sharing declaration and schedules the next one.
void declare_state(self_t* self) {
  auto& st = self->state;
  const double period = st.config.declare_period;
  auto priority = mm::encode_sharing_priority(st.config.sharing_priority);
  if (!priority) return;
  core::dht::StoreItem item{core::dht::NodeId::of_str_key(mm::state_sharing_key(st.config.prefix)),
                            mm::state_sharing_subkey(st.config.role.peer_id), std::move(priority.value()), 0};
  submit_dht_op(
      st.dht,
      [item, period](core::dht::Node& node, core::TimePoint now, core::dht::OpId id) {
        core::dht::StoreItem fresh = item;
        fresh.expiration = node.dht_time(now) + period;
        return node.store(now, id, {fresh});
      },
      [](core::dht::OpResult) {});
  self->delayed_send(self, std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::duration<double>(period / 2)),
                     declare_atom::value);
}

caf::behavior averager_actor(self_t* self, std::shared_ptr<Gateway> gw, AveragerActorConfig config) {
  auto& st = self->state;
  st.rng.seed(config.seed);
  if (config.device) config.role.deferred_reductions = true;
  config.role.splice_parts = true;  // the gateway sends a part's pieces as they are
  st.role = std::make_unique<mm::AveragerRole>(config.role, [self] { return self->state.rng(); });
  st.fx = std::make_unique<EffectExecutor>(self, std::move(gw));
  st.dht = config.dht;
  st.caller = config.caller;
  if (config.sharing_priority) self->send(self, declare_atom::value);
  st.config = std::move(config);
  return {
      [self](Delivery& d) {
        auto& st = self->state;
        if (auto req = st.fx->request_view_of(d)) {
          if (req->handle == mm::k_download_state_handle) {
            const bool sharing = static_cast<bool>(st.config.state_stream);
            run(self, mm::serve_state_stream(req->id, sharing ? st.config.state_stream()
                                                              : Result<std::vector<std::string>>(std::vector<std::string>{})));
          } else {
            const auto from = peer_addr_of(d.peer_listen_addr, d.peer_id);
            apply(self, st.role->on_request(core_now(), req->id, req->handle, from, std::move(req->body)));
          }
        }
        if (auto m = st.fx->request_message_view_of(d)) {
          if (st.role->owns_request(m->request)) {
            apply(self, st.role->on_request_message(core_now(), m->request, std::move(m->message), m->last));
          }
        }
        if (auto m = st.fx->message_view_of(d)) {
          if (for_loader(m->call)) {
            if (st.loader) run(self, st.loader->on_message(core_now(), m->call, std::string(m->message.view())));
            settle_loader(self);
          } else {
            apply(self, st.role->on_message(core_now(), m->call, m->message.view()));
          }
        }
        if (auto r = st.fx->response_of(d)) {
          if (for_loader(r->call)) {
            if (st.loader) run(self, st.loader->on_response(core_now(), r->call, r->result));
            settle_loader(self);
          } else {
            apply(self, st.role->on_response(core_now(), r->call, r->result));
          }
        }
      },
      [self](timer_atom, core::TimerId id, std::uint64_t generation) {
        auto& st = self->state;
        if (!st.fx->timer_is_current(id, generation)) return;
        if (for_loader(id)) {
          if (st.loader) run(self, st.loader->on_timer(core_now(), id));
          settle_loader(self);
        } else {
          apply(self, st.role->on_timer(core_now(), id));
        }
      },
      [self](declare_atom) { declare_state(self); },
      [self](averager_load_state_message& m) {
        auto& st = self->state;
        if (st.loader) {
          (*m.done)(make_error(errc::unavailable, "expected one state download at a time, but one is running; "
                                                  "wait for it"));
          return;
        }
        m.config.id_base = k_loader_base;
        auto loader = mm::StateLoader::create(std::move(m.config));
        if (!loader) {
          (*m.done)(loader.error());
          return;
        }
        st.loader.emplace(std::move(loader.value()));
        st.loader_done = std::move(m.done);
        run(self, st.loader->start(core_now()));
        settle_loader(self);
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
          const double dht_now = core::to_seconds(now) + st.config.role.dht_epoch;
          apply(self, st.role->on_averagers(now, m.op, mm::declared_averagers(found, dht_now)));
        }
      },
  };
}

std::vector<std::string> handles_of(const AveragerActorConfig& config) {
  std::vector<std::string> out{config.role.part_handle, mm::k_download_state_handle};
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

void submit_load_state(const caf::actor& averager, mm::StateLoaderConfig config,
                       std::function<void(Result<mm::DownloadedState>)> done) {
  // Dropped unanswered (the actor stopped): the caller hears "cancelled".
  struct Once {
    std::function<void(Result<mm::DownloadedState>)> fn;
    ~Once() {
      if (fn) fn(make_error(errc::cancelled, "the averager stopped before the state download finished"));
    }
  };
  auto once = std::make_shared<Once>();
  once->fn = std::move(done);
  auto wrapped = std::make_shared<LoadDone>([once](Result<mm::DownloadedState> r) {
    auto fn = std::move(once->fn);
    once->fn = nullptr;
    if (fn) fn(std::move(r));
  });
  caf::anon_send(averager, averager_load_state_message{std::move(config), std::move(wrapped)});
}

void submit_control(const caf::actor& averager,
                    std::function<mm::AveragerEffects(mm::AveragerRole&, core::TimePoint)> control) {
  caf::anon_send(averager, averager_control_message{std::move(control)});
}

}  // namespace apiary::actors
