// The call table's translators: a gateway delivery, taken part by part, into the core's
// inputs (see the order in call_table.hpp).
#include "actors/call_table.hpp"

namespace apiary::actors {
namespace {

/// Marks every part of `d` as taken: no translator finds anything in it any more (no
/// call has id 0).
void take_all(Delivery& d) {
  d.call = 0;
  d.has_message = false;
  d.data = Buffer{};
}

/// Leaves only the end of stream in `d` once its message is taken.
void leave_end(Delivery& d) {
  d.kind = DeliveryKind::end;
  d.has_message = false;
  d.data = Buffer{};
}

}  // namespace

std::optional<CoreRequest> CallTable::request_of(Delivery& d) {
  auto v = request_view_of(d);
  if (!v) return std::nullopt;
  return CoreRequest{v->id, std::move(v->handle), std::move(v->from), std::string(v->body.view())};
}

std::optional<CoreRequestView> CallTable::request_view_of(Delivery& d) {
  if (d.call < core::rpc::k_first_served_call) return std::nullopt;  // not a served call
  if (d.kind == DeliveryKind::error) {
    // A unary request that ends in an error (cancel, deadline) is dropped quietly; a
    // streaming one's error is request_message_of's to tell.
    auto it = requests_.find(d.call);
    if (it != requests_.end() && !it->second.stream) {
      requests_.erase(it);
      take_all(d);
    }
    return std::nullopt;
  }
  if (d.kind != DeliveryKind::open) return std::nullopt;
  const core::RequestId id = d.call;  // unique while the call is open
  const bool stream = d.rpc_kind != pb::UNARY;
  requests_[id] = InRequest{d.call, stream};
  CoreRequestView r{id, d.handle, d.peer, std::move(d.data)};
  if (stream && d.end_of_stream) {
    leave_end(d);  // the first message was the caller's last: request_message_of says so
  } else {
    take_all(d);
  }
  return r;
}

std::optional<CoreRequestMessage> CallTable::request_message_of(Delivery& d) {
  auto v = request_message_view_of(d);
  if (!v) return std::nullopt;
  CoreRequestMessage m{v->request, std::string{}, v->last};
  if (v->message) m.message = std::string(v->message->view());
  else m.message = std::move(v->message.error());
  return m;
}

std::optional<CoreRequestMessageView> CallTable::request_message_view_of(Delivery& d) {
  if (d.call < core::rpc::k_first_served_call || d.kind == DeliveryKind::open) return std::nullopt;
  auto it = requests_.find(d.call);
  if (it == requests_.end()) {
    take_all(d);  // the core already ended the request: the rest is not its business
    return std::nullopt;
  }
  if (!it->second.stream) return std::nullopt;
  CoreRequestMessageView m{d.call, Buffer{}, true};
  if (d.kind == DeliveryKind::message) {
    m.message = std::move(d.data);
    m.last = d.end_of_stream;
  } else if (d.kind == DeliveryKind::error) {
    m.message = d.error;
    requests_.erase(it);
  }
  take_all(d);
  return m;
}

std::optional<CoreMessage> CallTable::message_of(Delivery& d) {
  auto v = message_view_of(d);
  if (!v) return std::nullopt;
  return CoreMessage{v->call, std::string(v->message.view())};
}

std::optional<CoreMessageView> CallTable::message_view_of(Delivery& d) {
  if (d.call == 0 || d.call >= core::rpc::k_first_served_call || !d.has_message) return std::nullopt;
  auto it = calls_.find(d.call);
  if (it == calls_.end() || !it->second.stream) return std::nullopt;
  if (d.end_of_stream && d.data.size() == 0) {
    leave_end(d);  // an empty last message is no message (as the simulator has it)
    return std::nullopt;
  }
  CoreMessageView m{it->second.core, std::move(d.data), d.landed};
  if (d.end_of_stream) {
    leave_end(d);  // the callee's last message: response_of ends the call
  } else {
    take_all(d);
  }
  return m;
}

std::optional<CoreResponse> CallTable::response_of(Delivery& d) {
  auto it = calls_.find(d.call);
  if (it == calls_.end()) return std::nullopt;
  CoreResponse r{it->second.core, std::string{}};
  if (it->second.stream) {
    // The end of a streaming call: the callee's error, or its end of stream.
    if (d.kind != DeliveryKind::error && (!d.end_of_stream || d.has_message)) return std::nullopt;
    if (d.kind == DeliveryKind::error) {
      r.result = d.error;
    } else if (!it->second.local_end) {
      gw_->end(d.call);  // the callee finished first: close our direction too
    }
    forget_call(it);
    take_all(d);
    return r;
  }
  if (d.has_message) {
    partial_[d.call] = std::move(d.data);
    it->second.landed = d.landed;
  }
  if (!d.final) return std::nullopt;
  if (d.kind == DeliveryKind::error) {
    r.result = d.error;
  } else if (auto p = partial_.find(d.call); p != partial_.end()) {
    if (it->second.view) {
      r.body = std::move(p->second);
      r.landed = it->second.landed;
      partial_.erase(p);
    } else {
      r.result = std::string(p->second.view());
    }
  } else {
    r.result = make_error(errc::protocol, "call ended without a response");
  }
  forget_call(it);
  take_all(d);
  return r;
}

}  // namespace apiary::actors
