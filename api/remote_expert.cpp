#include "api/remote_expert.hpp"

#include <iterator>
#include <utility>

#include "actors/gateway.hpp"
#include "actors/rpc.hpp"
#include "api/dht.hpp"
#include "api/expert_wire.hpp"
#include "api/runtime.hpp"
#include "core/moe/dht_layout.hpp"
#include "core/moe/expert_server_role.hpp"
#include "core/moe/stream_chunks.hpp"
#include "messages/tensor/codec.hpp"
#include "runtime.pb.h"

namespace apiary {
namespace {

namespace moe = core::moe;

/// How much longer than the call's deadline a caller waits before it gives up on the
/// gateway (the engine enforces the deadline; this only guards against a lost answer).
constexpr auto k_grace = std::chrono::seconds(2);

/// The answer of call `pending` (unary or streamed), waiting at most `timeout` and the
/// grace; past that the call is cancelled and the answer is deadline_exceeded.
template <class Pending>
auto await_answer(actors::Gateway& gw, Pending& pending, std::chrono::milliseconds timeout)
    -> decltype(pending.answer.get()) {
  if (pending.answer.wait_for(timeout + k_grace) != std::future_status::ready) {
    gw.cancel(pending.id, "the caller stopped waiting");
    return make_error(errc::deadline_exceeded, "no answer within {} ms", timeout.count());
  }
  return pending.answer.get();
}

}  // namespace

RemoteExpert::RemoteExpert(Runtime& runtime, std::string uid, core::PeerAddr server, std::chrono::milliseconds timeout)
    : runtime_(&runtime), uid_(std::move(uid)), server_(std::move(server)), timeout_(timeout) {}

Result<Buffer> RemoteExpert::call(const char* handle, Buffer request) {
  actors::Gateway& gw = *runtime_->gateway();
  auto pending = actors::unary_call(gw, server_, server_.addressed(handle), std::move(request), timeout_,
                                    runtime_->shares_gateway() ? runtime_->peer_id().bytes() : "");
  return await_answer(gw, pending, timeout_);
}

Result<std::vector<pb::Tensor>> RemoteExpert::call_stream(const char* handle, pb::ExpertRequest request) {
  // Each chunk in its own message (hivemind's 4 MiB), the answer's chunks joined back.
  std::vector<Payload> messages;
  std::vector<pb::Tensor> tensors(std::make_move_iterator(request.mutable_tensors()->begin()),
                                  std::make_move_iterator(request.mutable_tensors()->end()));
  for (std::string& m : moe::request_stream(uid_, tensors)) {
    messages.emplace_back(Buffer::adopt(std::move(m)));
  }
  actors::Gateway& gw = *runtime_->gateway();
  auto pending = actors::stream_call(gw, server_, server_.addressed(handle), std::move(messages), timeout_,
                                     runtime_->shares_gateway() ? runtime_->peer_id().bytes() : "");
  auto answer = await_answer(gw, pending, timeout_);
  if (!answer) return answer.error();
  return moe::join_response(*answer);
}

Result<moe::ExpertSchema> RemoteExpert::info() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (schema_) return *schema_;
  }
  pb::ExpertUID request;
  request.set_uid(uid_);
  auto answer = call(moe::k_info_handle, actors::to_buffer(request));
  auto fail = [this](const Error& e) {
    return make_error(e.code, "expert '{}' at {}: info: {}", uid_, server_.multiaddr(), e.message);
  };
  if (!answer) return fail(answer.error());
  auto info = actors::from_buffer<pb::ExpertInfo>(*answer, "rpc_info's answer");
  if (!info) return fail(info.error());
  auto schema = moe::unpack_info(info->serialized_info());
  if (!schema) return fail(schema.error());
  std::lock_guard<std::mutex> lock(mutex_);
  schema_ = *schema;
  return *schema;
}

Result<std::vector<ExpertTensor>> RemoteExpert::forward(const std::vector<ExpertTensor>& inputs) {
  return run(true, inputs);
}

Result<std::vector<ExpertTensor>> RemoteExpert::backward(const std::vector<ExpertTensor>& inputs,
                                                         const std::vector<ExpertTensor>& grad_outputs) {
  std::vector<ExpertTensor> tensors = inputs;
  tensors.insert(tensors.end(), grad_outputs.begin(), grad_outputs.end());
  return run(false, std::move(tensors));
}

Result<std::vector<messages::Tensor>> RemoteExpert::forward_tensors(std::vector<messages::Tensor> inputs) {
  return run_tensors(true, std::move(inputs));
}

Result<std::vector<messages::Tensor>> RemoteExpert::backward_tensors(std::vector<messages::Tensor> tensors) {
  return run_tensors(false, std::move(tensors));
}

Result<std::vector<pb::Tensor>> RemoteExpert::call_either(bool forward, pb::ExpertRequest request) {
  // A request over 2 MiB streams, as hivemind's client does; the answer comes as it was asked.
  if (request.ByteSizeLong() > moe::k_max_unary_payload) {
    return call_stream(forward ? moe::k_forward_stream_handle : moe::k_backward_stream_handle, std::move(request));
  }
  auto answer = call(forward ? moe::k_forward_handle : moe::k_backward_handle, actors::to_buffer(request));
  if (!answer) return answer.error();
  auto parsed = actors::from_buffer<pb::ExpertResponse>(*answer, forward ? "rpc_forward's answer"
                                                                         : "rpc_backward's answer");
  if (!parsed) return parsed.error();
  return std::vector<pb::Tensor>(std::make_move_iterator(parsed->mutable_tensors()->begin()),
                                 std::make_move_iterator(parsed->mutable_tensors()->end()));
}

Result<std::vector<ExpertTensor>> RemoteExpert::run(bool forward, std::vector<ExpertTensor> tensors) {
  auto fail = [&](const Error& e) {
    return make_error(e.code, "expert '{}' at {}: {}: {}", uid_, server_.multiaddr(), forward ? "forward" : "backward",
                      e.message);
  };
  auto typed = detail::tensors_of(tensors);
  if (!typed) return fail(typed.error());
  auto answer = run_tensors(forward, std::move(*typed));
  if (!answer) return answer.error();
  auto out = detail::expert_tensors_of(*answer);
  if (!out) return fail(out.error());
  return out;
}

Result<std::vector<messages::Tensor>> RemoteExpert::run_tensors(bool forward, std::vector<messages::Tensor> tensors) {
  auto schema = info();
  if (!schema) return schema.error();
  auto fail = [&](const Error& e) {
    return make_error(e.code, "expert '{}' at {}: {}: {}", uid_, server_.multiaddr(), forward ? "forward" : "backward",
                      e.message);
  };
  // Each tensor travels with its schema's compression (backward: inputs, then outputs).
  auto request = detail::expert_request(uid_, *schema, tensors);
  if (!request) return fail(request.error());
  tensors.clear();
  auto answer = call_either(forward, std::move(*request));
  if (!answer) return fail(answer.error());
  auto out = detail::decode_tensors(*answer);
  if (!out) return fail(out.error());
  return out;
}

Result<std::map<std::string, core::PeerAddr>> get_experts(Dht& dht, const std::vector<std::string>& uids,
                                                          std::chrono::milliseconds timeout) {
  std::vector<DhtKey> keys;
  keys.reserve(uids.size());
  for (const auto& uid : uids) keys.push_back(DhtKey::str(uid));
  auto got = dht.get_many(keys);
  if (got.wait_for(timeout) != std::future_status::ready) {
    return make_error(errc::deadline_exceeded, "get_experts: the DHT did not find {} uids within {} ms", uids.size(),
                      timeout.count());
  }
  auto found = got.get();
  if (!found) return make_error(found.error().code, "get_experts: {}", found.error().message);
  std::map<std::string, core::PeerAddr> out;
  for (std::size_t i = 0; i < uids.size() && i < found->size(); ++i) {
    auto expert = moe::expert_of(uids[i], (*found)[i]);
    if (!expert) continue;
    // apiary declares the server's multiaddr (a hivemind server: a bare PeerID, which
    // apiary cannot dial without libp2p's peer routing).
    auto server = core::PeerAddr::parse(expert->peer_id);
    if (server) out.emplace(uids[i], std::move(*server));
  }
  return out;
}

}  // namespace apiary
