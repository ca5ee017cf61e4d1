#include "actors/gateway.hpp"

#include "actors/type_ids.hpp"
#include "messages/log/log.hpp"
#include "transport/local/transport.hpp"
#include "transport/ucx/transport.hpp"

namespace apiary::actors {
namespace {

std::shared_ptr<transport::local::Fabric> process_fabric() {
  static auto fabric = std::make_shared<transport::local::Fabric>();
  return fabric;
}

}  // namespace

Result<std::shared_ptr<Gateway>> Gateway::start(caf::actor_system& /*sys*/, GatewayConfig config) {
  std::unique_ptr<transport::Transport> t;
  if (config.backend == Backend::ucx) {
    t = std::make_unique<transport::ucx::Transport>(config.transport);
  } else {
    t = std::make_unique<transport::local::Transport>(process_fabric(), config.transport);
  }
  std::shared_ptr<Gateway> gw(new Gateway(std::move(t)));
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
}

CallId Gateway::open(const caf::actor& reply_to, const PeerKey& peer, const std::string& handle,
                     pb::RpcKind kind, std::chrono::nanoseconds timeout, std::optional<Payload> first,
                     bool end, std::string caller, std::vector<Landing> landings) {
  const CallId id = next_call_++;
  if (stopped_.load()) {  // nothing would ever answer: say so at once
    Delivery d;
    d.call = id;
    d.kind = DeliveryKind::error;
    d.final = true;
    d.handle = handle;
    d.peer = peer;
    d.rpc_kind = kind;
    d.error = make_error(errc::unavailable, "the gateway is stopped; call to '{}' at {} not sent", handle, peer);
    caf::anon_send(reply_to, std::move(d));
    return id;
  }
  transport_->post([this, id, reply_to, peer, handle, kind, timeout, first = std::move(first), end,
                     caller = std::move(caller), landings = std::move(landings)]() mutable {
    sinks_[id] = reply_to;  // caller-side sinks are the call ids themselves
    // Posted before the call leaves, so before any answer can arrive.
    if (!landings.empty()) {
      landings_[id] = Posted{peer, std::deque<Landing>(std::make_move_iterator(landings.begin()),
                                                       std::make_move_iterator(landings.end()))};
    }
    execute(engine_.open(now(), id, id, peer, handle, kind, timeout, std::move(first), end, caller));
  });
  return id;
}

void Gateway::send(CallId call, Payload message, bool end) {
  transport_->post([this, call, message = std::move(message), end]() mutable {
    execute(engine_.send(now(), call, std::move(message), end));
    forget_if_over(call);
  });
}

void Gateway::end(CallId call) {
  transport_->post([this, call] {
    execute(engine_.end(now(), call));
    forget_if_over(call);
  });
}

void Gateway::forget_if_over(CallId call) {
  // A call can end without a final delivery (cancelled, or ended by us after the callee
  // had): its caller-side sink would otherwise hold the actor until the gateway stops.
  if (call < core::rpc::k_first_served_call && !engine_.has_call(call)) {
    sinks_.erase(call);
    landings_.erase(call);
  }
}

void Gateway::fail(CallId call, Error error) {
  transport_->post([this, call, error = std::move(error)] { execute(engine_.fail(now(), call, error)); });
}

void Gateway::cancel(CallId call, std::string reason) {
  transport_->post([this, call, reason = std::move(reason)] {
    execute(engine_.cancel(now(), call, reason));
    forget_if_over(call);
  });
}

void Gateway::serve(const std::string& handle, const caf::actor& service) {
  const auto sink = next_service_sink_++;
  transport_->post([this, handle, service, sink] {
    if (auto old = service_sinks_.find(handle); old != service_sinks_.end()) sinks_.erase(old->second);
    service_sinks_[handle] = sink;
    sinks_[sink] = service;
    engine_.serve(handle, sink);
  });
}

void Gateway::unserve(const std::string& handle) {
  transport_->post([this, handle] {
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

// ---- transport thread -------------------------------------------------------------

void Gateway::on_frame(const PeerKey& from, transport::Frame frame) {
  const CallId call = frame.envelope.call_id();
  auto fx = engine_.on_frame(now(), from, frame.envelope, std::move(frame.payload), frame.payload_error);
  if (frame.landed > 0) {
    for (auto& d : fx.deliveries) d.landed = d.call == call && d.kind == DeliveryKind::message && d.has_message;
  }
  execute(std::move(fx));
}

Buffer Gateway::landing_for(const PeerKey& from, const pb::Envelope& env, std::size_t body) {
  // Every message of the callee on a call with landings takes the next one, whether it
  // lands there or not: the n-th landing is for the n-th message.
  if (env.kind() != pb::MESSAGE || env.from_caller() || !env.has_message()) return Buffer{};
  auto it = landings_.find(env.call_id());
  if (it == landings_.end() || it->second.peer != from) return Buffer{};
  Landing next = std::move(it->second.next.front());
  it->second.next.pop_front();
  if (it->second.next.empty()) landings_.erase(it);
  if (next.zone.size() != body || (!next.any_head && next.head != env.payload_head()) ||
      next.tail != env.payload_tail()) {
    return Buffer{};
  }
  return std::move(next.zone);
}

void Gateway::on_peer_down(const PeerKey& peer, const Error& why) {
  log::process_logger().log(log::Level::info, "gateway.peer_down", "peer", peer, "why", why.message);
  execute(engine_.on_peer_down(now(), peer, why));
}

void Gateway::on_tick(transport::Clock::time_point t) { execute(engine_.on_tick(now_of(t))); }

std::optional<transport::Clock::time_point> Gateway::next_wakeup() {
  auto d = engine_.next_deadline();
  if (!d) return std::nullopt;
  return transport::Clock::time_point(std::chrono::duration_cast<transport::Clock::duration>(*d));
}

void Gateway::execute(core::rpc::Effects fx) {
  // Frames to our own address (several nodes behind this gateway calling each other) are
  // handed straight back to the engine as if received: the caller's side sees them come
  // from self_key_, the callee's side from k_loop_key, and answers travel the same way.
  std::vector<core::rpc::Outgoing> frames = std::move(fx.frames);
  for (std::size_t i = 0; i < frames.size(); ++i) {
    auto& out = frames[i];
    const bool to_self = !self_key_.empty() && out.peer == self_key_;
    if (!to_self && out.peer != k_loop_key) {
      transport_->send(out.peer, transport::Frame{std::move(out.envelope), std::move(out.payload), std::nullopt});
      continue;
    }
    pb::Envelope& env = out.envelope;
    out.payload = transport::join_spliced(env, std::move(out.payload));
    env.set_payload_size(out.payload.size());
    if (to_self && env.kind() == pb::OPEN) {
      env.set_listen_addr(self_key_);
      if (env.peer_id().empty()) env.set_peer_id(self_peer_id_);
    }
    auto more = engine_.on_frame(now(), to_self ? k_loop_key : self_key_, env, std::move(out.payload), std::nullopt);
    for (auto& f : more.frames) frames.push_back(std::move(f));
    for (auto& d : more.deliveries) fx.deliveries.push_back(std::move(d));
  }
  for (auto& d : fx.deliveries) {
    auto it = sinks_.find(d.sink);
    if (it == sinks_.end()) continue;  // the service was unregistered meanwhile
    caf::actor target = it->second;
    // Caller-side sinks (and landings) live as long as their call.
    if (d.final && d.sink == d.call) {
      sinks_.erase(it);
      landings_.erase(d.call);
    }
    caf::anon_send(target, std::move(d));
  }
}

}  // namespace apiary::actors
