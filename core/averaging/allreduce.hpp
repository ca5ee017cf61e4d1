#pragma once
/// AllReduceRunner: one peer's side of one group's butterfly all-reduce (reference
/// shared/reference/hivemind.md §3.4).
///
/// Every peer splits the group's tensors the same way (partition.hpp): peer k reduces the
/// parts in its span. As a sender, this peer opens one bidirectional stream
/// (rpc_aggregate_part) to every other reducer that owns parts, sends its copy of each of
/// those parts in order and reads back, per part, the delta average - its copy. As a
/// reducer, it accumulates the copies streamed to it (PartReducer) and answers every
/// sender with its delta once a part is complete; its own copy of its own parts is
/// averaged without any call. The output is one delta per tensor, applied by the caller
/// as tensor += averaging_alpha * delta.
///
/// Faults: a sender that does not open its stream within sender_timeout, stalls for
/// sender_timeout between two parts, or whose stream breaks, is excluded from the parts it
/// has not sent (they complete without it). A reducer that sends nothing for
/// reducer_timeout, answers with another code, or whose stream breaks, is given up: its
/// remaining parts keep the local values (a zero delta). Either way the round completes.
///
/// Pure: time comes in as `now`; calls, stream messages, replies and timers go out as
/// effects (core/effects.hpp). A stream is opened with Call{stream, last = false}; the
/// sender's last part goes with Send{last = true} (an empty Send{last = true} after a
/// single part). A reducer answers with Reply{last = false} per part and ends with an
/// empty Reply{last = true}; a refusal is one Reply{last = true} with a code. Call ids are config.id_base + 1 + peer index; timer ids are
/// config.id_base + 1 (senders that never started), + 2 + peer (the stream to reducer
/// `peer`), + 2 + group size + peer (the stream from sender `peer`).
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "averaging.pb.h"
#include "core/averaging/allreduce_fastwire.hpp"
#include "core/averaging/allreduce_wire.hpp"
#include "core/averaging/part_reducer.hpp"
#include "core/averaging/partition.hpp"
#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/buffer.hpp"
#include "messages/result.hpp"

namespace apiary::core::averaging {

/// The handle of the part stream without the averager's prefix; a shell serving an
/// averager with prefix P registers "P::" + this (hivemind's naming, reference §11.3).
inline constexpr const char* k_aggregate_part_handle = "DecentralizedAverager.rpc_aggregate_part";

/// What a group member does in the all-reduce (hivemind's AveragingMode).
enum class AveragingMode {
  node = 0,    ///< sends its tensors and reduces its span
  client = 1,  ///< sends its tensors, never reduces (fraction 0, takes no calls)
  aux = 2,     ///< reduces its span, sends nothing (weight 0, its tensors unchanged)
};

/// Everything one peer needs to run one group's all-reduce. Every member must pass the
/// same group_id, peers, modes, tensor sizes, codecs, fractions and part size.
struct AllReduceConfig {
  /// The group's id (MessageFromLeader.group_id); every part message carries it.
  std::string group_id;
  /// The group in the leader's order; peers[i] reduces span i.
  std::vector<PeerAddr> peers;
  /// This peer's index in `peers`.
  std::size_t self = 0;
  /// Mode of each peer, aligned with `peers`.
  std::vector<AveragingMode> modes;
  /// This peer's averaging weight (finite, >= 0); ignored (0) for an aux peer.
  double weight = 1.0;
  /// Elements of each tensor, in order (float32, flattened).
  std::vector<std::int64_t> tensor_sizes;
  /// Codec of each tensor's parts, aligned with tensor_sizes; one entry applies to all.
  std::vector<pb::CompressionType> codecs{pb::NONE};
  /// Relative share of each peer (e.g. load_balance_peers' element counts); 0 for clients.
  std::vector<double> peer_fractions;
  /// Largest compressed part, bytes (> 0; hivemind's default is 512 KiB).
  std::int64_t part_size_bytes = std::int64_t{1} << 19;
  /// Longest wait for a sender's first part, and between two of its parts (> 0).
  Duration sender_timeout = std::chrono::seconds(5);
  /// Longest wait between two answers of a reducer (> sender_timeout). It counts from
  /// start(), and a client gets its first answer only after its input ended: for a
  /// client, choose it above the time to stream its share.
  Duration reducer_timeout = std::chrono::seconds(10);
  /// Deadline of each part stream as a whole (> 0).
  Duration call_timeout = std::chrono::seconds(60);
  /// Service handle of the part stream (with the averager's prefix).
  std::string handle = k_aggregate_part_handle;
  /// Added to every call id and timer id, so that one shell can host several roles.
  std::uint64_t id_base = 0;
  /// Reductions leave the core: each settled part of the own span becomes a ReduceJob
  /// (take_reduce_jobs()) for the shell to run on a device actor, and its result comes
  /// back through on_reduced(). Otherwise the runner reduces inline as parts arrive.
  bool deferred_reductions = false;
  /// The outcome carries the tensors themselves (outcome.averages): the group's average
  /// where it is known, the local values elsewhere. The answers are added and the own
  /// span's averages written straight into the runner's copy, so there are no delta
  /// buffers and no pass to apply them. For callers that do not change their tensors
  /// during the round (a synchronous all-reduce); hand the tensors over with std::move
  /// and take them back with take_outcome().
  bool averages_in_place = false;
  /// Uncompressed parts leave as spliced messages (Call/Send with a `body`): the body is a
  /// view of the runner's copy of the tensors, so a part is never copied into a message.
  /// The copy then stays alive while a frame in flight holds a view of it, and with
  /// averages_in_place the outcome's tensors are a copy when one still does. For shells
  /// whose transport sends the pieces as they are (the actors); a shell that moves whole
  /// strings joins them (core::whole_message).
  bool splice_parts = false;
  /// This reducer answers uncompressed parts with the average itself (AVERAGED_VALUES),
  /// which the sender copies into place, instead of hivemind's delta to add
  /// (AVERAGED_PART): every member then holds the same bits (x + (avg - x) need not be
  /// avg in floating point), and the sender's pass reads one buffer fewer. For a
  /// synchronous all-reduce. Senders take either answer, whatever their own setting.
  bool answer_averages = false;
  /// Every member ends the round with the same bits, compressed parts included (needs
  /// averages_in_place and answer_averages, and every member of the group using it): a
  /// reducer answers a compressed part with its average encoded once (AVERAGED_VALUES,
  /// not each sender's delta), and its own copy of the part becomes what the others
  /// decode from those bytes. For rounds whose result must agree everywhere (DiLoCo's
  /// outer step).
  bool identical_results = false;
};

/// Checks a config and the tensors' sizes; the error names the field and what was expected.
[[nodiscard]] Status validate(const AllReduceConfig& config,
                              const std::vector<std::vector<float>>& tensors);

/// What the round produced for this peer.
struct AllReduceOutcome {
  /// Per tensor, what to add (times averaging_alpha) to this peer's tensor: the group's
  /// average minus the local value, or 0 where the average is unknown (failed reducer,
  /// aux peer, cancelled round).
  std::vector<std::vector<float>> deltas;
  /// With averages_in_place instead of deltas: per tensor, the average where it is known,
  /// the local value elsewhere (after cancel() too: the parts averaged before it).
  std::vector<std::vector<float>> averages;
  /// Senders this peer's reducer excluded (missing, stalled, broken stream), sorted.
  std::vector<PeerAddr> failed_senders;
  /// Reducers whose remaining parts kept the local values, sorted.
  std::vector<PeerAddr> failed_reducers;
  /// Ok, or errc::cancelled when cancel() ended the round (deltas then all 0).
  Status status = ok_status();
};

/// One peer's all-reduce in one group.
class AllReduceRunner {
 public:
  /// Validates `config` and copies `tensors` (float32, sizes as config.tensor_sizes; an
  /// aux peer may pass empty vectors). Errors: validate()'s and partition_tensors()'.
  [[nodiscard]] static Result<AllReduceRunner> create(AllReduceConfig config,
                                                      std::vector<std::vector<float>> tensors);

  /// Opens a part stream to every other reducer with parts (a sender only), averages the
  /// own span's local copy, and arms the timers.
  [[nodiscard]] Effects start(TimePoint now);

  /// Reducer: sender `from` opened a part stream with its first message `message`
  /// (AveragingData, PART_FOR_AVERAGING). A stream that cannot be served is answered with
  /// one AveragingData carrying BAD_GROUP_ID, PROTOCOL_VIOLATION, CANCELLED or
  /// INTERNAL_ERROR, ending it. `from` is the caller as spelled in config.peers; when the
  /// shell does not know it (empty), AveragingData.peer_id (set by every sender) names it.
  /// An uncompressed part is reduced and kept where it lies in `message` (no copy).
  [[nodiscard]] Effects on_request(TimePoint now, RequestId id, const PeerAddr& from, Buffer message);
  /// Reducer: the next message of stream `id` (`last`: the sender finished; the message
  /// may then be empty), or the error that broke it.
  [[nodiscard]] Effects on_request_message(TimePoint now, RequestId id, Result<Buffer> message, bool last);
  /// Sender: reducer's message on call `call` (AVERAGED_PART or AVERAGED_VALUES, or an
  /// error code). `landed`: the message's body went into the landing this runner posted
  /// for it (Call::landings: in place, each uncompressed part's span of the tensors), and
  /// `message` holds its head + tail only.
  [[nodiscard]] Effects on_message(TimePoint now, CallId call, std::string_view message, bool landed = false);
  /// Sender: call `call` ended ("" normally, or a final message), or broke.
  [[nodiscard]] Effects on_response(TimePoint now, CallId call, const Result<std::string>& result);
  /// A timer armed by this runner fired; other ids are ignored.
  [[nodiscard]] Effects on_timer(TimePoint now, TimerId id);
  /// Deferred reductions: the jobs of the parts settled since the last call (ids are
  /// config.id_base + the part's index in the own span). Take them after every input.
  [[nodiscard]] std::vector<ReduceJob> take_reduce_jobs();
  /// Deferred reductions: job `job`'s result, or why it failed (the part then keeps
  /// every contributor's local values). Unknown or stale ids are ignored.
  [[nodiscard]] Effects on_reduced(TimePoint now, std::uint64_t job, Result<ReducedPart> result);
  /// Leaves the round: cancels the own streams, answers open inbound streams with
  /// CANCELLED, disarms timers. The outcome is errc::cancelled with zero deltas (in place:
  /// the tensors as they stand).
  [[nodiscard]] Effects cancel(TimePoint now);

  /// True once every own stream ended, the own span is reduced and every inbound stream
  /// was answered (or the round was cancelled).
  [[nodiscard]] bool finished() const { return finished_; }
  /// The outcome; meaningful once finished().
  [[nodiscard]] const AllReduceOutcome& outcome() const { return outcome_; }
  /// Moves the outcome out (its tensors without a copy); call once, when finished().
  [[nodiscard]] AllReduceOutcome take_outcome() { return std::move(outcome_); }
  /// The split every member agrees on.
  [[nodiscard]] const Partition& partition() const { return partition_; }

 private:
  /// The own stream to one reducer.
  struct Outgoing {
    std::size_t peer = 0;
    std::size_t received = 0;  ///< answers read (parts 0..received-1 of the peer)
    bool open = true;
  };
  /// An answer written as its part was averaged.
  struct PreparedAnswer {
    pb::MessageCode code = pb::AVERAGED_PART;  ///< a delta, or AVERAGED_VALUES: the average
    std::optional<NonePartWriter> writer;      ///< the values, appended to their own message
    Buffer in_place;                            ///< or: the values' bytes, over the sender's copy
  };
  /// One sender's stream to this reducer.
  struct Incoming {
    std::size_t peer = 0;
    std::size_t sender = 0;      ///< index among senders (PartReducer's numbering)
    std::size_t replied = 0;     ///< answers sent
    bool input_ended = false;    ///< the sender's direction ended
    bool open = true;            ///< not answered with last yet
    std::vector<pb::CompressionType> codecs;  ///< codec of each part received
    /// Answers to uncompressed parts, by part: the reducer writes each delta in the pass
    /// that averages the part, into a message of its own or (splice_parts) over the
    /// sender's copy in its received message, which the answer then sends as its body.
    std::map<std::size_t, PreparedAnswer> prepared;
  };

  AllReduceRunner(AllReduceConfig config, std::vector<std::vector<float>> tensors,
                  Partition partition);

  // Sender side (allreduce.cpp).
  /// The message of the own copy of part `part_index` (the stream's first when `first`):
  /// spliced (a view of the tensor as body) for a NONE part with splice_parts.
  [[nodiscard]] Result<Payload> part_message(std::size_t part_index, bool first) const;
  void fail_reducer(Effects& fx, std::size_t peer, bool cancel_call);
  void maybe_finish(Effects& fx);
  /// averages_in_place: hands the tensors to the outcome (a copy while a frame holds a view).
  void release_tensors();
  // Reducer side (allreduce_reduce.cpp).
  void serve_part(Effects& fx, RequestId id, Incoming& in, PartMessage msg, PartBytes floats);
  [[nodiscard]] Result<Payload> answer(Incoming& in, std::size_t k);
  void fail_sender(Effects& fx, std::size_t peer);
  void close_incoming(Effects& fx, RequestId id, Incoming& in, pb::MessageCode code);
  void flush_answers(Effects& fx);
  /// Sender: takes a reducer's answer for `part`, a delta or the average: in place, added
  /// to or copied over the tensors; otherwise as the outcome's delta. False for anything
  /// but an averaged part of the right length (the part then keeps its local values).
  [[nodiscard]] bool take_answer(std::string_view message, const Part& part);
  /// Sender: an answer whose values landed in place: true when what is left of it is this
  /// part's AVERAGED_VALUES framing.
  [[nodiscard]] bool landed_answer(std::string_view message, const Part& part) const;
  /// The landings posted with the stream to `reducer`: one per part, its span of the
  /// tensors for an AVERAGED_VALUES answer (in place and spliced only; else none).
  [[nodiscard]] std::vector<Landing> answer_landings(std::size_t reducer) const;
  void release_answered_parts();
  /// identical_results: own part k (averaged, compressed) becomes decode(encode(average)),
  /// the values the other members take from this reducer's answer.
  void settle_own_part(std::size_t k);

  [[nodiscard]] bool is_sender(std::size_t peer) const;
  [[nodiscard]] pb::CompressionType codec_of(const Part& part) const;
  [[nodiscard]] const float* local_data(const Part& part) const;
  [[nodiscard]] TimerId outgoing_timer(std::size_t peer) const;
  [[nodiscard]] TimerId incoming_timer(std::size_t peer) const;

  AllReduceConfig config_;
  /// The local copy of the tensors; shared with the spliced part messages in flight.
  std::shared_ptr<std::vector<std::vector<float>>> tensors_;
  Partition partition_;
  std::vector<std::optional<std::size_t>> sender_index_;  ///< peer -> sender index
  std::optional<PartReducer> reducer_;                   ///< own span (if any parts)
  std::map<std::size_t, Outgoing> outgoing_;             ///< by reducer peer
  std::map<RequestId, Incoming> incoming_;               ///< by request
  std::vector<bool> sender_seen_;                        ///< peer opened a stream
  std::vector<bool> sender_failed_;                      ///< peer excluded
  std::size_t released_ = 0;                             ///< own span parts freed
  bool started_ = false;
  bool finished_ = false;
  AllReduceOutcome outcome_;
};

}  // namespace apiary::core::averaging
