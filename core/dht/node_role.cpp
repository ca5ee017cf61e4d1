#include "core/dht/node_role.hpp"


namespace apiary::core::dht {

std::string addressed_handle(const char* base, const messages::PeerId& peer) {
  return std::string(base) + "@" + peer.to_string();
}

NodeRole::NodeRole(std::unique_ptr<Node> node, NodeRoleConfig config)
    : node_(std::move(node)), config_(std::move(config)) {
  if (config_.shared_transport) caller_ = config_.peer_id.bytes();
  if (config_.addressed) addressing_ = Addressing(config_.peer_id, config_.shared_transport);
}

std::vector<std::string> NodeRole::served(const messages::PeerId& peer, bool shared_transport) {
  return Addressing(peer, shared_transport).served({k_ping_handle, k_store_handle, k_find_handle});
}

std::vector<std::string> NodeRole::handles() const {
  if (node_->config().protocol.client_mode) return {};
  return addressing_.served({k_ping_handle, k_store_handle, k_find_handle});
}

Effects NodeRole::on(TimePoint now, Input input) {
  if (auto* r = std::get_if<Request>(&input)) {
    const auto at = r->handle.find('@');
    const std::string body(r->body.view());
    if (at == std::string::npos) return finish(node_->on_request(now, r->id, r->handle, r->from, body));
    return finish(node_->on_request(now, r->id, r->handle.substr(0, at), r->from, body));
  }
  if (auto* r = std::get_if<Response>(&input)) return finish(node_->on_response(now, r->call, r->result));
  if (auto* t = std::get_if<TimerFired>(&input)) return finish(node_->on_timer(now, t->id));
  if (auto* c = std::get_if<LocalCall>(&input)) {
    if (c->method == k_run_method) {
      const auto* op = c->args.as<NodeOp>();
      if (op == nullptr || !*op) {
        return {Complete{c->op, make_error(errc::invalid_argument, "the DHT node's '{}' takes a NodeOp, got a {}",
                                           k_run_method, c->args.type_name())}};
      }
      asked_.insert(c->op);
      return finish((*op)(*node_, now, c->op));
    }
    if (c->method == k_look_method) {
      const auto* look = c->args.as<NodeLook>();
      if (look == nullptr || !*look) {
        return {Complete{c->op, make_error(errc::invalid_argument, "the DHT node's '{}' takes a NodeLook, got a {}",
                                           k_look_method, c->args.type_name())}};
      }
      (*look)(*node_, now);
      return {Complete{c->op, Value{}}};
    }
    return {unknown_method(*c, "the DHT node")};
  }
  return {};  // no streams; a peer going down shows as failed calls
}

Effects NodeRole::finish(Effects fx) {
  // Address the node behind each callee's transport by its PeerID, when the address names it.
  addressing_.address(fx);
  name_caller(fx, caller_);
  for (auto& result : node_->take_completed()) {
    if (asked_.erase(result.op) == 0) continue;  // an operation the node started itself
    const OpId op = result.op;
    fx.push_back(Complete{op, Value::of(std::move(result))});
  }
  return fx;
}

}  // namespace apiary::core::dht
