#include "actors/ps/shard_actor.hpp"

#include "actors/role_actor.hpp"

namespace apiary::actors {

caf::actor spawn_ps_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, core::ps::ShardServer server,
                          std::shared_ptr<PsCounters> counters) {
  auto role = std::make_unique<core::ps::ShardServer>(std::move(server));
  role->set_splice_pulls(true);  // the gateway sends the parameters from where they lie
  if (!counters) return spawn_role_actor(sys, std::move(gw), std::move(role));
  return spawn_role_actor(sys, std::move(gw),
                          watched<core::ps::ShardServer>(std::move(role), [counters](const core::ps::ShardServer& s) {
                            std::size_t done = s.finished().size();
                            for (auto r : s.dropped()) done += s.finished().count(r) == 0 ? 1 : 0;
                            counters->replicas_done.store(done, std::memory_order_relaxed);
                          }));
}

void stop_ps_actor(Gateway& gw, const caf::actor& ps) {
  stop_role_actor(gw, ps, core::ps::ShardServer::served());
}

}  // namespace apiary::actors
