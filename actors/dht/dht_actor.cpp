#include "actors/dht/dht_actor.hpp"

#include <chrono>
#include <map>
#include <unordered_map>

#include <caf/all.hpp>

#include "actors/effects_executor.hpp"
#include "actors/type_ids.hpp"
#include "messages/identity/multiaddr.hpp"

namespace apiary::actors {
namespace {

struct dht_state {
  std::string caller;  ///< PeerID bytes named in calls when the gateway is shared
  /// "@<PeerID>" per peer address already seen ("" when it names no peer): calls to a
  /// known peer skip parsing its multiaddr again.
  std::unordered_map<std::string, std::string> suffixes;
  std::unique_ptr<core::dht::Node> node;
  std::unique_ptr<EffectExecutor> fx;
  std::map<core::dht::OpId, std::shared_ptr<DhtOpDone>> waiting;  ///< op -> its caller
  core::dht::OpId next_op = 1;
};

using self_t = caf::stateful_actor<dht_state>;

/// Executes effects; calls that fail on the spot go straight back to the node.
void run(self_t* self, core::Effects effects) {
  for (auto& effect : effects) {
    auto* call = std::get_if<core::Call>(&effect);
    if (call == nullptr) continue;
    // Address the node behind the peer's gateway by its PeerID, when the address names it.
    auto known = self->state.suffixes.find(call->peer);
    if (known == self->state.suffixes.end()) {
      auto addr = messages::Multiaddr::parse(call->peer);
      std::string suffix = addr && addr->peer ? "@" + addr->peer->to_string() : std::string{};
      known = self->state.suffixes.emplace(call->peer, std::move(suffix)).first;
    }
    call->handle += known->second;
    call->caller = self->state.caller;
  }
  auto failed = self->state.fx->execute(std::move(effects));
  for (auto& r : failed) run(self, self->state.node->on_response(core_now(), r.call, r.result));
}

/// Runs the effects of one input, then hands every finished operation to its caller.
void settle(self_t* self, core::Effects effects) {
  auto& st = self->state;
  run(self, std::move(effects));
  for (auto& result : st.node->take_completed()) {
    auto it = st.waiting.find(result.op);
    if (it == st.waiting.end()) continue;  // an operation the node started itself
    auto done = std::move(it->second);
    st.waiting.erase(it);
    done->deliver(std::move(result));
  }
}

caf::behavior dht_actor(self_t* self, std::shared_ptr<Gateway> gw, DhtActorConfig config) {
  // DHT time is Unix time: system clock seconds = core_now() seconds + epoch.
  const double epoch = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() -
                       core::to_seconds(core_now());
  self->state.node = std::make_unique<core::dht::Node>(config.id, config.self_addr, config.node,
                                                       std::move(config.validator), epoch);
  if (config.authorizer) self->state.node->set_authorizer(std::move(config.authorizer));
  if (config.shared_gateway) self->state.caller = config.peer_id.bytes();
  self->state.fx = std::make_unique<EffectExecutor>(self, std::move(gw));
  return {
      [self](Delivery& d) {
        auto& st = self->state;
        if (auto req = st.fx->request_of(d)) {
          const auto from = peer_addr_of(d.peer_listen_addr, d.peer_id);
          const std::string base = req->handle.substr(0, req->handle.find('@'));
          settle(self, st.node->on_request(core_now(), req->id, base, from, req->body));
        }
        if (auto resp = st.fx->response_of(d)) settle(self, st.node->on_response(core_now(), resp->call, resp->result));
      },
      [self](timer_atom, core::TimerId id, std::uint64_t generation) {
        if (self->state.fx->timer_is_current(id, generation)) settle(self, self->state.node->on_timer(core_now(), id));
      },
      [self](dht_op_message& m) {
        auto& st = self->state;
        const core::dht::OpId op = st.next_op++;
        st.waiting.emplace(op, std::move(m.done));
        settle(self, m.start(*st.node, core_now(), op));
      },
      [self](dht_look_message& m) { m.look->run(*self->state.node, core_now()); },
  };
}

}  // namespace

std::string addressed_handle(const char* base, const messages::PeerId& peer) {
  return std::string(base) + "@" + peer.to_string();
}

namespace {

/// The handles a node serves: addressed to its PeerID, and the plain ones too (for
/// callers that know only host:port) unless the gateway is shared.
std::vector<std::string> served_handles(const messages::PeerId& peer, bool shared) {
  std::vector<std::string> out;
  for (const char* handle : {core::dht::k_ping_handle, core::dht::k_store_handle, core::dht::k_find_handle}) {
    out.push_back(addressed_handle(handle, peer));
    if (!shared) out.emplace_back(handle);
  }
  return out;
}

}  // namespace

caf::actor spawn_dht_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, DhtActorConfig config) {
  const bool serve = !config.node.protocol.client_mode;
  const auto handles = served_handles(config.peer_id, config.shared_gateway);
  auto gw_ref = gw;
  auto a = sys.spawn(dht_actor, std::move(gw), std::move(config));
  if (serve) {
    for (const auto& handle : handles) gw_ref->serve(handle, a);
  }
  return a;
}

void stop_dht_actor(Gateway& gw, const caf::actor& dht, const messages::PeerId& peer, bool shared) {
  for (const auto& handle : served_handles(peer, shared)) gw.unserve(handle);
  if (dht) caf::anon_send_exit(dht, caf::exit_reason::user_shutdown);
}

void submit_dht_op(const caf::actor& dht,
                   std::function<core::Effects(core::dht::Node&, core::TimePoint, core::dht::OpId)> start,
                   std::function<void(core::dht::OpResult)> deliver) {
  caf::anon_send(dht, dht_op_message{std::move(start), std::make_shared<DhtOpDone>(std::move(deliver))});
}

std::future<core::dht::OpResult> submit_dht_op(
    const caf::actor& dht, std::function<core::Effects(core::dht::Node&, core::TimePoint, core::dht::OpId)> start) {
  auto promise = std::make_shared<std::promise<core::dht::OpResult>>();
  auto future = promise->get_future();
  submit_dht_op(dht, std::move(start), [promise](core::dht::OpResult r) { promise->set_value(std::move(r)); });
  return future;
}

void send_dht_look(const caf::actor& dht, std::shared_ptr<DhtLook> look) {
  caf::anon_send(dht, dht_look_message{std::move(look)});
}

core::PeerAddr peer_addr_of(const std::string& listen_host_port, const std::string& peer_id_bytes) {
  const auto colon = listen_host_port.rfind(':');
  if (listen_host_port.empty() || colon == std::string::npos) return {};
  std::string host = listen_host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port_text = listen_host_port.substr(colon + 1);
  if (port_text.empty() || port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos) {
    return {};
  }
  const unsigned long port = std::stoul(port_text);
  if (port == 0 || port > 65535) return {};
  std::optional<messages::PeerId> peer;
  if (!peer_id_bytes.empty()) {
    if (auto id = messages::PeerId::from_bytes(peer_id_bytes)) peer = *id;
  }
  auto addr = messages::Multiaddr::from_ip(host, static_cast<std::uint16_t>(port), peer);
  if (!addr) return {};
  return addr->to_string();
}

}  // namespace apiary::actors
