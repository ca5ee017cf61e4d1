#pragma once
/// PsClientRole: a replica's side of the parameter servers, as a role. It opens a session
/// with every PS device when it starts (kept while the replica trains: a PS learns from
/// its end that the replica left), pulls every shard of a step (through a node's proxy
/// where the plan replicates locally) and pushes the step's gradients over
/// core/ps/wire.hpp, with core::ps::Replica cutting and reassembling the pieces. Every
/// failure names the shard, the PS device and its address (and the proxy).
///
/// Local methods (core/role.hpp: LocalCall), one at a time:
///   "pull"   no args                -> PsPulled (the step's reassembled parameters)
///   "push"   PsPushArgs              -> nothing, once every shard acknowledged
///   "leave"  no args                -> nothing; ends every session normally
///   "stop"   Error (why)             -> nothing; abandons the calls in flight and leaves
///                                       every session with the reason, so the PS devices
///                                       fail the synchronous steps that wait for it
///   "watch"  no args                -> completes only with the error that ended the
///                                       client outside a call (a session ended early,
///                                       a PS went down)
/// After a failure every call completes with that failure.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/ps/plan.hpp"
#include "core/ps/replica.hpp"
#include "core/role.hpp"

namespace apiary::core::train {

/// What a PsClientRole needs.
struct PsClientConfig {
  std::int32_t replica = 0;                     ///< replica id (index in plan->replicas)
  std::shared_ptr<const ps::TrainingPlan> plan;  ///< the PS variables and shards
  std::map<std::string, PeerAddr> servers;      ///< PS device -> its address
  std::map<std::size_t, PeerAddr> pull_via;     ///< shard -> the proxy it is pulled through
  Duration call_timeout = std::chrono::seconds(30);  ///< deadline of each pull and push
  std::string label = "replica";                ///< how errors of create() name the replica
};

/// What "pull" gives.
struct PsPulled {
  std::int64_t step = 0;     ///< the step the parameters are for
  std::int64_t version = 0;  ///< smallest version among the pulled pieces
  std::map<std::string, std::vector<float>> params;  ///< by variable name
};

/// What "push" takes.
struct PsPushArgs {
  std::map<std::string, ps::Gradient> gradients;  ///< every PS variable's whole gradient
  double samples = 1.0;                            ///< examples behind it (the aggregation weight)
};

class PsClientRole final : public Role {
 public:
  /// Errors: invalid_argument (no plan, a PS device without an address), Replica::create's.
  [[nodiscard]] static Result<std::unique_ptr<PsClientRole>> create(PsClientConfig config);

  [[nodiscard]] std::vector<std::string> handles() const override { return {}; }
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  /// The replica's step state machine (its step and the pulled versions).
  [[nodiscard]] const ps::Replica& replica() const { return replica_; }

 private:
  /// A pull or push in flight.
  struct InFlight {
    std::size_t shard = 0;
    bool pull = true;
  };

  PsClientRole(PsClientConfig config, ps::Replica replica) : config_(std::move(config)), replica_(std::move(replica)) {}
  Effects open();
  Effects on_call(LocalCall call);
  Effects on_response(const Response& response);
  Effects on_peer_down(const PeerAddr& peer);
  /// Starts the step's pulls, or its pushes; the op completes when every shard answered.
  Status pull(Effects& out);
  Status push(Effects& out, const PsPushArgs& args);
  /// Where a pull (or push) of `shard` goes: the proxy or the PS.
  [[nodiscard]] const PeerAddr& target(std::size_t shard, bool pull) const;
  /// A unary call about `shard`, or the error when its target is down.
  Status call(Effects& out, std::size_t shard, bool pull, const char* handle, std::string body);
  [[nodiscard]] Error describe(const char* what, std::size_t shard, const Error& e) const;
  /// Abandons the calls in flight and leaves every session with `why`.
  void cancel(Effects& out, const Error& why);
  /// Ends the client with `error`: cancels what is in flight, completes the running op
  /// and the watch with it.
  Effects fail(Error error);
  /// Completes the running op with `result`.
  void finish(Effects& out, Result<Value> result);

  PsClientConfig config_;
  ps::Replica replica_;
  std::map<CallId, InFlight> calls_;        ///< pulls and pushes in flight
  std::map<CallId, std::string> sessions_;  ///< open session -> PS device
  std::set<PeerAddr> down_;                 ///< peers whose connection broke
  CallId next_call_ = 1;
  std::optional<OpId> running_;  ///< the pull or push being run
  std::optional<OpId> watch_;
  bool stopped_ = false;          ///< left, stopped or failed: session ends are expected
  std::optional<Error> failure_;
};

}  // namespace apiary::core::train
