#pragma once
/// A replica's side of parameter-server training over the gateway: a blocking driver,
/// for a training loop, around core::ps::Replica. Each step the loop calls pull() (one
/// pull per shard, in parallel, reassembled into whole variables) and then push() with
/// its gradients (one push per shard, in parallel; the step ends when every shard has
/// taken its piece). Every call carries a deadline, so a PS process that died or a
/// replica that stopped (a synchronous step then never completes) ends the step with an
/// error naming the shard, the PS device and its address, never a hang.
///
/// The driver also keeps a session stream open to every PS process (k_ps_join_handle)
/// until leave(): if this replica dies, the PS processes learn it from the stream's
/// failure and end the other replicas' synchronous steps at once (core/ps/server.hpp).
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/gateway.hpp"
#include "core/ps/plan.hpp"
#include "core/ps/replica.hpp"

namespace apiary::actors {

/// What a replica driver needs.
struct ReplicaDriverConfig {
  std::int32_t replica = 0;                ///< replica id (index in plan.replicas)
  core::ps::TrainingPlan plan;             ///< the job (same on every process)
  std::map<std::string, PeerKey> servers;  ///< PS device -> "host:port" of its process
  /// Deadline of each pull or push (ms). A synchronous pull waits for the slowest
  /// replica, so this bounds how long a replica may lag before the others give up.
  std::chrono::milliseconds timeout{30000};
  /// Shards whose pulls go to this node's proxy instead of their PS (local_replication,
  /// actors/ps/proxy_actor.hpp): shard id -> the proxy's "host:port". Pushes always go
  /// to the PS.
  std::map<std::size_t, PeerKey> pull_via;
};

/// One replica's blocking step driver. Use from one thread.
class ReplicaDriver {
 public:
  /// Checks that every PS device of the plan has an address and that the replica id is
  /// one of the plan's. Errors: invalid_argument.
  [[nodiscard]] static Result<std::unique_ptr<ReplicaDriver>> create(caf::actor_system& sys,
                                                                     std::shared_ptr<Gateway> gw,
                                                                     ReplicaDriverConfig config);

  /// Pulls every shard for the current step and returns the whole variables by name.
  /// Checks the staleness bound: a synchronous shard must answer step s at version
  /// >= s - staleness (errc::internal otherwise). Errors: the failed call's code
  /// (peer_down, deadline_exceeded, a shard's refusal) with a message naming it.
  [[nodiscard]] Result<std::map<std::string, std::vector<float>>> pull();

  /// pull() into `params`, reusing the vectors it holds: an unpartitioned variable's
  /// values are received straight into its vector when that has the right size (the
  /// vector is posted as the answer's Landing), so a loop that passes the same map every
  /// step keeps its memory and copies nothing after the transport. On success `params`
  /// holds every variable; on an error (as pull()) its contents are unspecified.
  [[nodiscard]] Status pull_into(std::map<std::string, std::vector<float>>& params);

  /// Pushes this step's gradients (whole variables, by name) computed from `samples`
  /// examples; returns when every shard has taken its piece, and the step advances.
  /// Errors: as pull(), or invalid_argument on missing or mis-sized gradients.
  [[nodiscard]] Status push(const std::map<std::string, core::ps::Gradient>& gradients, double samples);
  /// As push(), with each dense gradient of a whole variable sent from where it lies
  /// instead of copied into its request: the map is lent to the push and handed back
  /// through `gradients` when it returns, its storage unchanged (or, where a request
  /// may still be in flight after a failure, as a copy, so the bytes in flight stay as
  /// they were). Pass the same map every step to keep its memory.
  [[nodiscard]] Status push_lent(std::map<std::string, core::ps::Gradient>& gradients, double samples);

  /// Every variable's optimizer state on the PS (slots of a partitioned variable put
  /// back together), as the shards stand: for the chief's checkpoint after its last pull.
  /// Errors: as pull().
  [[nodiscard]] Result<std::map<std::string, core::ps::Optimizer::State>> optimizer_states();

  /// Ends the sessions normally (the replica is done; call it after the last pull) and
  /// waits up to `patience` for every PS process to acknowledge, so that a process
  /// exiting next is not taken for a dead replica. Errors: deadline_exceeded naming the
  /// PS processes that did not answer (training itself is unaffected).
  [[nodiscard]] Status leave(std::chrono::milliseconds patience = std::chrono::seconds(5));

  /// Ends any session still open, without waiting.
  ~ReplicaDriver();
  ReplicaDriver(const ReplicaDriver&) = delete;
  ReplicaDriver& operator=(const ReplicaDriver&) = delete;

  /// The step being run (or next to run).
  [[nodiscard]] std::int64_t step() const { return replica_.step(); }
  /// Smallest version among the current step's pulled shards.
  [[nodiscard]] std::int64_t min_version() const { return replica_.min_version(); }
  /// The replica id.
  [[nodiscard]] std::int32_t id() const { return config_.replica; }
  /// The job's plan.
  [[nodiscard]] const core::ps::TrainingPlan& plan() const { return config_.plan; }
  /// Pull answers received straight into the caller's vectors (pull_into), so far.
  [[nodiscard]] std::size_t pulls_landed() const { return pulls_landed_; }

 private:
  ReplicaDriver(caf::actor_system& sys, std::shared_ptr<Gateway> gw, ReplicaDriverConfig config,
                core::ps::Replica replica);
  /// push() and push_lent(): with an `owner` of the gradients, dense ones are spliced.
  [[nodiscard]] Status push_from(const std::map<std::string, core::ps::Gradient>& gradients, double samples,
                                 const std::shared_ptr<const void>& owner);
  /// A call's response: whole, or its head + tail with the body in the call's Landing.
  struct Answer {
    Buffer body;
    bool landed = false;
  };
  /// Issues one call per (shard, request), with the shard's landing if `landings` has
  /// one, and waits for all; returns the responses by shard id, or the first failure as
  /// an error naming `what`, the shard and its PS.
  Result<std::map<std::size_t, Answer>> call_all(const char* what, const char* handle,
                                                 std::vector<std::pair<std::size_t, Payload>> requests,
                                                 std::map<std::size_t, Landing> landings = {});
  Error describe(const char* what, std::size_t shard, const Error& e) const;
  /// Opens a session stream to every PS process.
  void join();

  caf::scoped_actor self_;
  std::shared_ptr<Gateway> gw_;
  ReplicaDriverConfig config_;
  core::ps::Replica replica_;
  std::map<CallId, std::string> sessions_;  ///< open session call -> PS device
  std::map<std::size_t, std::string> whole_;  ///< shard id -> the variable it holds whole
  std::size_t pulls_landed_ = 0;
};

}  // namespace apiary::actors
