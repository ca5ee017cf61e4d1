#include "api/runtime.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/effects_executor.hpp"
#include "actors/gateway.hpp"
#include "api/startup.hpp"

namespace apiary {
namespace {

/// The bound "host:port" of `gw` as a multiaddr naming `peer`.
Result<messages::Multiaddr> bound_address(const actors::Gateway& gw, const messages::PeerId& peer) {
  return messages::Multiaddr::from_host_port(gw.address(), "the gateway's address", peer);
}

/// Unix seconds at the steady clock's zero: DHT time is to_seconds(core_now()) + this.
double epoch_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
         core::to_seconds(actors::core_now());
}

}  // namespace

Result<std::unique_ptr<Runtime>> Runtime::start(const RuntimeOptions& options) {
  const api::CafThreadRelease released;
  auto listen = messages::Multiaddr::parse(options.listen);
  if (!listen) return make_error(errc::invalid_argument, "listen address '{}': {}", options.listen, listen.error().message);
  auto key = api::load_identity(options.identity_file);
  if (!key) return key.error();

  std::unique_ptr<Runtime> rt(new Runtime());
  rt->key_ = *key;
  rt->peer_id_ = messages::PeerId::from_public_key(key->public_key());
  if (options.system != nullptr) {
    rt->system_ = options.system;
  } else {
    rt->config_ = api::node_actor_system_config(options.threads);
    rt->own_system_ = std::make_unique<caf::actor_system>(*rt->config_);
    rt->system_ = rt->own_system_.get();
  }

  actors::GatewayConfig gc;
  gc.transport.mode = options.mode;
  gc.transport.busy_poll = options.busy_poll;
  gc.transport.peer_id = rt->peer_id_.bytes();
  gc.transport.identity = *key;
  gc.transport.insecure = options.insecure;
  gc.host = listen->host;
  gc.port = listen->port;
  auto gw = actors::Gateway::start(*rt->system_, gc);
  if (!gw) return gw.error();
  rt->gateway_ = *gw;
  auto bound = bound_address(*rt->gateway_, rt->peer_id_);
  if (!bound) return bound.error();
  rt->address_ = *bound;
  rt->dht_epoch_ = epoch_now();  // read once: every facade on the runtime shares it
  return rt;
}

Result<std::unique_ptr<Runtime>> Runtime::attach(caf::actor_system& system, std::shared_ptr<actors::Gateway> gateway,
                                                 const std::string& identity_file) {
  if (!gateway) return make_error(errc::invalid_argument, "Runtime::attach needs a running gateway, got none");
  auto key = api::load_identity(identity_file);
  if (!key) return key.error();
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->key_ = *key;
  rt->peer_id_ = messages::PeerId::from_public_key(key->public_key());
  rt->system_ = &system;
  rt->gateway_ = std::move(gateway);
  rt->own_gateway_ = false;
  // This runtime's nodes name their own PeerID as their calls' caller: the gateway's
  // connections prove it.
  rt->gateway_->prove_identity(*key);
  auto bound = bound_address(*rt->gateway_, rt->peer_id_);
  if (!bound) return bound.error();
  rt->address_ = *bound;
  rt->dht_epoch_ = epoch_now();
  return rt;
}

Runtime::~Runtime() { stop(); }

core::TimePoint Runtime::now() const { return actors::core_now(); }

void Runtime::stop() {
  if (gateway_ && own_gateway_) gateway_->stop();
}

}  // namespace apiary
