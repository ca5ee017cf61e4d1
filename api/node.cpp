#include "api/node.hpp"

#include <caf/all.hpp>

#include "actors/ping/ping_actor.hpp"
#include "actors/type_ids.hpp"
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
  Result<messages::Ed25519PrivateKey> key = make_error(errc::internal, "unset");
  if (options.identity_file.empty()) {
    key = messages::Ed25519PrivateKey::generate();
  } else {
    key = messages::load_key_file(options.identity_file);
    if (!key && key.error().code == errc::not_found) {
      return make_error(errc::not_found, "identity file {}: no such file; create one with `apiary identity create {}`",
                        options.identity_file, options.identity_file);
    }
  }
  if (!key) return key.error();

  std::unique_ptr<Node> node(new Node());
  node->id_ = messages::PeerId::from_public_key(key->public_key());
  node->config_ = std::make_unique<caf::actor_system_config>();
  // CAF's idle workers otherwise poll with 50 µs sleeps, adding 50-100 µs per hop.
  node->config_->set("work-stealing.moderate-poll-attempts", 0);
  if (options.threads > 0) node->config_->set("scheduler.max-threads", options.threads);
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
  caf::scoped_actor self{*system_};
  std::string table;
  self->request(impl_->ping, std::chrono::seconds(1), actors::report_atom::value)
      .receive([&](std::string& t) { table = std::move(t); },
               [&](caf::error& e) { table = "rtt table unavailable: " + system_->render(e) + "\n"; });
  return table;
}

void Node::stop() {
  if (impl_ && impl_->ping) {
    caf::anon_send_exit(impl_->ping, caf::exit_reason::user_shutdown);
    impl_->ping = caf::actor{};
  }
  if (gateway_) gateway_->stop();
}

}  // namespace apiary
