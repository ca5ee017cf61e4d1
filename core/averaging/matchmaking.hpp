#pragma once
/// Matchmaking: one averager finding a group through the DHT (reference §3.3).
///
/// Every non-client averager is at once a potential leader (it serves k_join_handle) and
/// a follower (it asks earlier leaders to take it). It declares itself under its group
/// key with expiration min(max(scheduled_time, now + min_matchmaking_time), deadline),
/// and re-declares at each expiration while still searching. The earliest-expiring
/// averager leads: a peer only asks peers that precede it in (expiration, PeerID bytes)
/// order. A leader assembles its group when it reaches target_group_size, or at its own
/// expiration when it has min_group_size members (else it disbands it), and sends every
/// follower BEGIN_ALLREDUCE with the group id, the shuffled member order and the gathered
/// bytes. A follower accepted by a leader hands its own followers to that leader
/// (GROUP_DISBANDED + suggested_leader) and waits for BEGIN_ALLREDUCE; a disbanded
/// follower follows the suggested leader. Past the deadline the step fails with
/// "could not find a group". Leaving is a later `false` declaration.
///
/// Pure: time comes in as `now`; calls, replies, timers and DHT operations go out as
/// effects; group ids and orders come from the injected generator.
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/averaging/matchmaking_types.hpp"
#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::pb {
class JoinRequest;
class MessageFromLeader;
}  // namespace apiary::pb

namespace apiary::core::averaging {

/// Timer: this averager's declared expiration (assemble or disband, then re-declare).
inline constexpr TimerId k_expiration_timer = 1;
/// Timer: the step's deadline.
inline constexpr TimerId k_deadline_timer = 2;
/// Timer: a follower's wait for the current leader's next message.
inline constexpr TimerId k_join_timer = 3;
/// Timer: read the leader queue from the DHT again (it had no eligible leader).
inline constexpr TimerId k_refresh_timer = 4;

/// One averager's matchmaking role, one step at a time.
class Matchmaking {
 public:
  /// A role for the averager `config.peer_id`, drawing from `rng`.
  Matchmaking(MatchmakingConfig config, NextU64 rng);

  /// Starts a step: declares (unless client mode), reads the leader queue and arms the
  /// deadline. Invalid params, or a step already running, end at once with an error
  /// outcome (invalid_argument).
  [[nodiscard]] MatchmakingEffects start(TimePoint now, StepParams params);
  /// Abandons the running step (outcome errc::cancelled); no-op when idle.
  [[nodiscard]] MatchmakingEffects cancel(TimePoint now);

  /// Leader side: a follower `from` (its PeerID bytes) opened a join stream with a
  /// serialized JoinRequest. Answered with a rejection (ending the call) or ACCEPTED
  /// (keeping it open until BEGIN_ALLREDUCE or GROUP_DISBANDED).
  [[nodiscard]] MatchmakingEffects on_request(TimePoint now, RequestId id, const PeerIdBytes& from,
                                              const std::string& body);
  /// Leader side: the follower of request `id` sent more or went away (an error).
  [[nodiscard]] MatchmakingEffects on_request_message(TimePoint now, RequestId id,
                                                      const Result<std::string>& message, bool last);

  /// Follower side: a serialized MessageFromLeader arrived on join call `call`.
  [[nodiscard]] MatchmakingEffects on_message(TimePoint now, CallId call, const std::string& message);
  /// Follower side: join call `call` ended ("" normally, else the error).
  [[nodiscard]] MatchmakingEffects on_response(TimePoint now, CallId call,
                                               const Result<std::string>& end);

  /// Timer `id` fired.
  [[nodiscard]] MatchmakingEffects on_timer(TimePoint now, TimerId id);
  /// DHT operation `op` (a DhtDeclare) finished; `ok` if the store was accepted.
  [[nodiscard]] MatchmakingEffects on_declared(TimePoint now, DhtOpId op, bool ok);
  /// DHT operation `op` (a DhtGetAveragers) found `active` (looking, unexpired peers).
  [[nodiscard]] MatchmakingEffects on_averagers(TimePoint now, DhtOpId op, std::vector<Averager> active);

  /// True while a step is running.
  [[nodiscard]] bool searching() const { return active_; }
  /// PeerIDs of the followers currently accepted, sorted.
  [[nodiscard]] std::vector<PeerIdBytes> followers() const;
  /// The leader that accepted this averager, if any.
  [[nodiscard]] std::optional<PeerIdBytes> current_leader() const;
  /// The expiration (DHT seconds) of the running step's current declaration, if any.
  [[nodiscard]] std::optional<double> declared_expiration() const { return declared_exp_; }
  /// This averager's PeerID bytes.
  [[nodiscard]] const PeerIdBytes& peer_id() const { return config_.peer_id; }

 private:
  /// A follower this averager (as leader) has accepted.
  struct Follower {
    RequestId request = 0;
    std::string gather;
    double expiration = 0;
  };
  /// This averager's (as follower) open join call.
  struct Join {
    CallId call = 0;
    PeerIdBytes leader;
    double expiration = 0;  ///< the expiration sent in the JoinRequest
    bool accepted = false;
  };

  [[nodiscard]] double dht_now(TimePoint now) const { return to_seconds(now) + config_.dht_epoch; }
  [[nodiscard]] TimePoint at_dht(double t) const { return from_seconds(t - config_.dht_epoch); }
  /// min(max(scheduled, now + min_matchmaking_time), deadline), DHT seconds.
  [[nodiscard]] double wanted_expiration(TimePoint now) const;

  // matchmaking.cpp: the step, declarations, the leader queue, timers.
  void declare(TimePoint now, MatchmakingEffects& fx);
  void read_queue(MatchmakingEffects& fx);
  void on_expiration(TimePoint now, MatchmakingEffects& fx);
  void on_deadline(TimePoint now, MatchmakingEffects& fx);
  /// At an expiration: assemble when min_group_size is met (true), else disband.
  [[nodiscard]] bool assemble_or_disband(TimePoint now, MatchmakingEffects& fx);
  void finish(TimePoint now, MatchmakingEffects& fx, Result<GroupInfo> outcome);
  [[nodiscard]] Result<GroupInfo> make_group(std::string group_id, std::vector<PeerIdBytes> peers,
                                             std::vector<std::string> gathered,
                                             PeerIdBytes leader) const;
  [[nodiscard]] Error no_group_error(TimePoint now) const;

  // matchmaking_leader.cpp: serving join requests, assembling, disbanding.
  [[nodiscard]] std::optional<int> check_request(TimePoint now, const PeerIdBytes& from,
                                                 const pb::JoinRequest& request) const;
  void assemble(TimePoint now, MatchmakingEffects& fx);
  void disband(MatchmakingEffects& fx);
  void answer(MatchmakingEffects& fx, RequestId id, const pb::MessageFromLeader& message,
              bool last) const;

  // matchmaking_follower.cpp: asking leaders.
  void try_next_leader(TimePoint now, MatchmakingEffects& fx);
  void send_join(TimePoint now, MatchmakingEffects& fx, const PeerIdBytes& leader);
  void end_join(TimePoint now, MatchmakingEffects& fx, bool cancel_call,
                const PeerIdBytes& suggested);
  void follower_begin(TimePoint now, MatchmakingEffects& fx, const pb::MessageFromLeader& message);

  MatchmakingConfig config_;
  NextU64 rng_;

  bool active_ = false;
  StepParams params_;
  std::optional<double> declared_exp_;  ///< the current declaration's expiration
  bool declared_ = false;               ///< the DHT accepted the current declaration
  DhtOpId declare_op_ = 0;              ///< the pending declaration (0: none)
  bool expiration_deferred_ = false;    ///< own expiration passed while following a leader

  std::set<std::pair<double, PeerIdBytes>> queue_;       ///< candidates, earliest first
  std::set<std::pair<PeerIdBytes, double>> past_attempts_;
  std::set<PeerIdBytes> suggestions_;  ///< leaders named by NOT_A_LEADER and asked this step
  DhtOpId queue_op_ = 0;                                  ///< the pending queue read (0: none)

  std::optional<Join> join_;
  std::map<PeerIdBytes, Follower> followers_;

  CallId next_call_ = 1;
  DhtOpId next_op_ = 1;
};

}  // namespace apiary::core::averaging
