#pragma once
/// A simulated replica's side of the parameter servers, shared by PsReplicaHost and
/// MixedReplicaHost: a session per PS device, the pulls (through a node's proxy where the
/// plan replicates locally) and pushes of core::ps::Replica over core/ps/wire.hpp, and
/// the errors that name the shard, the PS device and its address. Its call ids count up
/// from 1; a host's other ids must lie elsewhere.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "core/effects.hpp"
#include "core/ps/plan.hpp"
#include "core/ps/replica.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::sim::scenarios {

/// What PsClient::create needs.
struct PsClientConfig {
  std::int32_t replica = 0;                            ///< replica id (index in plan->replicas)
  std::shared_ptr<const core::ps::TrainingPlan> plan;  ///< the PS variables and shards
  std::map<std::string, core::PeerAddr> servers;       ///< PS device -> its World address
  std::map<std::size_t, core::PeerAddr> pull_via;      ///< shard -> the proxy it is pulled through
  core::Duration call_timeout{};                       ///< deadline of each pull and push
  std::string label = "replica";                       ///< how errors of create() name the replica
};

/// What a response completed.
enum class PsProgress {
  none,    ///< nothing yet
  pulled,  ///< every shard of the step's pull answered
  pushed,  ///< every shard acknowledged the step's push
};

class PsClient {
 public:
  /// Errors: invalid_argument (a PS device without an address), Replica::create's.
  [[nodiscard]] static Result<PsClient> create(PsClientConfig config);

  [[nodiscard]] core::ps::Replica& replica() { return replica_; }
  [[nodiscard]] const core::ps::Replica& replica() const { return replica_; }

  /// Opens a session with every PS device, kept while the replica trains.
  [[nodiscard]] core::Effects open();
  /// Pulls every shard for the next step. Errors: the Replica's, or a shard whose target
  /// is in `down` (its connection broke: it answers nothing more).
  [[nodiscard]] Result<core::Effects> pull(const std::set<core::PeerAddr>& down);
  /// Pushes `gradients` (weight: the batch's samples). Errors: as pull().
  [[nodiscard]] Result<core::Effects> push(const std::map<std::string, core::ps::Gradient>& gradients, double weight,
                                           const std::set<core::PeerAddr>& down);
  /// A response to one of its calls or sessions (`stopped`: the replica finished or
  /// failed, so a session's end is expected). Unknown calls complete nothing.
  [[nodiscard]] Result<PsProgress> on_response(core::CallId call, const Result<std::string>& response, bool stopped);
  /// The error when the connection to `peer` broke while a call to it is in flight.
  [[nodiscard]] std::optional<Error> lost(const core::PeerAddr& peer) const;
  /// Ends every session normally (the replica is done).
  [[nodiscard]] core::Effects leave() const;
  /// Abandons the calls in flight and leaves every session with `why`: the PS devices
  /// then fail the synchronous steps that wait for this replica.
  [[nodiscard]] core::Effects cancel(const Error& why);

 private:
  /// A pull or push in flight.
  struct InFlight {
    std::size_t shard = 0;
    bool pull = true;
  };

  PsClient(PsClientConfig config, core::ps::Replica replica);
  /// Where a pull (or push) of `shard` goes: the proxy or the PS.
  [[nodiscard]] const core::PeerAddr& target(std::size_t shard, bool pull) const;
  /// A unary call about `shard`, or the error when its target is down.
  [[nodiscard]] Status call(core::Effects& out, std::size_t shard, bool pull, const char* handle, std::string body,
                            const std::set<core::PeerAddr>& down);
  [[nodiscard]] Error describe(const char* what, std::size_t shard, const Error& e) const;

  PsClientConfig config_;
  core::ps::Replica replica_;
  std::map<core::CallId, InFlight> calls_;        ///< pulls and pushes in flight
  std::map<core::CallId, std::string> sessions_;  ///< open session -> PS device
  core::CallId next_call_ = 1;
};

}  // namespace apiary::sim::scenarios
