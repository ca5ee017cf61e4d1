#pragma once
/// Exchange: one member's side of a fixed group's sequence of collective ops whose
/// results are bit-identical on every member (data-parallel replicas must stay equal).
///
/// mean (reduce-scatter, then all-gather of the encoded averages): the ops' tensors are
/// seen as one concatenated vector of N values; member r owns the span
/// [N r / n, N (r + 1) / n).
///   1. Send every other owner of a non-empty span its span of the own tensors, each
///      value in its tensor's codec, with the own weight (one unary call per owner).
///   2. As an owner, wait for every member's copy of the own span (the own copy too).
///   3. Average them in rank order: sum(w_i x_i) / sum(w_i), in double (plain mean when
///      every weight is 0), and encode the average in the codecs: E.
///   4. Answer every member's call with the same bytes E, and take decode(E) as the own
///      result for the own span.
///   5. Place each owner's decoded answer at its span.
/// Every member thus holds decode(encode(average)) everywhere, own span included: with
/// FLOAT16 on the wire the replicas no longer each add their own rounding of a delta.
///
/// gather: every member sends its payload to every other (one unary call each, answered
/// with an empty acknowledgement); the result is every member's payload in rank order.
///
/// Ops are numbered 0, 1, 2, ... in the order they start; every member must run the same
/// sequence with the same layouts. A request for an op not started here yet is held until
/// it starts. An op fails (never hangs) when a member's part does not come within
/// `timeout` of the op's start here, when a call fails, or on on_peer_down: the error is
/// errc::peer_down naming every missing member by rank and address, and every request
/// still waiting here is answered with that error so that the others fail fast too.
///
/// Pure: time comes in as `now`; calls, replies and timers go out as effects. Timer id:
/// config.id_base; call ids: config.id_base + 1 + (op mod 2) * n + peer.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/collective/exchange_wire.hpp"
#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core::collective {

/// Everything one member needs.
struct ExchangeConfig {
  std::vector<PeerAddr> peers;                 ///< every member in rank order
  std::size_t self = 0;                        ///< own index in `peers`
  std::string handle;                          ///< the service handle every member serves
  std::uint64_t id_base = 0;                   ///< added to every call and timer id
  Duration timeout = std::chrono::seconds(10); ///< longest wait for the others' parts of an op, from its start here
};

/// The result of one finished op.
struct ExchangeResult {
  std::vector<std::vector<float>> tensors;  ///< mean: decode(encode(average)) per tensor
  std::vector<std::string> gathered;        ///< gather: every member's payload, rank order
};

/// One member's side of a group's exchange ops.
class Exchange {
 public:
  /// Checks `config` (at least one member, self in range). Errors: invalid_argument.
  [[nodiscard]] static Result<Exchange> create(ExchangeConfig config);

  /// Starts the next op as a mean of `tensors` (float32) with this member's `weight`
  /// (finite, >= 0) and one codec per tensor (NONE or FLOAT16; one applies to all;
  /// none: NONE). A bad argument ends the op at once with its error.
  [[nodiscard]] Effects start_mean(TimePoint now, std::vector<std::vector<float>> tensors, double weight,
                                   const std::vector<pb::CompressionType>& codecs);
  /// Starts the next op as a gather of `payload`.
  [[nodiscard]] Effects start_gather(TimePoint now, std::string payload);

  /// Another member's call on the handle.
  [[nodiscard]] Effects on_request(TimePoint now, RequestId id, const std::string& body);
  /// The answer (or failure) of one of this member's calls.
  [[nodiscard]] Effects on_response(TimePoint now, CallId call, const Result<std::string>& result);
  /// A timer fired (ids this member does not own are ignored).
  [[nodiscard]] Effects on_timer(TimePoint now, TimerId id);
  /// The connection to `peer` broke: the running op fails if it still needs that member.
  [[nodiscard]] Effects on_peer_down(TimePoint now, const PeerAddr& peer);
  /// Ends for good: the running op fails with `why`, held and later requests are refused.
  [[nodiscard]] Effects stop(Error why);

  /// Whether an op is running.
  [[nodiscard]] bool running() const { return op_.has_value(); }
  /// Whether the last op ended and its result was not taken yet.
  [[nodiscard]] bool has_result() const { return result_.has_value(); }
  /// The last op's result (once has_result()); the result is taken, not copied.
  [[nodiscard]] Result<ExchangeResult> take_result();
  /// Ops started so far.
  [[nodiscard]] std::uint64_t ops() const { return next_op_; }
  /// Whether `call` is one of this member's call ids.
  [[nodiscard]] bool owns_call(CallId call) const;
  /// Whether `id` is this member's timer id.
  [[nodiscard]] bool owns_timer(TimerId id) const { return id == config_.id_base; }

 private:
  /// The running op.
  struct Op {
    std::uint64_t number = 0;
    ExchangeKind kind = ExchangeKind::mean;
    SpanLayout layout;
    std::uint64_t fingerprint = 0;
    std::string own_payload;                           ///< gather: the own payload
    std::vector<std::vector<float>> inbox;             ///< mean: each member's copy of the own span
    std::vector<double> weights;                       ///< mean: each member's weight
    std::vector<bool> requested;                       ///< per member: its part came here
    std::vector<bool> answered;                        ///< per member: its answer came back
    std::vector<std::pair<RequestId, std::size_t>> waiting;  ///< mean: calls to answer once reduced
    bool reduced = false;                              ///< mean: the own span is averaged
    std::map<CallId, std::size_t> calls;               ///< open call -> member
    std::vector<float> flat;                           ///< mean: own tensors in, results out (concatenated)
    ExchangeResult result;
  };

  explicit Exchange(ExchangeConfig config) : config_(std::move(config)) {}
  [[nodiscard]] std::pair<std::size_t, std::size_t> span(std::size_t rank) const;
  [[nodiscard]] bool expects_request(std::size_t rank) const;
  [[nodiscard]] bool expects_answer(std::size_t rank) const;
  Effects begin(TimePoint now, std::vector<std::string> bodies);
  void serve(Effects& fx, RequestId id, const std::string& body);
  void reduce(Effects& fx);
  void maybe_finish(Effects& fx);
  void fail(Effects& fx, Error error);
  /// "rank R (addr)" for every rank in `ranks`.
  [[nodiscard]] std::string names(const std::vector<std::size_t>& ranks) const;

  ExchangeConfig config_;
  std::uint64_t next_op_ = 0;
  std::optional<Op> op_;
  std::vector<std::pair<RequestId, std::string>> held_;  ///< requests of ops not started yet
  std::optional<Result<ExchangeResult>> result_;
  std::optional<std::pair<std::uint64_t, Error>> failed_;  ///< the last op that failed here, and why
  std::optional<Error> stopped_;
};

}  // namespace apiary::core::collective
