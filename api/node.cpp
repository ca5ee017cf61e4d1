#include "api/node.hpp"

#include <caf/all.hpp>

#include "actors/rpc.hpp"
#include "api/startup.hpp"
#include "core/ping/pinger.hpp"
#include "ping.pb.h"
#include "actors/ping/ping_actor.hpp"
#include "actors/type_ids.hpp"

namespace apiary {

struct Node::Impl {
  actors::RoleHost ping;
};

Result<std::unique_ptr<Node>> Node::start(const NodeOptions& options) {
  const api::CafThreadRelease released;
  auto listen = messages::Multiaddr::parse(options.listen);
  if (!listen) return make_error(errc::invalid_argument, "--listen: {}", listen.error().message);
  // Peers are named by their listen address alone (/p2p/... dropped), so one peer has
  // one name however it was introduced.
  std::vector<core::PeerAddr> bootstrap;
  for (const auto& b : options.bootstrap) {
    auto m = core::PeerAddr::parse(b);
    if (!m) return make_error(errc::invalid_argument, "--bootstrap '{}': {}", b, m.error().message);
    bootstrap.push_back(m->without_peer());
  }
  auto rt = Runtime::start(api::runtime_options_of(options));
  if (!rt) return rt.error();

  std::unique_ptr<Node> node(new Node());
  node->runtime_ = std::move(*rt);
  const Runtime& runtime = *node->runtime_;

  core::ping::Config ping;
  ping.interval = options.ping_interval;
  node->impl_ = std::make_unique<Impl>();
  node->impl_->ping = actors::spawn_ping_actor(runtime.system(), runtime.gateway(),
                                               core::PeerAddr(runtime.address().without_peer()), ping, bootstrap,
                                               options.host);
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
    actors::stop_role(*runtime_->gateway(), impl_->ping, {core::ping::k_handle});
    impl_->ping = actors::RoleHost{};
  }
  if (runtime_) runtime_->stop();
}

Result<std::unique_ptr<Pinger>> Pinger::start(const messages::Multiaddr& target, transport::Mode mode,
                                               bool insecure) {
  const api::CafThreadRelease released;
  std::unique_ptr<Pinger> pinger(new Pinger());
  pinger->target_ = target.host_port();
  pinger->config_ = api::node_actor_system_config(0);
  pinger->system_ = std::make_unique<caf::actor_system>(*pinger->config_);
  actors::GatewayConfig gc;
  gc.host = target.host;  // listen (ephemerally) on the same interface as the target
  gc.transport.mode = mode;
  gc.transport.insecure = insecure;
  auto gw = actors::Gateway::start(*pinger->system_, gc);
  if (!gw) return gw.error();
  pinger->gateway_ = *gw;
  return pinger;
}

Pinger::~Pinger() {
  if (gateway_) gateway_->stop();
}

PingReply Pinger::probe(std::uint64_t seq, std::chrono::milliseconds timeout) {
  caf::scoped_actor self{*system_};
  pb::PingProbe probe;
  probe.set_seq(seq);
  PingReply out;
  const auto t0 = std::chrono::steady_clock::now();
  auto r = actors::call_unary(self, *gateway_, target_, core::ping::k_handle, actors::to_buffer(probe), timeout);
  out.rtt_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (!r) {
    out.problem = r.error().what();
    return out;
  }
  out.answered = true;
  auto ack = actors::from_buffer<pb::PingAck>(*r, "ping answer");
  out.matched = ack && ack->seq() == seq;
  if (!out.matched) out.problem = ack ? "sequence mismatch" : ack.error().what();
  return out;
}

}  // namespace apiary
