#pragma once
/// AveragerRole: one averager's steps (hivemind's DecentralizedAverager.step, reference
/// §3): matchmaking finds a group through the DHT, then one AllReduceRunner averages the
/// step's tensors with that group. The shell hosts the role beside a DHT node: it
/// routes inbound requests by handle (serves()), calls, messages and timers by id
/// (owns()), runs the role's DHT operations and feeds their results back.
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
/// Ids: matchmaking's calls and timers live at config.id_base + [0, k_round_ids), round
/// r's runner at config.id_base + (r + 1) * k_round_ids + [0, k_round_ids).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/averaging/allreduce.hpp"
#include "core/averaging/matchmaking.hpp"
#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core::averaging {

/// Ids reserved for matchmaking, and for each round's runner.
inline constexpr std::uint64_t k_round_ids = std::uint64_t{1} << 24;

/// Fixed settings of one averager.
struct AveragerRoleConfig {
  /// This averager's id in groups and in the DHT (its multiaddr with /p2p/ in a real
  /// process; any unique bytes in the simulator).
  PeerIdBytes peer_id;
  /// DHT time (seconds) = to_seconds(now) + dht_epoch.
  double dht_epoch = 0;
  /// Where calls to a groupmate go (default: its id is its address).
  std::function<PeerAddr(const PeerIdBytes&)> address_of;
  /// First call/timer id of the role (ids below are the shell's, e.g. its DHT node's).
  std::uint64_t id_base = std::uint64_t{1} << 48;
  /// The part stream's handle (with the averager's prefix, if the shell uses one).
  std::string part_handle = k_aggregate_part_handle;
  /// The all-reduce's reductions leave the role as AveragerEffects::reduce jobs (for a
  /// device actor), answered through on_reduced(); otherwise they run inline.
  bool deferred_reductions = false;
  /// The all-reduce's uncompressed parts leave as spliced messages (AllReduceConfig::
  /// splice_parts): for shells whose transport sends the pieces as they are.
  bool splice_parts = false;
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
  std::vector<PeerAddr> failed_senders;   ///< senders excluded by this peer's reducer
  std::vector<PeerAddr> failed_reducers;  ///< reducers whose parts kept local values
  std::size_t attempts = 1;               ///< matchmaking attempts (retries + 1)
};

/// What one input produced.
struct AveragerEffects {
  Effects rpc;
  std::vector<DhtOp> dht;
  /// Part reductions to run (deferred_reductions); each result goes back through
  /// on_reduced(job.id, ...), in any order.
  std::vector<ReduceJob> reduce;
  /// At most once per step: the step's result or why it failed.
  std::optional<Result<AveragerStepResult>> outcome;
};

/// One averager: matchmaking + all-reduce, one step at a time.
class AveragerRole {
 public:
  /// A role drawing group ids and orders from `rng`.
  AveragerRole(AveragerRoleConfig config, NextU64 rng);

  /// Starts a step (one at a time; another while one runs ends at once with
  /// errc::unavailable). Bad settings end at once with invalid_argument.
  [[nodiscard]] AveragerEffects step(TimePoint now, AveragerStep step);
  /// Lets a require_trigger step begin its all-reduce (at once if its group is known).
  [[nodiscard]] AveragerEffects trigger(TimePoint now);
  /// Changes the running step's weight; false once its all-reduce began.
  bool set_weight(double weight);
  /// Abandons the running step (outcome errc::cancelled); no-op when idle.
  [[nodiscard]] AveragerEffects cancel(TimePoint now);

  /// Whether an inbound request on `handle` is the role's (join or part stream).
  [[nodiscard]] bool serves(const std::string& handle) const;
  /// Whether a call or timer id is the role's.
  [[nodiscard]] bool owns(std::uint64_t id) const { return id >= config_.id_base; }
  /// Whether the role serves inbound request `id`.
  [[nodiscard]] bool owns_request(RequestId id) const { return requests_.count(id) != 0; }

  /// Part streams' messages are reduced where they lie in their buffers (no copy).
  [[nodiscard]] AveragerEffects on_request(TimePoint now, RequestId id, const std::string& handle,
                                           const PeerAddr& from, Buffer body);
  [[nodiscard]] AveragerEffects on_request_message(TimePoint now, RequestId id, Result<Buffer> message,
                                                   bool last);
  [[nodiscard]] AveragerEffects on_message(TimePoint now, CallId call, std::string_view message);
  [[nodiscard]] AveragerEffects on_response(TimePoint now, CallId call, const Result<std::string>& result);
  [[nodiscard]] AveragerEffects on_timer(TimePoint now, TimerId id);
  [[nodiscard]] AveragerEffects on_declared(TimePoint now, DhtOpId op, bool ok);
  [[nodiscard]] AveragerEffects on_averagers(TimePoint now, DhtOpId op, std::vector<Averager> active);
  /// The result of reduce job `job` (or why it failed); stale jobs are ignored.
  [[nodiscard]] AveragerEffects on_reduced(TimePoint now, std::uint64_t job, Result<ReducedPart> result);

  /// True while a step runs.
  [[nodiscard]] bool busy() const { return step_.has_value(); }
  /// True once the running step's all-reduce began.
  [[nodiscard]] bool reducing() const { return runner_.has_value(); }
  /// The group key to use next (Moshpit: the last group's next key, else "").
  [[nodiscard]] const std::string& next_group_key() const { return next_group_key_; }

 private:
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
  void begin_allreduce(TimePoint now, AveragerEffects& out);
  void serve_held(TimePoint now, AveragerEffects& out);
  void refuse_held(AveragerEffects& out, const char* why);
  void runner_effects(Effects fx, AveragerEffects& out);
  void finish(Result<AveragerStepResult> outcome, AveragerEffects& out);
  [[nodiscard]] bool runner_id(std::uint64_t id) const;
  [[nodiscard]] std::uint64_t runner_base() const { return config_.id_base + (round_ + 1) * k_round_ids; }

  AveragerRoleConfig config_;
  Matchmaking matchmaking_;
  std::optional<AveragerStep> step_;
  std::optional<AveragerStepResult> group_;  ///< the found group, before/while reducing
  bool triggered_ = false;
  std::size_t attempts_ = 0;
  std::uint64_t round_ = 0;  ///< runners started so far (ids of the current one)
  std::optional<AllReduceRunner> runner_;
  std::vector<Held> held_;
  std::map<RequestId, bool> requests_;  ///< served request → is a part stream
  std::string next_group_key_;
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
