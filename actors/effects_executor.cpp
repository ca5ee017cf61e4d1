#include "actors/effects_executor.hpp"

#include "actors/type_ids.hpp"
#include "messages/identity/multiaddr.hpp"

namespace apiary::actors {

core::TimePoint core_now() { return std::chrono::steady_clock::now().time_since_epoch(); }

Result<PeerKey> peer_key_of(const core::PeerAddr& addr) {
  auto m = messages::Multiaddr::parse(addr);
  if (!m) return m.error();
  return m->is_ip6 ? fmt::format("[{}]:{}", m->host, m->port) : fmt::format("{}:{}", m->host, m->port);
}

EffectExecutor::EffectExecutor(caf::event_based_actor* self, std::shared_ptr<Gateway> gw)
    : self_(self), gw_(std::move(gw)) {}

std::vector<CoreResponse> EffectExecutor::execute(core::Effects fx) {
  std::vector<CoreResponse> failed;
  for (auto& effect : fx) {
    if (auto* call = std::get_if<core::Call>(&effect)) {
      auto key = peer_key_of(call->peer);
      if (!key) {
        failed.push_back(CoreResponse{call->id, key.error()});
        continue;
      }
      const CallId id = gw_->unary(caf::actor_cast<caf::actor>(self_), *key, call->handle,
                                   Buffer::copy_of(call->request), call->timeout, call->caller);
      calls_[id] = call->id;
    } else if (auto* reply = std::get_if<core::Reply>(&effect)) {
      auto it = requests_.find(reply->request);
      if (it == requests_.end()) continue;  // the call ended (cancel, deadline) meanwhile
      if (reply->response) {
        gw_->send(it->second, Buffer::copy_of(*reply->response), true);
      } else {
        gw_->fail(it->second, reply->response.error());
      }
      requests_.erase(it);
    } else if (auto* set = std::get_if<core::SetTimer>(&effect)) {
      const auto gen = next_generation_++;
      timers_[set->id] = gen;
      const auto delay = std::max(core::Duration::zero(), set->at - core_now());
      self_->delayed_send(self_, delay, timer_atom::value, set->id, gen);
    } else if (auto* cancel = std::get_if<core::CancelTimer>(&effect)) {
      timers_.erase(cancel->id);
    }
  }
  return failed;
}

std::optional<CoreRequest> EffectExecutor::request_of(Delivery& d) {
  if (d.call < core::rpc::k_first_served_call) return std::nullopt;  // not a served call
  if (d.kind == DeliveryKind::error) {
    for (auto it = requests_.begin(); it != requests_.end(); ++it) {
      if (it->second == d.call) {
        requests_.erase(it);
        break;
      }
    }
    return std::nullopt;
  }
  if (d.kind != DeliveryKind::open) return std::nullopt;
  const core::RequestId id = d.call;  // unique while the call is open
  requests_[id] = d.call;
  return CoreRequest{id, d.handle, d.peer, std::string(d.data.view())};
}

std::optional<CoreResponse> EffectExecutor::response_of(Delivery& d) {
  auto it = calls_.find(d.call);
  if (it == calls_.end()) return std::nullopt;
  if (d.has_message) partial_[d.call] = std::move(d.data);
  if (!d.final) return std::nullopt;
  CoreResponse r{it->second, std::string{}};
  if (d.kind == DeliveryKind::error) {
    r.result = d.error;
  } else if (auto p = partial_.find(d.call); p != partial_.end()) {
    r.result = std::string(p->second.view());
  } else {
    r.result = make_error(errc::protocol, "call ended without a response");
  }
  partial_.erase(d.call);
  calls_.erase(it);
  return r;
}

bool EffectExecutor::timer_is_current(core::TimerId id, std::uint64_t generation) const {
  auto it = timers_.find(id);
  return it != timers_.end() && it->second == generation;
}

}  // namespace apiary::actors
