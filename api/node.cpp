#include "api/node.hpp"

#include <caf/all.hpp>

#include "actors/ping/ping_actor.hpp"
#include "actors/type_ids.hpp"
#include "api/startup.hpp"
#include "messages/identity/key_file.hpp"

namespace apiary {

struct Node::Impl {
  caf::actor ping;
};

Result<std::unique_ptr<Node>> Node::start(const NodeOptions& options) {
  auto listen = messages::Multiaddr::parse(options.listen);
  if (!listen) return make_error(errc::invalid_argument, "--listen: {}", listen.error().message);
  // Peers are named by their listen address alone (/p2p/... dropped), so one peer has
  // one name however it was introduced.
  std::vector<std::string> bootstrap;
  for (const auto& b : options.bootstrap) {
    auto m = messages::Multiaddr::parse(b);
    if (!m) return make_error(errc::invalid_argument, "--bootstrap '{}': {}", b, m.error().message);
    bootstrap.push_back(m->without_peer().to_string());
  }
  auto key = api::load_identity(options.identity_file);
  if (!key) return key.error();

  std::unique_ptr<Node> node(new Node());
  node->id_ = messages::PeerId::from_public_key(key->public_key());
  node->config_ = api::node_actor_system_config(options.threads);
  node->system_ = std::make_unique<caf::actor_system>(*node->config_);

  actors::GatewayConfig gc;
  gc.transport.mode = options.mode;
  gc.transport.peer_id = node->id_.bytes();
  gc.host = listen->host;
  gc.port = listen->port;
  auto gw = actors::Gateway::start(*node->system_, gc);
  if (!gw) return gw.error();
  node->gateway_ = *gw;
  const auto colon = node->gateway_->address().rfind(':');
  const auto port = static_cast<std::uint16_t>(std::stoi(node->gateway_->address().substr(colon + 1)));
  auto bound = messages::Multiaddr::from_ip(listen->host, port, node->id_);
  if (!bound) return bound.error();
  node->address_ = *bound;

  core::ping::Config ping;
  ping.interval = options.ping_interval;
  node->impl_ = std::make_unique<Impl>();
  node->impl_->ping = actors::spawn_ping_actor(*node->system_, node->gateway_, node->address_.without_peer().to_string(),
                                               ping, bootstrap);
  return node;
}

Node::~Node() { stop(); }

std::string Node::rtt_table() {
  if (!impl_ || !impl_->ping) return {};
  auto table = actors::ping_report(impl_->ping);
  return table ? *table : "rtt table unavailable: " + table.error().message + "\n";
}

void Node::stop() {
  if (impl_ && impl_->ping) {
    caf::anon_send_exit(impl_->ping, caf::exit_reason::user_shutdown);
    impl_->ping = caf::actor{};
  }
  if (gateway_) gateway_->stop();
}

}  // namespace apiary
