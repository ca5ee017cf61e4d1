#include "actors/ping/ping_actor.hpp"

#include <caf/all.hpp>

#include "actors/effects_executor.hpp"
#include "actors/type_ids.hpp"

namespace apiary::actors {
namespace {

struct ping_state {
  std::unique_ptr<core::ping::Pinger> core;
  std::unique_ptr<EffectExecutor> fx;
};

using self_t = caf::stateful_actor<ping_state>;

/// Executes effects; calls that fail on the spot go straight back to the core.
void run(self_t* self, core::Effects effects) {
  auto failed = self->state.fx->execute(std::move(effects));
  for (auto& r : failed) run(self, self->state.core->on_response(core_now(), r.call, r.result));
}

caf::behavior ping_actor(self_t* self, std::shared_ptr<Gateway> gw, std::string self_addr, core::ping::Config config,
                         std::vector<std::string> bootstrap) {
  self->state.core = std::make_unique<core::ping::Pinger>(self_addr, config);
  self->state.fx = std::make_unique<EffectExecutor>(self, std::move(gw));
  run(self, self->state.core->start(core_now(), bootstrap));
  return {
      [self](Delivery& d) {
        auto& st = self->state;
        if (auto req = st.fx->request_of(d)) run(self, st.core->on_request(core_now(), req->id, req->body));
        if (auto resp = st.fx->response_of(d)) run(self, st.core->on_response(core_now(), resp->call, resp->result));
      },
      [self](timer_atom, core::TimerId id, std::uint64_t generation) {
        if (self->state.fx->timer_is_current(id, generation)) run(self, self->state.core->on_timer(core_now(), id));
      },
      [self](report_atom) {
        return format_rtt_table(self->state.core->self(), self->state.core->peers());
      },
  };
}

}  // namespace

caf::actor spawn_ping_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, std::string self_addr,
                            core::ping::Config config, std::vector<std::string> bootstrap) {
  auto gw_ref = gw;
  auto a = sys.spawn(ping_actor, std::move(gw), std::move(self_addr), config, std::move(bootstrap));
  gw_ref->serve(core::ping::k_handle, a);
  return a;
}

std::string format_rtt_table(const std::string& self, const std::map<core::PeerAddr, core::ping::PeerStats>& peers) {
  auto us = [](core::Duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  std::string out = fmt::format("round-trip times seen by {}\n", self);
  out += fmt::format("{:<48} {:>9} {:>10} {:>10} {:>10}  {}\n", "peer", "ok/sent", "min µs", "median µs", "max µs",
                     "last error");
  for (const auto& [addr, s] : peers) {
    out += fmt::format("{:<48} {:>4}/{:<4} {:>10.1f} {:>10.1f} {:>10.1f}  {}\n", addr, s.answered, s.sent,
                       us(s.min_rtt()), us(s.median_rtt()), us(s.max_rtt()), s.last_error);
  }
  return out;
}

}  // namespace apiary::actors
