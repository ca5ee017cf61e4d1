#pragma once
/// AveragerRole: one averager's steps (hivemind's DecentralizedAverager.step, reference
/// §3) as a Role (core/role.hpp): matchmaking finds a group through the DHT, then one
/// AllReduceRunner averages the step's tensors with that group. Its host runs it beside
/// the process's DHT node: the role's DHT declarations and reads are Asks to that role
/// (k_run_method NodeOps), its part reductions Asks to a device role when it has one,
/// and a step's result leaves as the Complete of the k_step_method call that began it.
///
/// Local methods: k_step_method (AveragerStep; completes with AveragerStepResult or why
/// the step failed; one at a time, another while one runs completes at once with
/// errc::unavailable), k_trigger_method (optional args: the tensors as they are now, which
/// replace the step's when its all-reduce has not begun; a step waiting for its trigger
/// thus averages the values of trigger time, as hivemind's does) and k_cancel_method (no
/// args); both complete at once,
/// k_set_weight_method (double; completes with a bool: false once the all-reduce began).
///
/// Gather bytes: every member's gather is the msgpack array [bandwidth or nil, mode,
/// user gather (bin)]; the role unwraps it into the modes and bandwidths that decide who
/// reduces what (load_balance_peers) and hands the users' bytes back in the group.
///
/// A step may wait for a trigger (require_trigger): the group is found, but this peer's
/// all-reduce begins only at trigger(); its weight may change until then. Streams of
/// groupmates that began first are held meanwhile. A step whose group could not be
/// formed (disbanded, leader failure) is retried until its deadline; one that reached the
/// deadline fails with matchmaking's "could not find a group".
///
/// Ids (inside the role's own space): matchmaking's calls and timers live at
/// [0, k_round_ids), round r's runner at (r + 1) * k_round_ids + [0, k_round_ids).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/averaging/allreduce.hpp"
#include "core/addressing.hpp"
#include "core/averaging/matchmaking.hpp"
#include "core/averaging/powersgd.hpp"
#include "core/effects.hpp"
#include "core/role.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core::averaging {

/// Ids reserved for matchmaking, and for each round's runner.
inline constexpr std::uint64_t k_round_ids = std::uint64_t{1} << 24;

/// The averager's local methods (see above).
inline constexpr const char* k_step_method = "step";
inline constexpr const char* k_trigger_method = "trigger";
inline constexpr const char* k_cancel_method = "cancel";
inline constexpr const char* k_set_weight_method = "set_weight";
/// The local method of a device role the averager asks for a part reduction (args
/// ReduceJob; answered with a ReducedPart).
inline constexpr const char* k_reduce_method = "reduce";

/// Fixed settings of one averager.
struct AveragerRoleConfig {
  /// This averager's id in groups and in the DHT (its multiaddr with /p2p/ in a real
  /// process; any unique bytes in the simulator).
  PeerIdBytes peer_id;
  /// DHT time (seconds) = to_seconds(now) + dht_epoch.
  double dht_epoch = 0;
  /// Where calls to a groupmate go (default: address_of_multiaddr, its id is its address).
  std::function<PeerAddr(const PeerIdBytes&)> address_of;
  /// The part stream's handle (with the averager's prefix, if the host uses one).
  std::string part_handle = k_aggregate_part_handle;
  /// The join stream's handle (with the averager's prefix, if the host uses one): served
  /// as a leader, called as a follower.
  std::string join_handle = k_join_handle;
  /// Every member of a round ends with the same bits (AllReduceConfig::identical_results;
  /// every member must use it): the step's result carries the averaged tensors
  /// (`averages`) instead of deltas, and alpha must be 1.
  bool identical_results = false;
  /// Serve the join stream (false for a client: it only joins others' groups).
  bool serve_join = true;
  /// The name of the process's DHT node role (the target of matchmaking's Asks).
  std::string dht_role = "dht";
  /// The name of a device role that runs the all-reduce's part reductions (Asks of
  /// method "reduce" with a ReduceJob, answered with a ReducedPart); "": inline.
  std::string device_role;
  /// PeerID bytes named as the caller of the role's calls ("": the transport's own).
  std::string caller;
  /// Whether the role's handles and its calls to groupmates carry PeerIDs (several
  /// averagers on one transport); default: plain handles.
  Addressing addressing;
  /// The all-reduce's uncompressed parts leave as spliced messages (AllReduceConfig::
  /// splice_parts): for shells whose transport sends the pieces as they are.
  bool splice_parts = false;
  /// Average the step's tensors by PowerSGD (core/averaging/powersgd.hpp): each round is
  /// two all-reduces on the found group, phase P on group id + ".phase_p" (skipped when no
  /// tensor is compressed) and phase Q on group id + ".phase_q", with the role keeping the
  /// error feedback and the warm-started Qs between steps. The step's tensors are the
  /// local gradients; its deltas turn them into the group's low-rank average (alpha 1).
  /// Not with identical_results.
  std::optional<PowerSgdConfig> powersgd;
};

/// One step: what matchmaking needs and how to run the all-reduce.
struct AveragerStep {
  /// Matchmaking's part; `gather` is the user's bytes, `client_mode` is set from `mode`,
  /// `weight` is this peer's averaging weight (0 for aux).
  StepParams params;
  /// node, client (sends, never reduces) or aux (reduces, never sends).
  AveragingMode mode = AveragingMode::node;
  /// This peer's declared bandwidth (any unit shared by the swarm); nullopt: undeclared.
  std::optional<double> bandwidth;
  /// The tensors to average (float32, flattened); an aux peer may pass empty vectors of
  /// the right count and is then given zero deltas.
  std::vector<std::vector<float>> tensors;
  /// Elements per tensor (the schema); taken from `tensors` when empty.
  std::vector<std::int64_t> tensor_sizes;
  /// Codec per tensor's parts (one entry applies to all).
  std::vector<pb::CompressionType> codecs{pb::NONE};
  /// Largest compressed part, bytes.
  std::int64_t part_size_bytes = std::int64_t{1} << 19;
  /// A peer whose share would be below this many elements reduces nothing.
  std::int64_t min_vector_size = 0;
  Duration sender_timeout = std::chrono::seconds(5);    ///< see AllReduceConfig
  Duration reducer_timeout = std::chrono::seconds(10);  ///< see AllReduceConfig
  Duration call_timeout = std::chrono::seconds(60);     ///< see AllReduceConfig
  /// Begin the all-reduce only at trigger().
  bool require_trigger = false;
};

/// What a finished step yields.
struct AveragerStepResult {
  /// The group: members, leader, next group key. `gathered` holds the users' bytes.
  GroupInfo group;
  /// Each member's mode, aligned with group.peers.
  std::vector<AveragingMode> modes;
  /// Elements load balancing gave each member, aligned with group.peers (whole parts go
  /// to the member with the larger overlap).
  std::vector<std::int64_t> shares;
  /// Per tensor, the group average minus this peer's value (0 where unknown).
  std::vector<std::vector<float>> deltas;
  /// With identical_results instead of deltas: the tensors as every member holds them
  /// after the round (the local values where a part was not averaged).
  std::vector<std::vector<float>> averages;
  std::vector<PeerAddr> failed_senders;   ///< senders excluded by this peer's reducer
  std::vector<PeerAddr> failed_reducers;  ///< reducers whose parts kept local values
  std::size_t attempts = 1;               ///< matchmaking attempts (retries + 1)
};

/// What one of the role's parts produced, before the role turns it into Effects.
struct AveragerEffects {
  Effects rpc;
  std::vector<DhtOp> dht;
  /// Part reductions to run on the device role; each result goes back through
  /// on_reduced(job.id, ...), in any order.
  std::vector<ReduceJob> reduce;
  /// At most once per step: the step's result or why it failed.
  std::optional<Result<AveragerStepResult>> outcome;
};

/// One averager: matchmaking + all-reduce, one step at a time.
class AveragerRole final : public Role {
 public:
  /// A role drawing group ids and orders from `rng`.
  AveragerRole(AveragerRoleConfig config, NextU64 rng);

  /// The part stream's handle, and the join stream's when serve_join.
  [[nodiscard]] std::vector<std::string> handles() const override;
  /// Part streams' messages are reduced where they lie in their buffers (no copy).
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  /// True while a step runs.
  [[nodiscard]] bool busy() const { return step_.has_value(); }
  /// True once the running step's all-reduce began.
  [[nodiscard]] bool reducing() const { return phases_started_ > 0; }
  /// The PowerSGD state (error feedback, Qs) when the role averages by PowerSGD.
  [[nodiscard]] const PowerSgdState* powersgd() const { return powersgd_ ? &*powersgd_ : nullptr; }
  /// The group key to use next (Moshpit: the last group's next key, else "").
  [[nodiscard]] const std::string& next_group_key() const { return next_group_key_; }

 private:
  /// What an Ask of the role was for.
  struct Asked {
    bool reduce = false;   ///< a part reduction (else a DHT operation)
    bool declare = false;  ///< a DHT declaration (else a read of a group key)
    std::uint64_t id = 0;  ///< the reduce job's id, or matchmaking's DHT op id
  };

  /// The local methods.
  [[nodiscard]] Effects local(TimePoint now, const LocalCall& call);
  /// An Ask's answer.
  [[nodiscard]] AveragerEffects answered(TimePoint now, LocalReply reply);
  /// `afx` as Effects: DHT operations and reductions become Asks, the outcome the
  /// running step's Complete; the caller is named on calls. A phase that finished
  /// meanwhile is followed by the step's next one first.
  [[nodiscard]] Effects lower(TimePoint now, AveragerEffects afx);

  AveragerEffects step(TimePoint now, AveragerStep step);
  AveragerEffects trigger(TimePoint now, std::vector<std::vector<float>>* fresh = nullptr);
  bool set_weight(double weight);
  AveragerEffects cancel(TimePoint now);
  [[nodiscard]] bool serves(const std::string& handle) const;
  AveragerEffects on_request(TimePoint now, RequestId id, const std::string& handle, const PeerAddr& from,
                             Buffer body);
  AveragerEffects on_request_message(TimePoint now, RequestId id, Result<Buffer> message, bool last);
  /// `landed`: an answer the transport wrote where the runner posted it (head + tail only).
  AveragerEffects on_message(TimePoint now, CallId call, std::string_view message, bool landed = false);
  AveragerEffects on_response(TimePoint now, CallId call, const Result<std::string>& result);
  AveragerEffects on_timer(TimePoint now, TimerId id);
  AveragerEffects on_declared(TimePoint now, DhtOpId op, bool ok);
  AveragerEffects on_averagers(TimePoint now, DhtOpId op, std::vector<Averager> active);
  AveragerEffects on_reduced(TimePoint now, std::uint64_t job, Result<ReducedPart> result);

  /// A part stream input that arrived before this peer's runner for its group.
  struct Held {
    RequestId id = 0;
    PeerAddr from;
    Result<Buffer> message{Buffer{}};
    bool last = false;
    bool open = false;  ///< the stream's first message (else a later one)
    std::string group;  ///< the group id of a first message
  };

  /// The step's matchmaking params, with the wrapped gather.
  [[nodiscard]] StepParams matchmaking_params() const;
  void absorb(TimePoint now, MatchmakingEffects mfx, AveragerEffects& out);
  void on_group(TimePoint now, GroupInfo group, AveragerEffects& out);
  /// Starts the step's next all-reduce (its only one, or a PowerSGD phase; `previous`:
  /// the deltas of the phase before).
  void begin_phase(TimePoint now, AveragerEffects& out, std::vector<std::vector<float>> previous = {});
  /// Starts a runner averaging `tensors` with the group under `group_id`.
  void start_runner(TimePoint now, const std::string& group_id, std::vector<std::vector<float>> tensors,
                    std::vector<std::int64_t> sizes, std::vector<pb::CompressionType> codecs, AveragerEffects& out);
  /// The group ids of the step's all-reduces, in order.
  [[nodiscard]] std::vector<std::string> phase_group_ids() const;
  /// True when a part stream of `group` belongs to an all-reduce of this step that has
  /// not begun (or to a group not known yet).
  [[nodiscard]] bool awaited(const std::string& group) const;
  void serve_held(TimePoint now, AveragerEffects& out);
  void refuse_held(AveragerEffects& out, const char* why);
  void runner_effects(Effects fx, AveragerEffects& out);
  /// PowerSGD: phase P's tensors (P = (error + gradient) Q per compressed tensor), phase
  /// Q's (Q = M^T P from the averaged, orthogonalized P, then the plain tensors), and the
  /// step's deltas from phase Q's outcome.
  void powersgd_phase_p(std::vector<std::vector<float>>& tensors, std::vector<std::int64_t>& sizes,
                        std::vector<pb::CompressionType>& codecs);
  void powersgd_phase_q(std::vector<std::vector<float>> p_deltas, std::vector<std::vector<float>>& tensors,
                        std::vector<std::int64_t>& sizes, std::vector<pb::CompressionType>& codecs);
  [[nodiscard]] std::vector<std::vector<float>> powersgd_deltas(std::vector<std::vector<float>> phase_q);
  void finish(Result<AveragerStepResult> outcome, AveragerEffects& out);
  [[nodiscard]] bool runner_id(std::uint64_t id) const;
  [[nodiscard]] std::uint64_t runner_base() const { return (round_ + 1) * k_round_ids; }

  AveragerRoleConfig config_;
  Matchmaking matchmaking_;
  std::optional<AveragerStep> step_;
  std::optional<AveragerStepResult> group_;  ///< the found group, before/while reducing
  bool triggered_ = false;
  std::size_t attempts_ = 0;
  std::vector<std::optional<double>> bandwidths_;  ///< the group's, for each phase's shares
  std::size_t phases_started_ = 0;  ///< all-reduces the step began (its runner is the last)
  std::string runner_group_;        ///< the group id of the running all-reduce
  /// A phase that finished with more to come (its outcome), followed up by lower().
  std::optional<AllReduceOutcome> phase_done_;
  std::optional<PowerSgdState> powersgd_;
  std::vector<std::vector<float>> psgd_m_;  ///< per compressed tensor: error + gradient
  std::vector<std::vector<float>> psgd_p_;  ///< per compressed tensor: this peer's P, then the group's
  std::vector<std::vector<float>> psgd_q_;  ///< per compressed tensor: this peer's Q of phase Q
  std::uint64_t round_ = 0;  ///< runners started so far (ids of the current one)
  std::optional<AllReduceRunner> runner_;
  std::vector<Held> held_;
  std::map<RequestId, bool> requests_;  ///< served request → is a part stream
  std::string next_group_key_;
  std::optional<OpId> step_op_;          ///< the running step's k_step_method call
  std::map<OpId, Asked> asks_;           ///< Asks awaiting their answer
  OpId next_ask_ = 1;
};

/// The gather bytes a member sends: msgpack [bandwidth or nil, mode, user bytes].
[[nodiscard]] std::string wrap_gather(std::optional<double> bandwidth, AveragingMode mode,
                                      const std::string& user);
/// A member's gather unwrapped. Errors: not the array above (invalid_argument).
struct MemberGather {
  std::optional<double> bandwidth;
  AveragingMode mode = AveragingMode::node;
  std::string user;
};
[[nodiscard]] Result<MemberGather> unwrap_gather(const std::string& gather);

}  // namespace apiary::core::averaging
