#pragma once
/// Barrier: the members of a fixed collective group wait until every other member has
/// reached a level (the number of collectives it finished). Level 0 means "serving":
/// a group meets at level 0 before its first collective, so that nobody opens a part
/// stream to a process that is not listening yet, and at level N after its last one,
/// so that nobody stops its gateway while a peer still waits for its last answers.
///
/// Protocol: round `level` sends every other member one unary call (body: the level and
/// the asker's rank, "<level> <rank>" in decimal). A member answers at once when its own
/// level is at least the asked one, and holds the request until reach() gets there
/// otherwise. Being asked at a level also proves that the asker reached it: a member
/// that asked is not asked back (it may have left once everyone answered it). A call
/// that fails (peer not listening yet, broken connection) is retried after `retry`
/// until the round's deadline; the round then fails with errc::deadline_exceeded naming
/// the members that never answered. An ask waits until the round's deadline (at least
/// `call_timeout`): a member behind holds it, and answers it once it gets there.
///
/// Pure: time comes in as `now`; calls, replies and timers go out as effects. Call ids
/// are config.id_base + 2 + peer count + a counter; timer ids are config.id_base + peer
/// (retry of one peer) and config.id_base + peer count (the round's deadline).
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/effects.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core::collective {

/// Everything one member needs to meet the others.
struct BarrierConfig {
  std::vector<PeerAddr> peers;                      ///< every member in rank order
  std::size_t self = 0;                             ///< own index in `peers`
  std::string handle;                               ///< the service handle every member serves
  std::uint64_t id_base = 0;                        ///< added to every call and timer id
  Duration retry = std::chrono::milliseconds(50);   ///< pause before re-asking a member
  Duration call_timeout = std::chrono::seconds(2);  ///< shortest deadline of one ask (else: the round's)
};

/// One member's side of a sequence of barrier rounds.
class Barrier {
 public:
  /// A member with nothing reached yet (own level 0, no round running).
  explicit Barrier(BarrierConfig config);

  /// Starts a round: asks every other member whether it reached `level`; the round
  /// fails at `deadline`. Replaces a round still running.
  [[nodiscard]] Effects start(TimePoint now, std::uint64_t level, TimePoint deadline);
  /// Sets the own level (never lowers it) and answers the held requests it satisfies.
  [[nodiscard]] Effects reach(std::uint64_t level);
  /// Another member asks whether this one reached the level in `body`. A body that is
  /// not a decimal number is answered with errc::invalid_argument.
  [[nodiscard]] Effects on_request(TimePoint now, RequestId id, const std::string& body);
  /// The answer (or failure) of one of this barrier's calls.
  [[nodiscard]] Effects on_response(TimePoint now, CallId call, const Result<std::string>& result);
  /// A timer of this barrier fired (others are ignored).
  [[nodiscard]] Effects on_timer(TimePoint now, TimerId id);

  /// Whether `call` is one of this barrier's call ids.
  [[nodiscard]] bool owns_call(CallId call) const { return calls_.count(call) > 0; }
  /// Whether `id` is one of this barrier's timer ids.
  [[nodiscard]] bool owns_timer(TimerId id) const;
  /// True once the current round ended (met or failed).
  [[nodiscard]] bool finished() const { return finished_; }
  /// Ok when every member answered the round, else the reason.
  [[nodiscard]] const Status& status() const { return status_; }

 private:
  [[nodiscard]] Call ask(TimePoint now, std::size_t peer);
  void maybe_finish(Effects& fx);
  void finish(Effects& fx, Status status);

  BarrierConfig config_;
  std::uint64_t own_level_ = 0;
  std::uint64_t round_level_ = 0;
  TimePoint deadline_{};
  std::vector<bool> answered_;                    ///< per member, this round
  std::vector<std::uint64_t> peer_level_;         ///< per member, 1 + the highest level it asked at (0: never asked)
  std::map<CallId, std::size_t> calls_;           ///< open ask -> member
  std::multimap<std::uint64_t, RequestId> held_;  ///< asked level -> request
  std::uint64_t next_call_ = 0;
  bool finished_ = true;
  Status status_ = ok_status();
};

}  // namespace apiary::core::collective
