#include "actors/dht/dht_actor.hpp"

#include <chrono>


namespace apiary::actors {

RoleHost spawn_dht_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, DhtActorConfig config) {
  auto node = std::make_unique<core::dht::Node>(config.id, config.self_addr, config.node, std::move(config.validator),
                                                config.dht_epoch);
  return spawn_role(sys, std::move(gw),
                    std::make_unique<core::dht::NodeRole>(
                        std::move(node), core::dht::NodeRoleConfig{config.peer_id, config.shared_gateway}),
                    config.host);
}

void stop_dht_actor(Gateway& gw, const RoleHost& dht, const messages::PeerId& peer, bool shared) {
  stop_role(gw, dht, core::dht::NodeRole::served(peer, shared));
}

void submit_dht_op(const RoleHost& dht, core::dht::NodeOp start, std::function<void(core::dht::OpResult)> deliver) {
  call_role(dht, "", core::dht::k_run_method, core::Value::of(std::move(start)),
            [deliver = std::move(deliver)](Result<core::Value> r) {
              core::dht::OpResult out;
              if (!r) {
                out.status = r.error().code == errc::cancelled
                                 ? make_error(errc::cancelled,
                                              "the DHT node stopped before the operation finished; start a new node")
                                 : r.error();
              } else if (auto* result = r->as<core::dht::OpResult>()) {
                out = std::move(*result);
              } else {
                out.status = make_error(errc::internal, "the DHT node answered with a {}", r->type_name());
              }
              deliver(std::move(out));
            });
}

std::future<core::dht::OpResult> submit_dht_op(const RoleHost& dht, core::dht::NodeOp start) {
  auto promise = std::make_shared<std::promise<core::dht::OpResult>>();
  auto future = promise->get_future();
  submit_dht_op(dht, std::move(start), [promise](core::dht::OpResult r) { promise->set_value(std::move(r)); });
  return future;
}

}  // namespace apiary::actors
