#include "core/rpc/engine.hpp"

#include <algorithm>

#include <fmt/ranges.h>

#include "messages/utf8.hpp"

namespace apiary::core::rpc {
namespace {

/// An error message for the wire: at most k_max_error_message bytes of valid UTF-8 (a
/// string field that is not would make the peer refuse the whole frame).
std::string clip(const std::string& s) { return messages::valid_utf8(s, k_max_error_message); }

/// `now + timeout`, saturating at the largest TimePoint instead of overflowing.
TimePoint deadline_after(TimePoint now, Duration timeout) {
  return now.count() >= 0 && timeout > TimePoint::max() - now ? TimePoint::max() : now + timeout;
}

/// A timeout from the wire (microseconds), saturating instead of overflowing.
Duration timeout_from_wire(std::uint64_t us) {
  constexpr auto max_us = static_cast<std::uint64_t>(Duration::max().count() / 1000);
  return us > max_us ? Duration::max() : Duration(std::chrono::microseconds(static_cast<std::int64_t>(us)));
}

errc code_from_wire(std::uint32_t code) {
  return code > 0 && code <= static_cast<std::uint32_t>(errc::unauthorized) ? static_cast<errc>(code)
                                                                           : errc::handler_error;
}

/// A frame carrying `message`: its head and tail (if any) in the envelope, its body as
/// the payload.
Outgoing outgoing(const PeerKey& peer, pb::Envelope env, Payload message) {
  if (!message.head.empty()) env.set_payload_head(std::move(message.head));
  if (!message.tail.empty()) env.set_payload_tail(std::move(message.tail));
  return Outgoing{peer, std::move(env), std::move(message.body)};
}

}  // namespace

// ---- local commands -------------------------------------------------------------

Effects Engine::open(TimePoint now, CallId id, Sink sink, const PeerKey& peer, const std::string& handle,
                     pb::RpcKind kind, Duration timeout, std::optional<Payload> first, bool end,
                     const std::string& caller, const std::string& callee) {
  Effects fx;
  Call c;
  c.caller = true;
  c.peer = peer;
  c.wire_id = id;
  c.sink = sink;
  c.kind = kind;
  c.handle = handle;
  std::optional<Error> refused;
  if (id == 0 || id >= k_first_served_call) {
    refused = make_error(errc::invalid_argument,
                         "caller call id must be 1..{}, got {}; ids with the top bit set name served calls",
                         k_first_served_call - 1, id);
  } else if (calls_.count(id) != 0) {
    refused = make_error(errc::internal, "call id {} is already in use", id);
  } else if (handle.empty() || handle.size() > k_max_handle_bytes) {
    refused = make_error(errc::invalid_argument, "handle must be 1..{} bytes, got {} bytes", k_max_handle_bytes,
                         handle.size());
  }
  if (refused) {
    Delivery d = delivery_for(id, c, DeliveryKind::error);
    d.final = true;
    d.error = std::move(*refused);
    fx.deliveries.push_back(std::move(d));
    return fx;
  }
  c.local_end = end;
  pb::Envelope env = envelope_for(c, pb::OPEN);
  env.set_handle(handle);
  env.set_rpc_kind(kind);
  env.set_end_of_stream(end);
  env.set_has_message(first.has_value());
  if (!caller.empty()) env.set_peer_id(caller);
  if (timeout.count() > 0) {
    env.set_timeout_us(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(timeout).count()));
  }
  fx.frames.push_back(first ? outgoing(peer, std::move(env), std::move(*first)) : Outgoing{peer, std::move(env), Buffer{}});
  fx.frames.back().callee = callee;
  auto& stored = calls_[id] = std::move(c);
  if (timeout.count() > 0) set_deadline(id, stored, deadline_after(now, timeout));
  ++stats_.calls_opened;
  return fx;
}

Effects Engine::send(TimePoint /*now*/, CallId id, Payload message, bool end) {
  Effects fx;
  Call* c = find(id);
  if (c == nullptr || c->local_end) {
    ++stats_.late_frames;  // the call ended (cancel, deadline, peer down) or we already ended it
    return fx;
  }
  pb::Envelope env = envelope_for(*c, pb::MESSAGE);
  env.set_has_message(true);
  env.set_end_of_stream(end);
  fx.frames.push_back(outgoing(c->peer, std::move(env), std::move(message)));
  if (end) {
    c->local_end = true;
    if (c->remote_end) finish(id);
  }
  return fx;
}

Effects Engine::end(TimePoint /*now*/, CallId id) {
  Effects fx;
  Call* c = find(id);
  if (c == nullptr || c->local_end) {
    ++stats_.late_frames;
    return fx;
  }
  pb::Envelope env = envelope_for(*c, pb::MESSAGE);
  env.set_end_of_stream(true);
  fx.frames.push_back(Outgoing{c->peer, std::move(env), Buffer{}});
  c->local_end = true;
  if (c->remote_end) finish(id);
  return fx;
}

Effects Engine::fail(TimePoint now, CallId id, const Error& error) {
  Call* c = find(id);
  if (c == nullptr) {
    ++stats_.late_frames;
    return {};
  }
  if (c->caller) return cancel(now, id, error.what());
  Effects fx;
  pb::Envelope env = envelope_for(*c, pb::ERROR);
  env.set_error_code(static_cast<std::uint32_t>(error.code));
  env.set_error_message(clip(error.message));
  fx.frames.push_back(Outgoing{c->peer, std::move(env), Buffer{}});
  finish(id);
  return fx;
}

Effects Engine::cancel(TimePoint /*now*/, CallId id, const std::string& reason) {
  Call* c = find(id);
  if (c == nullptr) {
    ++stats_.late_frames;
    return {};
  }
  Effects fx;
  pb::Envelope env = envelope_for(*c, pb::CANCEL);
  env.set_error_code(static_cast<std::uint32_t>(errc::cancelled));
  env.set_error_message(clip(reason));
  fx.frames.push_back(Outgoing{c->peer, std::move(env), Buffer{}});
  finish(id);
  return fx;
}

void Engine::serve(const std::string& handle, Sink sink) { services_[handle] = sink; }

void Engine::unserve(const std::string& handle) { services_.erase(handle); }

// ---- inbound frames -------------------------------------------------------------

Effects Engine::on_frame(TimePoint now, const PeerKey& peer, const pb::Envelope& env, Buffer payload,
                         const std::optional<Error>& payload_error) {
  Effects fx;
  const bool from_caller = env.from_caller();
  if (env.kind() == pb::OPEN) {
    on_open(now, fx, peer, env, std::move(payload), payload_error);
    return fx;
  }
  if (env.kind() != pb::MESSAGE && env.kind() != pb::ERROR && env.kind() != pb::CANCEL) return fx;
  // Frames from a caller name the caller's id; frames from a callee name ours.
  CallId id = from_caller ? find_inbound(peer, env.call_id()) : env.call_id();
  Call* c = id == 0 ? nullptr : find(id);
  if (c == nullptr || c->peer != peer || c->caller == from_caller) {
    if (env.kind() == pb::ERROR && env.call_id() == 0) ++stats_.protocol_errors;  // peer rejected a frame
    ++stats_.late_frames;
    return fx;
  }
  switch (env.kind()) {
    case pb::MESSAGE:
      on_message(fx, id, *c, env, std::move(payload), payload_error);
      break;
    case pb::ERROR:
      fail_locally(fx, id, *c, Error{code_from_wire(env.error_code()), env.error_message()});
      break;
    default:  // CANCEL
      fail_locally(fx, id, *c,
                   make_error(errc::cancelled, "cancelled by {} ({}): {}", c->caller ? "the callee" : "the caller",
                              peer, env.error_message()));
      break;
  }
  return fx;
}

void Engine::on_open(TimePoint now, Effects& fx, const PeerKey& peer, const pb::Envelope& env, Buffer payload,
                     const std::optional<Error>& payload_error) {
  auto reject = [&](const Error& e) {
    pb::Envelope out;
    out.set_kind(pb::ERROR);
    out.set_call_id(env.call_id());
    out.set_from_caller(false);
    out.set_error_code(static_cast<std::uint32_t>(e.code));
    out.set_error_message(clip(e.message));
    fx.frames.push_back(Outgoing{peer, std::move(out), Buffer{}});
  };
  if (!env.from_caller() || env.call_id() == 0) {
    ++stats_.protocol_errors;
    reject(make_error(errc::protocol, "OPEN frame must come from the caller with a non-zero call id"));
    return;
  }
  if (payload_error) {
    reject(*payload_error);
    return;
  }
  if (find_inbound(peer, env.call_id()) != 0) {
    ++stats_.protocol_errors;
    reject(make_error(errc::protocol, "call id {} from {} is already open", env.call_id(), peer));
    return;
  }
  auto svc = services_.find(env.handle());
  if (svc == services_.end()) {
    std::vector<std::string> names;
    for (auto& [h, s] : services_) names.push_back(h);
    std::sort(names.begin(), names.end());
    reject(make_error(errc::not_found, "unknown handle '{}' (this node serves: {})", env.handle(),
                      names.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(names, ", "))));
    return;
  }
  const CallId id = next_inbound_++;
  Call c;
  c.caller = false;
  c.peer = peer;
  c.wire_id = env.call_id();
  c.sink = svc->second;
  c.kind = env.rpc_kind();
  c.handle = env.handle();
  c.remote_end = env.end_of_stream();
  Delivery d = delivery_for(id, c, DeliveryKind::open);
  d.has_message = env.has_message();
  d.peer_listen_addr = env.listen_addr();
  d.peer_id = env.peer_id();
  d.auth = env.auth();
  d.data = std::move(payload);
  d.end_of_stream = env.end_of_stream();
  auto& stored = calls_[id] = std::move(c);
  inbound_[{peer, env.call_id()}] = id;
  if (env.timeout_us() > 0) {
    set_deadline(id, stored, deadline_after(now, timeout_from_wire(env.timeout_us())));
  }
  ++stats_.calls_served;
  fx.deliveries.push_back(std::move(d));
}

void Engine::on_message(Effects& fx, CallId id, Call& c, const pb::Envelope& env, Buffer payload,
                        const std::optional<Error>& payload_error) {
  if (c.remote_end || payload_error) {
    Error e = payload_error ? *payload_error
                            : make_error(errc::protocol, "{} sent a message after its end of stream", c.peer);
    if (!payload_error) ++stats_.protocol_errors;
    pb::Envelope out = envelope_for(c, c.caller ? pb::CANCEL : pb::ERROR);
    out.set_error_code(static_cast<std::uint32_t>(e.code));
    out.set_error_message(clip(e.message));
    fx.frames.push_back(Outgoing{c.peer, std::move(out), Buffer{}});
    fail_locally(fx, id, c, std::move(e));
    return;
  }
  Delivery d = delivery_for(id, c, env.has_message() ? DeliveryKind::message : DeliveryKind::end);
  d.has_message = env.has_message();
  if (!env.auth().empty()) d.auth = env.auth();
  d.data = std::move(payload);
  d.end_of_stream = env.end_of_stream();
  if (env.end_of_stream()) c.remote_end = true;
  d.final = c.local_end && c.remote_end;
  fx.deliveries.push_back(std::move(d));
  if (c.local_end && c.remote_end) finish(id);
}

// ---- failures and time ----------------------------------------------------------

Effects Engine::on_peer_down(TimePoint /*now*/, const PeerKey& peer, const Error& why) {
  Effects fx;
  std::vector<CallId> ids;
  for (auto& [id, c] : calls_) {
    if (c.peer == peer) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());  // deterministic order
  for (CallId id : ids) {
    Error e = why;
    if (!is_refusal(why.code)) e.code = errc::peer_down;
    fail_locally(fx, id, calls_.at(id), std::move(e));
  }
  return fx;
}

Effects Engine::on_tick(TimePoint now) {
  Effects fx;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const CallId id = deadlines_.begin()->second;
    Call& c = calls_.at(id);
    ++stats_.deadlines;
    if (c.caller) {
      pb::Envelope out = envelope_for(c, pb::CANCEL);
      out.set_error_code(static_cast<std::uint32_t>(errc::deadline_exceeded));
      out.set_error_message("deadline exceeded");
      fx.frames.push_back(Outgoing{c.peer, std::move(out), Buffer{}});
    }
    fail_locally(fx, id, c, make_error(errc::deadline_exceeded, "call to '{}' at {} passed its deadline",
                                       c.handle, c.peer));
  }
  return fx;
}

std::optional<TimePoint> Engine::next_deadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

// ---- helpers --------------------------------------------------------------------

Engine::Call* Engine::find(CallId id) {
  auto it = calls_.find(id);
  return it == calls_.end() ? nullptr : &it->second;
}

CallId Engine::find_inbound(const PeerKey& peer, std::uint64_t wire_id) const {
  auto it = inbound_.find({peer, wire_id});
  return it == inbound_.end() ? 0 : it->second;
}

void Engine::finish(CallId id) {
  auto it = calls_.find(id);
  if (it == calls_.end()) return;
  if (it->second.deadline) deadlines_.erase({*it->second.deadline, id});
  if (!it->second.caller) inbound_.erase({it->second.peer, it->second.wire_id});
  calls_.erase(it);
}

void Engine::set_deadline(CallId id, Call& c, std::optional<TimePoint> at) {
  if (c.deadline) deadlines_.erase({*c.deadline, id});
  c.deadline = at;
  if (at) deadlines_.insert({*at, id});
}

pb::Envelope Engine::envelope_for(const Call& c, pb::FrameKind kind) const {
  pb::Envelope env;
  env.set_kind(kind);
  env.set_call_id(c.wire_id);
  env.set_from_caller(c.caller);
  return env;
}

Delivery Engine::delivery_for(CallId id, const Call& c, DeliveryKind kind) const {
  Delivery d;
  d.sink = c.sink;
  d.call = id;
  d.kind = kind;
  d.handle = c.handle;
  d.peer = c.peer;
  d.rpc_kind = c.kind;
  return d;
}

void Engine::fail_locally(Effects& fx, CallId id, Call& c, Error error) {
  Delivery d = delivery_for(id, c, DeliveryKind::error);
  d.error = std::move(error);
  d.final = true;
  fx.deliveries.push_back(std::move(d));
  finish(id);
}

}  // namespace apiary::core::rpc
