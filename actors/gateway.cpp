#include "actors/gateway.hpp"

#include "actors/type_ids.hpp"
#include "messages/log/log.hpp"
#include "transport/local/transport.hpp"
#include "transport/ucx/transport.hpp"

namespace apiary::actors {
namespace {

/// The one delivery of call `id` that never leaves: its error.
Delivery unsent(CallId id, const std::string& handle, const PeerKey& peer, pb::RpcKind kind, Error why) {
  Delivery d;
  d.sink = id;
  d.call = id;
  d.kind = DeliveryKind::error;
  d.final = true;
  d.handle = handle;
  d.peer = peer;
  d.rpc_kind = kind;
  d.error = std::move(why);
  return d;
}

}  // namespace

Result<std::shared_ptr<Gateway>> Gateway::start(caf::actor_system& /*sys*/, GatewayConfig config) {
  std::unique_ptr<transport::Transport> t;
  if (config.backend == Backend::ucx) {
    t = std::make_unique<transport::ucx::Transport>(config.transport);
  } else {
    static auto fabric = std::make_shared<transport::local::Fabric>();  // the process's one
    t = std::make_unique<transport::local::Transport>(fabric, config.transport);
  }
  std::shared_ptr<Gateway> gw(new Gateway(std::move(t)));
  gw->insecure_ = config.transport.insecure;
  gw->channel_proves_ = config.backend == Backend::ucx && !config.transport.insecure;
  auto bound = gw->transport_->start(gw.get(), config.host, config.port);
  if (!bound) {
    log::process_logger().log(log::Level::error, "gateway.start_failed", "host", config.host, "port", config.port,
                              "why", bound.error().message);
    return bound.error();
  }
  gw->address_ = *bound;
  log::process_logger().log(log::Level::info, "gateway.listen", "address", *bound, "backend",
                            config.backend == Backend::ucx ? "ucx" : "local");
  // Calls to our own address never leave the process (see execute); the key is the
  // transport thread's to read, so it is set there.
  Gateway* raw = gw.get();
  gw->transport_->post([raw, self = *bound, peer_id = config.transport.peer_id] {
    raw->thread_.store(std::this_thread::get_id());
    raw->self_key_ = self;
    raw->self_peer_id_ = peer_id;
  });
  return gw;
}

Gateway::~Gateway() { stop(); }

void Gateway::stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);  // callable from several threads
  if (stopped_.exchange(true)) return;
  transport_->stop();
  // The transport thread is gone: drop the actor handles, so services (which hold the
  // gateway) and callers can terminate.
  sinks_.clear();
  service_sinks_.clear();
  landings_.clear();
  direct_queue_.clear();
  answers_to_sign_.clear();
  answers_to_check_.clear();
  authorizers_.clear();
  // Hosts on the transport thread stop with it: a host's own stop, posted there, may
  // never have run, and a running host holds the gateway.
  const auto attached = std::move(attached_);
  attached_.clear();
  for (const auto& sink : attached) sink->on_gateway_stopped();
}

CallId Gateway::open(const DeliveryTarget& reply_to, const PeerKey& peer, const std::string& handle,
                     pb::RpcKind kind, std::chrono::nanoseconds timeout, std::optional<Payload> first,
                     bool end, std::string caller, std::vector<Landing> landings, std::string callee) {
  const CallId id = next_call_++;
  if (stopped_.load()) {  // nothing would ever answer: say so at once
    Delivery d = unsent(id, handle, peer, kind,
                        make_error(errc::unavailable, "the gateway is stopped; call to '{}' at {} not sent", handle, peer));
    if (reply_to.direct) reply_to.direct->deliver(std::move(d));  // its thread is gone: here
    else caf::anon_send(reply_to.actor, std::move(d));
    return id;
  }
  run_on_thread([this, id, reply_to, peer, handle, kind, timeout, first = std::move(first), end,
                     caller = std::move(caller), landings = std::move(landings),
                     callee = std::move(callee)]() mutable {
    sinks_.insert_or_assign(id, reply_to);  // caller-side sinks are the call ids themselves
    // Posted before the call leaves, so before any answer can arrive.
    if (!landings.empty()) {
      landings_[id] = Posted{peer, std::deque<Landing>(std::make_move_iterator(landings.begin()),
                                                       std::make_move_iterator(landings.end()))};
    }
    std::string auth;
    if (!authorizers_.empty()) {
      auto signed_open = sign_open(id, handle, caller, callee);
      if (!signed_open) {  // the call cannot leave: its caller hears why at once
        execute(core::rpc::Effects{{}, {unsent(id, handle, peer, kind, signed_open.error())}});
        return;
      }
      auth = std::move(*signed_open);
    }
    auto fx = engine_.open(now(), id, id, peer, handle, kind, timeout, std::move(first), end, caller, callee);
    if (!auth.empty()) {
      for (auto& f : fx.frames) {
        if (f.envelope.kind() == pb::OPEN) f.envelope.set_auth(std::move(auth));
      }
    }
    execute(std::move(fx));
  });
  return id;
}

void Gateway::send(CallId call, Payload message, bool end) {
  run_on_thread([this, call, message = std::move(message), end]() mutable {
    auto fx = engine_.send(now(), call, std::move(message), end);
    if (!answers_to_sign_.empty()) sign_answer(call, fx);
    execute(std::move(fx));
    forget_if_over(call);
  });
}

void Gateway::end(CallId call) {
  run_on_thread([this, call] {
    execute(engine_.end(now(), call));
    forget_if_over(call);
  });
}

void Gateway::forget_if_over(CallId call) {
  // A call can end without a final delivery (cancelled, or ended by us after the callee
  // had): its caller-side sink would otherwise hold the actor until the gateway stops.
  if (engine_.has_call(call)) return;
  if (call < core::rpc::k_first_served_call) {
    sinks_.erase(call);
    landings_.erase(call);
  }
  if (!authorizers_.empty()) {
    answers_to_sign_.erase(call);
    answers_to_check_.erase(call);
  }
}

void Gateway::fail(CallId call, Error error) {
  run_on_thread([this, call, error = std::move(error)] {
    execute(engine_.fail(now(), call, error));
    forget_if_over(call);
  });
}

void Gateway::cancel(CallId call, std::string reason) {
  run_on_thread([this, call, reason = std::move(reason)] {
    execute(engine_.cancel(now(), call, reason));
    forget_if_over(call);
  });
}

void Gateway::serve(const std::string& handle, const DeliveryTarget& service) {
  const auto sink = next_service_sink_++;
  run_on_thread([this, handle, service, sink] {
    if (auto old = service_sinks_.find(handle); old != service_sinks_.end()) sinks_.erase(old->second);
    service_sinks_[handle] = sink;
    sinks_.insert_or_assign(sink, service);
    engine_.serve(handle, sink);
  });
}

void Gateway::unserve(const std::string& handle) {
  run_on_thread([this, handle] {
    engine_.unserve(handle);
    if (auto it = service_sinks_.find(handle); it != service_sinks_.end()) {
      sinks_.erase(it->second);
      service_sinks_.erase(it);
    }
  });
}

std::future<std::string> Gateway::describe(const PeerKey& peer) {
  auto promise = std::make_shared<std::promise<std::string>>();
  auto fut = promise->get_future();
  transport_->post([this, peer, promise] { promise->set_value(transport_->describe(peer)); });
  return fut;
}

std::future<Result<transport::RelayGrant>> Gateway::reserve_relay(const PeerKey& relay, const std::string& peer_id) {
  auto promise = std::make_shared<std::promise<Result<transport::RelayGrant>>>();
  auto fut = promise->get_future();
  run_on_thread([this, relay, peer_id, promise] {
    transport_->reserve(relay, peer_id,
                        [promise](Result<transport::RelayGrant> g) { promise->set_value(std::move(g)); });
  });
  return fut;
}


}  // namespace apiary::actors
