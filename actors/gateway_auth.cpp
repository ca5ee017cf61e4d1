// The gateway's side of authorization (core/rpc/auth.hpp): requests signed as they
// leave, checked before a service sees them, answers signed and checked the same way.
// Everything here runs on the transport thread.
#include <chrono>

#include "actors/gateway.hpp"
#include "messages/identity/peer_id.hpp"
#include "messages/log/log.hpp"

namespace apiary::actors {

void Gateway::authorize(std::shared_ptr<core::rpc::Authorizer> authorizer) {
  if (!authorizer) return;
  run_on_thread([this, authorizer = std::move(authorizer)]() mutable {
    const std::string id = authorizer->peer_id();
    authorizers_.insert_or_assign(id, std::move(authorizer));
  });
}

void Gateway::deauthorize(const std::string& peer_id) {
  run_on_thread([this, peer_id] { authorizers_.erase(peer_id); });
}

double Gateway::wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

core::rpc::Authorizer* Gateway::authorizer_of(const std::string& peer_id) const {
  auto it = authorizers_.find(peer_id);
  return it == authorizers_.end() ? nullptr : it->second.get();
}

Result<std::string> Gateway::sign_open(CallId id, const std::string& handle, const std::string& caller,
                                       const std::string& callee) {
  const std::string& as = caller.empty() ? self_peer_id_ : caller;
  auto it = authorizers_.find(as);
  if (it == authorizers_.end()) return std::string();  // this identity calls unauthorized
  auto request = it->second->sign_request(wall_seconds(), core::rpc::CallParties{handle, as, callee});
  if (!request) {
    return make_error(errc::unauthorized, "call to '{}' not sent: signing its authorization failed: {}", handle,
                      request.error().what());
  }
  std::string bytes = request->SerializeAsString();
  answers_to_check_.insert_or_assign(id, CallAuth{it->second, std::move(*request), handle, as});
  return bytes;
}

Status Gateway::check_open(const Delivery& d) {
  // The identity called: the one a `handle@PeerID` names, else the gateway's own.
  std::string callee = self_peer_id_;
  if (const auto at = d.handle.rfind('@'); at != std::string::npos) {
    auto id = messages::PeerId::from_string(std::string_view(d.handle).substr(at + 1));
    if (id) callee = id->bytes();
  }
  auto it = authorizers_.find(callee);
  if (it == authorizers_.end()) return ok_status();  // that identity serves everyone
  pb::RequestAuthInfo request;
  Status verdict = ok_status();
  if (!request.ParseFromString(d.auth)) {
    verdict = make_error(errc::unauthorized, "call to '{}' from {}: its authorization ({} bytes) does not parse",
                         d.handle, d.peer, d.auth.size());
  } else if (auto ok = it->second->check_request(
                 wall_seconds(), core::rpc::CallParties{d.handle, d.peer_id, {}, channel_proves_}, request);
             !ok) {
    verdict = Error{errc::unauthorized, ok.error().message};
  }
  if (!verdict) {
    log::process_logger().log(log::Level::warn, "gateway.unauthorized", "handle", d.handle, "peer", d.peer, "why",
                              verdict.error().message);
    return verdict;
  }
  answers_to_sign_.insert_or_assign(d.call, CallAuth{it->second, std::move(request), d.handle, d.peer_id});
  return ok_status();
}

void Gateway::sign_answer(CallId id, core::rpc::Effects& fx) {
  auto it = answers_to_sign_.find(id);
  if (it == answers_to_sign_.end()) return;
  for (auto& f : fx.frames) {
    if (f.envelope.kind() != pb::MESSAGE || f.envelope.from_caller()) continue;
    const CallAuth& call = it->second;
    auto answer = call.by->sign_response(wall_seconds(), core::rpc::CallParties{call.handle, call.caller, {}},
                                         call.request);
    if (answer) {
      f.envelope.set_auth(answer->SerializeAsString());
    } else {  // the caller will refuse the unsigned answer, saying so
      log::process_logger().log(log::Level::error, "gateway.sign_failed", "handle", call.handle, "why",
                                answer.error().message);
    }
    answers_to_sign_.erase(it);
    return;
  }
}

std::optional<Error> Gateway::check_answer(const Delivery& d) {
  auto it = answers_to_check_.find(d.call);
  if (it == answers_to_check_.end()) return std::nullopt;
  const CallAuth call = std::move(it->second);
  answers_to_check_.erase(it);
  pb::ResponseAuthInfo answer;
  if (!answer.ParseFromString(d.auth)) {
    return make_error(errc::unauthorized, "answer of '{}' from {}: its authorization ({} bytes) does not parse",
                      call.handle, d.peer, d.auth.size());
  }
  auto ok = call.by->check_response(wall_seconds(), core::rpc::CallParties{call.handle, call.caller, {}},
                                    call.request, answer);
  if (ok) return std::nullopt;
  return make_error(errc::unauthorized, "answer from {}: {}", d.peer, ok.error().message);
}

}  // namespace apiary::actors
