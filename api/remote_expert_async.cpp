// RemoteExpert's asynchronous calls: the request is encoded on the caller's thread, the
// answer decoded on the transport thread and handed to the caller's callback, so one
// thread can have any number of experts' calls in flight.
#include <utility>

#include "actors/gateway.hpp"
#include "actors/rpc.hpp"
#include "api/expert_wire.hpp"
#include "api/remote_expert.hpp"
#include "api/runtime.hpp"
#include "core/moe/expert_server_role.hpp"
#include "messages/tensor/codec.hpp"
#include "runtime.pb.h"

namespace apiary {

namespace moe = core::moe;

/// A copy of what the calls need, alive while any of them is in flight.
struct detail::ExpertCallState {
  Runtime* runtime = nullptr;
  std::string uid;
  core::PeerAddr server;
  std::chrono::milliseconds timeout{};
  std::mutex mutex;
  std::optional<moe::ExpertSchema> schema;  ///< the first answer of rpc_info
};

namespace {

using State = detail::ExpertCallState;

/// `e` prefixed with the expert, its server and the call, as RemoteExpert's errors are.
Error expert_error(const State& s, const char* what, const Error& e) {
  return Error{e.code, fmt::format("expert '{}' at {}: {}: {}", s.uid, s.server.multiaddr(), what, e.message)};
}

/// An ExpertRequest for `uid` of `tensors`, each encoded with `schema`'s compression.
Result<Buffer> encode_request(const std::string& uid, const moe::ExpertSchema& schema,
                              const std::vector<ExpertTensor>& tensors) {
  auto typed = detail::tensors_of(tensors);
  if (!typed) return typed.error();
  auto request = detail::expert_request(uid, schema, *typed);
  if (!request) return request.error();
  return actors::to_buffer(*request);
}

/// The float32 tensors of an ExpertResponse. Errors: malformed, unsupported dtypes.
Result<std::vector<ExpertTensor>> decode_response(const Buffer& answer, const char* what) {
  auto parsed = actors::from_buffer<pb::ExpertResponse>(answer, fmt::format("rpc_{}'s answer", what));
  if (!parsed) return parsed.error();
  auto tensors = detail::decode_tensors(parsed->tensors());
  if (!tensors) return tensors.error();
  return detail::expert_tensors_of(*tensors);
}

/// The PeerID bytes a call names as its caller (several identities on one gateway).
std::string caller_of(const Runtime& runtime) {
  return runtime.shares_gateway() ? runtime.peer_id().bytes() : std::string();
}

/// Sends the call of `handle` with `tensors`; its decoded answer goes to `done`.
void send_call(const std::shared_ptr<State>& s, const moe::ExpertSchema& schema,
               const char* handle, const char* what, const std::vector<ExpertTensor>& tensors, ExpertDone done) {
  auto request = encode_request(s->uid, schema, tensors);
  if (!request) {
    done(expert_error(*s, what, request.error()));
    return;
  }
  actors::unary_call_then(*s->runtime->gateway(), s->server, s->server.addressed(handle), std::move(*request),
                          s->timeout, caller_of(*s->runtime),
                          [s, what, done = std::move(done)](Result<Buffer> answer) {
                            if (!answer) return done(expert_error(*s, what, answer.error()));
                            auto outputs = decode_response(*answer, what);
                            if (!outputs) return done(expert_error(*s, what, outputs.error()));
                            done(std::move(*outputs));
                          });
}

}  // namespace

void RemoteExpert::forward_async(std::vector<ExpertTensor> inputs, ExpertDone done) {
  start_async(moe::k_forward_handle, "forward", std::move(inputs), std::move(done));
}

void RemoteExpert::backward_async(std::vector<ExpertTensor> inputs, std::vector<ExpertTensor> grad_outputs,
                                  ExpertDone done) {
  inputs.insert(inputs.end(), std::make_move_iterator(grad_outputs.begin()),
                std::make_move_iterator(grad_outputs.end()));
  start_async(moe::k_backward_handle, "backward", std::move(inputs), std::move(done));
}

void RemoteExpert::start_async(const char* handle, const char* what, std::vector<ExpertTensor> tensors,
                               ExpertDone done) {
  std::shared_ptr<State> s;
  std::optional<moe::ExpertSchema> schema;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!shared_) {
      shared_ = std::make_shared<State>();
      shared_->runtime = runtime_;
      shared_->uid = uid_;
      shared_->server = server_;
      shared_->timeout = timeout_;
    }
    s = shared_;
    schema = schema_;
  }
  if (!schema) {
    std::lock_guard<std::mutex> lock(s->mutex);
    schema = s->schema;
  }
  if (schema) {
    send_call(s, *schema, handle, what, tensors, std::move(done));
    return;
  }
  // No schema yet: ask for it, and send the call from its answer.
  pb::ExpertUID request;
  request.set_uid(uid_);
  auto held = std::make_shared<std::vector<ExpertTensor>>(std::move(tensors));
  actors::unary_call_then(
      *runtime_->gateway(), server_, server_.addressed(moe::k_info_handle), actors::to_buffer(request),
      timeout_, caller_of(*runtime_), [s, handle, what, held, done = std::move(done)](Result<Buffer> answer) {
        if (!answer) return done(expert_error(*s, "info", answer.error()));
        auto info = actors::from_buffer<pb::ExpertInfo>(*answer, "rpc_info's answer");
        if (!info) return done(expert_error(*s, "info", info.error()));
        auto schema = moe::unpack_info(info->serialized_info());
        if (!schema) return done(expert_error(*s, "info", schema.error()));
        {
          std::lock_guard<std::mutex> lock(s->mutex);
          s->schema = *schema;
        }
        send_call(s, *schema, handle, what, *held, done);
      });
}

}  // namespace apiary
