#pragma once
/// The expert server as a role (hivemind's ConnectionHandler with its Runtime, reference
/// §6.1): serves `rpc_info`, `rpc_forward` and `rpc_backward` for a set of experts, each
/// a uid with an ExpertBackend and the config of its task pools. A request's tensors are
/// decoded and checked against the expert's schema (an unknown uid, a malformed message,
/// a wrong tensor count or shape, or a task larger than max_batch_size is an error reply
/// to that caller alone), queued as one task in the expert's forward or backward pool,
/// and run when the Scheduler says: the tasks of a batch are joined along dimension 0,
/// computed in one backend call inside the role, and the outputs split back per task and
/// sent as ExpertResponse, each tensor encoded with its schema's compression. A failed
/// batch is an error reply to each of its tasks; the server carries on. Pool timeouts
/// arm one timer (k_pool_timer).
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
#include "core/moe/task_pool.hpp"
#include "core/role.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core::moe {

/// The handles, hivemind's protocol ids (ConnectionHandler's methods).
inline constexpr const char* k_info_handle = "ConnectionHandler.rpc_info";          ///< ExpertUID -> ExpertInfo
inline constexpr const char* k_forward_handle = "ConnectionHandler.rpc_forward";    ///< ExpertRequest -> ExpertResponse
inline constexpr const char* k_backward_handle = "ConnectionHandler.rpc_backward";  ///< ExpertRequest -> ExpertResponse

/// The local method that gives the states of the experts that have one (an ExpertStates:
/// uid -> ExpertBackend::state()), for checkpoints.
inline constexpr const char* k_state_method = "state";
using ExpertStates = std::map<std::string, std::string>;

/// The one timer of the role: the next pool that becomes ready by its timeout.
inline constexpr TimerId k_pool_timer = 1;

/// What the server has done so far (for stats and tests).
struct ExpertServerStats {
  std::size_t batches = 0;         ///< backend calls (forward and backward)
  std::size_t rows = 0;            ///< rows of those batches
  std::size_t failed_batches = 0;  ///< batches whose compute failed
  std::size_t refused = 0;         ///< requests answered with an error before queueing
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

  /// {k_info_handle, k_forward_handle, k_backward_handle}, addressed as the role is.
  [[nodiscard]] std::vector<std::string> handles() const override {
    return addressing_.served({k_info_handle, k_forward_handle, k_backward_handle});
  }
  /// The role contract: requests, the pool timer and the k_state_method local call.
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  /// Answers or queues request `id` for `handle` (plain or addressed); may run the
  /// batches it makes ready.
  [[nodiscard]] Effects on_request(TimePoint now, RequestId id, const std::string& handle, const Buffer& body);
  /// Runs the batches that became ready by their timeout.
  [[nodiscard]] Effects on_timer(TimePoint now, TimerId id);

  /// The backend of expert `uid`, or null.
  [[nodiscard]] ExpertBackend* expert(const std::string& uid);
  /// Tasks queued, not yet run.
  [[nodiscard]] std::size_t queued_tasks() const { return tasks_.size(); }
  [[nodiscard]] const ExpertServerStats& stats() const { return stats_; }

 private:
  enum class Kind { forward, backward };
  /// A queued request.
  struct PendingTask {
    RequestId request = 0;
    std::vector<Tensor> inputs;
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
  /// Runs every batch the scheduler gives at `now`, then arms or disarms the pool timer.
  Effects run_ready(TimePoint now);
  /// Runs one batch and replies to each of its tasks.
  void run_batch(const Batch& batch, Effects& fx);
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
  TaskId next_task_ = 1;
  std::optional<TimePoint> timer_at_;  ///< when k_pool_timer is armed
  ExpertServerStats stats_;
};

}  // namespace apiary::core::moe
