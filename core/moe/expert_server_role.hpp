#pragma once
/// The expert server as a role (hivemind's ConnectionHandler with its Runtime, reference
/// §6.1): serves `rpc_info`, `rpc_forward` and `rpc_backward`, and their streamed forms
/// `rpc_forward_stream` and `rpc_backward_stream`, for a set of experts, each
/// a uid with an ExpertBackend and the config of its task pools. A request's tensors are
/// decoded and checked against the expert's schema (an unknown uid, a malformed message,
/// a wrong tensor count or shape, or a task larger than max_batch_size is an error reply
/// to that caller alone), queued as one task in the expert's forward or backward pool,
/// and run when the Scheduler says: the tasks of a batch are joined along dimension 0,
/// computed in one backend call inside the role, and the outputs split back per task and
/// sent as ExpertResponse, each tensor encoded with its schema's compression. A streamed
/// request's chunks (core/moe/stream_chunks.hpp) are joined as they come, checked when
/// the caller's direction ends, and queued in the same pools as a unary request; its
/// answer goes back chunk by chunk. A malformed or cut stream is an error reply to that
/// caller alone, a stream its caller broke off is dropped, and so is one idle for
/// k_stream_idle (with an error reply). A failed batch is an error reply to each of its
/// tasks; the server carries on. Pool timeouts arm one timer (k_pool_timer), idle
/// streams another (k_stream_timer). A queued request does not run at once: it arms the
/// pool timer for `now`, which the host fires after the inputs it holds already, so the
/// requests that arrived while a batch computed are queued before the next batch forms
/// and join it (one batch, not one batch each).
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/addressing.hpp"
#include "core/effects.hpp"
#include "core/moe/expert_backend.hpp"
#include "core/moe/stream_chunks.hpp"
#include "core/moe/task_pool.hpp"
#include "core/role.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core::moe {

/// The handles, hivemind's protocol ids (ConnectionHandler's methods).
inline constexpr const char* k_info_handle = "ConnectionHandler.rpc_info";          ///< ExpertUID -> ExpertInfo
inline constexpr const char* k_forward_handle = "ConnectionHandler.rpc_forward";    ///< ExpertRequest -> ExpertResponse
inline constexpr const char* k_backward_handle = "ConnectionHandler.rpc_backward";  ///< ExpertRequest -> ExpertResponse
/// Streamed forms: a stream of ExpertRequest chunks -> a stream of ExpertResponse chunks.
inline constexpr const char* k_forward_stream_handle = "ConnectionHandler.rpc_forward_stream";
inline constexpr const char* k_backward_stream_handle = "ConnectionHandler.rpc_backward_stream";

/// The local method that gives the states of the experts that have one (an ExpertStates:
/// uid -> ExpertBackend::state()), for checkpoints.
inline constexpr const char* k_state_method = "state";
using ExpertStates = std::map<std::string, std::string>;

/// The pool timer: the next pool that becomes ready by its timeout.
inline constexpr TimerId k_pool_timer = 1;
/// The timer of the stream that goes idle first.
inline constexpr TimerId k_stream_timer = 2;
/// How long a streamed request may go without a message before the server drops it: a
/// caller sends a stream's chunks back to back, so a minute of silence means it is gone
/// without a word or called a streaming handle as a unary one (its rest never comes).
inline constexpr Duration k_stream_idle = std::chrono::seconds(60);

/// What the server has done so far (for stats and tests).
struct ExpertServerStats {
  std::size_t batches = 0;         ///< backend calls (forward and backward)
  std::size_t rows = 0;            ///< rows of those batches
  std::size_t failed_batches = 0;  ///< batches whose compute failed
  std::size_t refused = 0;         ///< requests answered with an error before queueing
  std::size_t streams = 0;         ///< streamed requests opened
  std::size_t broken_streams = 0;  ///< streamed requests broken off or idle before their end
};

/// One expert server. Experts are added before the host starts the role.
class ExpertServerRole final : public Role {
 public:
  ExpertServerRole() = default;
  /// A server addressed as `addressing` says: it serves `<handle>@<PeerID>` (and the plain
  /// handles unless other servers share its transport), so that several expert servers
  /// can run behind one gateway. The default serves the plain handles only.
  explicit ExpertServerRole(Addressing addressing) : addressing_(std::move(addressing)) {}

  /// Serves `backend` as expert `uid`, its forward and backward pools each batching by
  /// `pool`. Errors: errc::invalid_argument for an empty or taken uid, no backend, or a
  /// pool config that PoolConfig::validate rejects.
  [[nodiscard]] Status add_expert(const std::string& uid, std::unique_ptr<ExpertBackend> backend,
                                  const PoolConfig& pool);

  /// {k_info_handle, k_forward_handle, k_backward_handle, k_forward_stream_handle,
  /// k_backward_stream_handle}, addressed as the role is.
  [[nodiscard]] std::vector<std::string> handles() const override {
    return addressing_.served(
        {k_info_handle, k_forward_handle, k_backward_handle, k_forward_stream_handle, k_backward_stream_handle});
  }
  /// The role contract: requests, streamed requests' later messages, its timers and the
  /// k_state_method local call.
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  /// Answers or queues request `id` for `handle` (plain or addressed); may run the
  /// batches it makes ready.
  [[nodiscard]] Effects on_request(TimePoint now, RequestId id, const std::string& handle, const Buffer& body);
  /// The next message (or the end, or the caller's breaking off) of streamed request `id`.
  [[nodiscard]] Effects on_request_message(TimePoint now, RequestId id, const Result<Buffer>& message, bool last);
  /// Runs the batches that are ready (k_pool_timer), or drops the idle streams.
  [[nodiscard]] Effects on_timer(TimePoint now, TimerId id);

  /// The backend of expert `uid`, or null.
  [[nodiscard]] ExpertBackend* expert(const std::string& uid);
  /// Tasks queued, not yet run.
  [[nodiscard]] std::size_t queued_tasks() const { return tasks_.size(); }
  /// Streamed requests whose caller has not ended its direction yet.
  [[nodiscard]] std::size_t open_streams() const { return streams_.size(); }
  [[nodiscard]] const ExpertServerStats& stats() const { return stats_; }

 private:
  enum class Kind { forward, backward };
  /// A queued request.
  struct PendingTask {
    RequestId request = 0;
    std::vector<Tensor> inputs;
    bool stream = false;  ///< answer chunk by chunk
  };
  /// A streamed request whose chunks are still coming.
  struct InStream {
    Kind kind = Kind::forward;
    RequestJoiner joiner;
    TimePoint last{};  ///< when its latest message came
  };
  /// What a pool computes.
  struct PoolOf {
    std::string uid;
    Kind kind = Kind::forward;
  };

  /// k_state_method; any other method is unknown.
  Effects on_local(const LocalCall& call);
  Effects on_info(RequestId id, const Buffer& body);
  Effects on_call(TimePoint now, RequestId id, Kind kind, const Buffer& body);
  /// Opens streamed request `id` with its first message.
  Effects on_stream(TimePoint now, RequestId id, Kind kind, const Buffer& body);
  /// Drops the streams idle for k_stream_idle at `now`, each with an error reply.
  Effects expire_streams(TimePoint now);
  /// Arms k_stream_timer for the stream that goes idle first (never later than that; a
  /// timer that fires early re-arms), or disarms it when no stream is open.
  void arm_stream_timer(Effects& fx);
  /// Decodes, checks and queues a whole request (unary or joined from a stream).
  Effects submit(TimePoint now, RequestId id, Kind kind, const pb::ExpertRequest& request, bool stream);
  /// Arms the pool timer for `now` (unless it is due already): run_ready once the host
  /// has handed over the requests it holds.
  Effects run_soon(TimePoint now);
  /// Runs every batch the scheduler gives at `now`, then arms or disarms the pool timer.
  Effects run_ready(TimePoint now);
  /// Runs one batch and replies to each of its tasks.
  void run_batch(const Batch& batch, Effects& fx);
  /// Answers one task with its rows `part` of the outputs, encoded as `schema` says:
  /// one ExpertResponse, or its chunks for a streamed request.
  void answer(const PendingTask& task, const std::string& uid, const std::vector<Tensor>& part,
              const std::vector<TensorSchema>& schema, Effects& fx);
  /// The outputs of `batch` (checked against what its kind gives), or the error.
  Result<std::vector<Tensor>> compute(const Batch& batch, const PoolOf& pool);
  /// An error reply for a request refused before queueing.
  Effects refuse(RequestId id, Error error);
  /// "no expert 'x' ...".
  Error unknown_expert(const std::string& uid) const;

  Addressing addressing_;
  std::map<std::string, std::unique_ptr<ExpertBackend>> experts_;
  std::map<std::string, PoolOf> pools_;  ///< scheduler pool name -> expert and kind
  Scheduler scheduler_;
  std::map<TaskId, PendingTask> tasks_;
  std::map<RequestId, InStream> streams_;
  TaskId next_task_ = 1;
  std::optional<TimePoint> timer_at_;         ///< when k_pool_timer is armed
  std::optional<TimePoint> stream_timer_at_;  ///< when k_stream_timer is armed
  ExpertServerStats stats_;
};

}  // namespace apiary::core::moe
