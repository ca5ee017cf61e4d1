#pragma once
/// apiary::RemoteExpert: a C++ client of one expert on an expert server (hivemind's
/// RemoteExpert, reference §6.3, without autograd): `info()` (rpc_info, read once and
/// kept), `forward(inputs)` (rpc_forward) and `backward(inputs, grad_outputs)`
/// (rpc_backward: the gradients of the inputs; the server steps its expert's optimizer)
/// over float32 tensors, inputs encoded with the compression of the expert's schema. A
/// call is one unary call through the runtime's gateway with a deadline, or, when the
/// serialized request exceeds 2 MiB (core::moe::k_max_unary_payload, as hivemind's
/// client), a streaming call of `rpc_forward_stream` / `rpc_backward_stream` whose
/// request and answer travel in 4 MiB chunks (core/moe/stream_chunks.hpp): an unknown
/// uid, a server gone or a deadline passed is an error, never a wait without end.
/// `get_experts` finds the servers of uids declared in a DHT (ExpertServer declares them).
/// `forward_async` / `backward_async` start a call and return at once (many experts at
/// once: api/moe_call_many.hpp).
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/fwd.hpp"
#include "core/effects.hpp"
#include "core/moe/expert_schema.hpp"
#include "messages/buffer.hpp"
#include "messages/result.hpp"
#include "messages/tensor/tensor.hpp"
#include "runtime.pb.h"

namespace apiary {

class Dht;

namespace detail {
/// The expert's address and schema as its calls in flight hold them (remote_expert_async.cpp).
struct ExpertCallState;
}  // namespace detail

/// A float32 tensor as a trainer holds it: the extents (dimension 0 the batch) and the
/// elements, row-major.
struct ExpertTensor {
  std::vector<std::uint32_t> shape;
  std::vector<float> values;
};

/// Where an asynchronous call's outputs (or error) go: called once, on the gateway's
/// transport thread (or on the caller's when the call cannot start). Keep it short.
using ExpertDone = std::function<void(Result<std::vector<ExpertTensor>>)>;

class RemoteExpert {
 public:
  /// Calls to expert `uid` on the server at `server` (a multiaddr with /p2p/<PeerID>, as
  /// get_experts gives), from `runtime` (which must outlive this), each call given
  /// `timeout` to answer.
  RemoteExpert(Runtime& runtime, std::string uid, core::PeerAddr server,
               std::chrono::milliseconds timeout = std::chrono::seconds(30));

  [[nodiscard]] const std::string& uid() const { return uid_; }
  [[nodiscard]] const core::PeerAddr& server() const { return server_; }
  /// How long each call may take to answer.
  [[nodiscard]] std::chrono::milliseconds timeout() const { return timeout_; }

  /// The expert's schema (asked once, then kept). Errors: the call's (errc::not_found for
  /// a uid the server does not have, deadline_exceeded, unavailable or peer_down for a
  /// server gone), errc::malformed for an answer that is not an ExpertInfo.
  [[nodiscard]] Result<core::moe::ExpertSchema> info();
  /// The expert's outputs for `inputs` (its forward inputs, one batch). Errors: those of
  /// info(), errc::invalid_argument for a tensor whose values do not fill its shape, the
  /// server's for inputs its schema refuses, errc::unsupported for an output that is not
  /// float32.
  [[nodiscard]] Result<std::vector<ExpertTensor>> forward(const std::vector<ExpertTensor>& inputs);
  /// The gradients of `inputs` given `grad_outputs` (one per output); the server steps
  /// the expert's optimizer. Errors as forward's.
  [[nodiscard]] Result<std::vector<ExpertTensor>> backward(const std::vector<ExpertTensor>& inputs,
                                                           const std::vector<ExpertTensor>& grad_outputs);

  /// forward and backward over tensors of any dtype the schema names (backward: the
  /// inputs, then one gradient per output), as the Python module calls them. Errors as
  /// forward's, without the float32 ones.
  [[nodiscard]] Result<std::vector<messages::Tensor>> forward_tensors(std::vector<messages::Tensor> inputs);
  [[nodiscard]] Result<std::vector<messages::Tensor>> backward_tensors(std::vector<messages::Tensor> tensors);
  /// forward without waiting: the outcome goes to `done` (errors as forward's). Without
  /// the schema yet, rpc_info goes first and the call follows its answer (each with the
  /// timeout). The call does not need this RemoteExpert to live on; the runtime must.
  void forward_async(std::vector<ExpertTensor> inputs, ExpertDone done);
  /// backward without waiting, as forward_async.
  void backward_async(std::vector<ExpertTensor> inputs, std::vector<ExpertTensor> grad_outputs, ExpertDone done);

 private:
  /// Starts an asynchronous call of `handle` with `tensors` (asks the schema first if needed).
  void start_async(const char* handle, const char* what, std::vector<ExpertTensor> tensors, ExpertDone done);

  /// Calls `handle` with `request`, waiting at most the timeout (and a little more).
  Result<Buffer> call(const char* handle, Buffer request);
  /// Calls `handle` with `request` as a stream of chunks; the answer's tensors, joined.
  Result<std::vector<pb::Tensor>> call_stream(const char* handle, pb::ExpertRequest request);
  /// The answer's tensors to a forward (or backward) `request`: unary, or streamed when large.
  Result<std::vector<pb::Tensor>> call_either(bool forward, pb::ExpertRequest request);
  /// run_tensors over float32 ExpertTensors.
  Result<std::vector<ExpertTensor>> run(bool forward, std::vector<ExpertTensor> tensors);
  /// Encodes `tensors` as an ExpertRequest for the expert, with its schema's compressions,
  /// calls its forward (or backward) and decodes the answer's tensors.
  Result<std::vector<messages::Tensor>> run_tensors(bool forward, std::vector<messages::Tensor> tensors);

  Runtime* runtime_;
  std::string uid_;
  core::PeerAddr server_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::optional<core::moe::ExpertSchema> schema_;
  /// What its asynchronous calls share, outliving it; made by the first of them.
  std::shared_ptr<detail::ExpertCallState> shared_;
};

/// The servers of `uids` as declared in `dht` (hivemind's get_experts): uid -> server
/// address, for the uids found with a record that names an address; uids not declared
/// (or declared by a server apiary cannot address) are left out. Errors: the DHT's, or
/// deadline_exceeded when the get does not finish within `timeout`.
[[nodiscard]] Result<std::map<std::string, core::PeerAddr>> get_experts(
    Dht& dht, const std::vector<std::string>& uids, std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace apiary
