#include "api/runtime.hpp"

#include <random>
#include <utility>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/effects_executor.hpp"
#include "actors/gateway.hpp"
#include "api/startup.hpp"
#include "core/rpc/auth.hpp"
#include "messages/identity/key_file.hpp"

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

/// Turns on `authorization` for `key`'s calls and handles on `gw` (nothing when off).
Status authorize(actors::Gateway& gw, const messages::Ed25519PrivateKey& key, const Authorization& authorization) {
  if (!authorization.on()) return ok_status();
  auto rng = std::make_shared<std::mt19937_64>((std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}());
  core::rpc::NonceSource nonces = [rng] {
    std::string nonce(core::rpc::k_auth_nonce_size, '\0');
    const std::uint64_t bits = (*rng)();
    for (std::size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<char>((bits >> (8 * i)) & 0xff);
    return nonce;
  };
  std::shared_ptr<core::rpc::Authorizer> authorizer;
  if (authorization.issuer) {
    authorizer = std::make_shared<core::rpc::TokenAuthorizer>(key, authorization.issuer, std::move(nonces));
  } else {
    auto authority = messages::load_key_file(authorization.authority_file);
    if (!authority) {
      return make_error(authority.error().code, "authority key file '{}': {}", authorization.authority_file,
                        authority.error().message);
    }
    auto shared = core::rpc::shared_authority_authorizer(*authority, key, "apiary", std::move(nonces));
    if (!shared) return shared.error();
    authorizer = std::move(*shared);
  }
  gw.authorize(std::move(authorizer));
  return ok_status();
}

/// A relay's limits must each let something through: a zero would refuse every slot or
/// end every relayed connection at once.
Status check_relay_limits(const transport::RelayLimits& l) {
  const std::pair<const char*, bool> zeros[] = {
      {"reservation", l.reservation.count() <= 0}, {"reservation_bytes", l.reservation_bytes == 0},
      {"max_reservations", l.max_reservations == 0}, {"max_circuits_per_peer", l.max_circuits_per_peer == 0},
      {"circuit", l.circuit.count() <= 0},         {"circuit_bytes", l.circuit_bytes == 0}};
  for (const auto& [name, zero] : zeros) {
    if (zero) return make_error(errc::invalid_argument, "relay limit {} must be positive", name);
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<Runtime>> Runtime::start(const RuntimeOptions& options) {
  const api::CafThreadRelease released;
  if (options.relay_service) {
    if (auto ok = check_relay_limits(options.relay_limits); !ok) return ok.error();
  }
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
  if (options.relay_service) gc.transport.relay_service = options.relay_limits;
  gc.host = listen->host;
  gc.port = listen->port;
  auto gw = actors::Gateway::start(*rt->system_, gc);
  if (!gw) return gw.error();
  rt->gateway_ = *gw;
  if (auto ok = authorize(*rt->gateway_, *key, options.authorization); !ok) {
    rt->gateway_->stop();
    return ok.error();
  }
  auto bound = bound_address(*rt->gateway_, rt->peer_id_);
  if (!bound) return bound.error();
  rt->address_ = *bound;
  rt->dht_epoch_ = epoch_now();  // read once: every facade on the runtime shares it
  return rt;
}

Result<std::unique_ptr<Runtime>> Runtime::attach(caf::actor_system& system, std::shared_ptr<actors::Gateway> gateway,
                                                 const std::string& identity_file,
                                                 const Authorization& authorization) {
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
  if (auto ok = authorize(*rt->gateway_, *key, authorization); !ok) return ok.error();
  rt->authorized_ = authorization.on();
  auto bound = bound_address(*rt->gateway_, rt->peer_id_);
  if (!bound) return bound.error();
  rt->address_ = *bound;
  rt->dht_epoch_ = epoch_now();
  return rt;
}

Status Runtime::reach_through(const messages::Multiaddr& relay, std::chrono::milliseconds timeout) {
  if (!relay.peer || relay.relayed()) {
    return make_error(errc::invalid_argument, "a relay is named by its own address with its PeerID "
                      "(/ip4/HOST/tcp/PORT/p2p/RELAY), not '{}'", relay.to_string());
  }
  // The slot is this identity's (on a shared gateway, the connection proved it too).
  auto grant = gateway_->reserve_relay(relay.host_port(), peer_id_.bytes());
  if (grant.wait_for(timeout) != std::future_status::ready) {
    return make_error(errc::deadline_exceeded, "the relay {} did not answer a reservation within {} ms",
                      relay.to_string(), timeout.count());
  }
  auto g = grant.get();
  if (!g) return g.error();
  messages::Multiaddr via = relay;
  via.relay = relay.peer;
  via.peer.reset();
  // Peers are told the relay's listen address; each reaches a caller behind this gateway
  // at it followed by the caller's PeerID (each identity reserves its own slot).
  gateway_->advertise(via.host_port());
  via.peer = peer_id_;
  address_ = via;
  return ok_status();
}

Runtime::~Runtime() { stop(); }

core::TimePoint Runtime::now() const { return actors::core_now(); }

void Runtime::stop() {
  if (gateway_ && own_gateway_) gateway_->stop();
  // An attached identity leaves the shared gateway: its authorizer goes with it.
  if (gateway_ && !own_gateway_ && authorized_) {
    gateway_->deauthorize(peer_id_.bytes());
    authorized_ = false;
  }
}

}  // namespace apiary
