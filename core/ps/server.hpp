#pragma once
/// A parameter-server process's protocol role: the shards one PS device holds, served
/// over the two RPC handles of core/ps/wire.hpp. It decodes requests, hands them to the
/// right Shard, and answers each request when its shard releases it: at once, or
/// later, from the call that admits it (BSP and SSP hold pulls and pushes). The shell
/// (actors/ps/shard_actor.hpp) delivers requests and executes the returned Replies.
///
/// Replicas also hold a session stream open (k_ps_join_handle). When one fails (the
/// replica died, or its connection did), a synchronous step can never complete again:
/// the server then fails every request held on a synchronous shard, and refuses new
/// ones, with an error naming the lost replica, rather than letting the others wait for
/// their deadlines. A session ended normally (the replica finished) changes nothing.
/// With set_drop_lost_after(wait), the job goes on instead: the others' requests wait,
/// and `wait` after the loss every synchronous shard drops the replica
/// (Shard::drop_replica): its steps complete with the replicas left. A lost replica that
/// joins again (a process started anew) is taken back by the asynchronous shards from its
/// first step (Shard::rejoin); the synchronous ones take back a dropped replica that
/// asks to rejoin from a step no replica has pushed yet (k_ps_rejoin_handle,
/// Shard::rejoin_from), and a lost replica not dropped yet that joins again is dropped at
/// once, to rejoin the same way. A PS process started again from a checkpoint
/// (resume_at) does not know which replicas were dropped before it went down: with
/// set_drop_lost_after(wait), every replica that has not come back `wait` after its start
/// is dropped then, as if its session had failed at the start.
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include "core/effects.hpp"
#include "core/role.hpp"
#include "core/ps/shard.hpp"
#include "messages/result.hpp"
#include "ps.pb.h"

namespace apiary::core::ps {

/// Counters of a server, for logs and tests.
struct ServerStats {
  std::uint64_t pushes = 0;    ///< push requests admitted
  std::uint64_t pulls = 0;     ///< pull requests answered
  std::uint64_t refused = 0;   ///< requests answered with an error
  std::uint64_t sessions = 0;  ///< replica sessions opened
};

/// The shards of one PS device. Not thread-safe; one owner drives it. As a Role it
/// serves the four handles of core/ps/wire.hpp, keeps the bodies of requests as the
/// Buffer they came in (the kept-body on_request), and reads session streams.
class ShardServer final : public Role {
 public:
  /// A server named `device` (for messages) holding `shards`, keyed by shard name.
  ShardServer(std::string device, std::map<std::string, Shard> shards);

  /// served().
  [[nodiscard]] std::vector<std::string> handles() const override { return served(); }
  /// The push, pull, join and optimizer-state handles every server serves.
  [[nodiscard]] static std::vector<std::string> served();
  /// The role contract: requests, session-stream messages, and a peer going down (its
  /// open sessions fail with errc::peer_down, as when their streams fail).
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  /// A request to a handle of core/ps/wire.hpp. Returns the Replies to send: this
  /// request's own when it is answered (or refused) now, and those of held requests it
  /// released. A malformed request, an unknown handle or shard, or a request the shard
  /// refuses is answered with an error saying what was expected.
  /// `body` is only read during the call (a dense push is copied until its step is
  /// summed).
  [[nodiscard]] Effects on_request(TimePoint now, RequestId id, const std::string& handle, const PeerAddr& from,
                                   std::string_view body);
  /// on_request() with a body whose storage the server may keep: a synchronous dense push
  /// is summed straight from it when its step is complete, and holds it until then.
  [[nodiscard]] Effects on_request(TimePoint now, RequestId id, const std::string& handle, const PeerAddr& from,
                                   const Buffer& body);

  /// The next message, end or error of a session stream (request `id` of
  /// k_ps_join_handle): an error marks its replica lost (see the file comment); the end
  /// closes the session. Returns the Replies to send.
  [[nodiscard]] Effects on_request_message(TimePoint now, RequestId id, const Result<std::string>& message, bool last);

  /// Pull answers leave as spliced Replies (a `body` viewing the shard's parameters,
  /// Shard::shared_values) instead of a copy of the values in the message. For shells
  /// whose transport sends the pieces as they are (the shard actor); off by default.
  void set_splice_pulls(bool splice) { splice_pulls_ = splice; }
  /// A replica whose session fails is dropped from every synchronous shard `wait` later
  /// (nullopt, the default: the synchronous shards fail, as the file comment says).
  void set_drop_lost_after(std::optional<Duration> wait) { drop_after_ = wait; }
  /// A PS process started again after it went down continues the job at `step`, its
  /// shards holding a checkpoint of the parameters after `step` steps: every synchronous
  /// shard starts there (Shard::start_at; BSP only), and a replica asking where it stands
  /// (k_ps_rejoin_handle) learns it must replay its pushes from `step` on. Errors:
  /// Shard::start_at's (an asynchronous or SSP shard, one that took a push), naming this PS.
  [[nodiscard]] Status resume_at(std::int64_t step);
  /// The step resume_at() continued from, if it was called.
  [[nodiscard]] std::optional<std::int64_t> resumed_at() const { return resumed_at_; }
  /// The replicas dropped so far.
  [[nodiscard]] const std::set<std::int32_t>& dropped() const { return dropped_; }
  /// The replicas whose session ended normally (they finished their part of the job).
  [[nodiscard]] const std::set<std::int32_t>& finished() const { return finished_; }

  /// The replicas whose session failed, with why.
  [[nodiscard]] const std::map<std::int32_t, std::string>& lost() const { return lost_; }
  /// The shard named `name`, or nullptr.
  [[nodiscard]] const Shard* shard(const std::string& name) const;
  /// Requests held, waiting for other replicas.
  [[nodiscard]] std::size_t held() const;
  /// Counters.
  [[nodiscard]] const ServerStats& stats() const { return stats_; }

 private:
  /// (shard, pull?, replica, step): identifies a held request to answer later.
  using Key = std::tuple<std::string, bool, std::int32_t, std::int64_t>;

  /// A push request; `keep`, if set, keeps `body`'s bytes alive for the shard.
  Effects push(RequestId id, std::string_view body, std::shared_ptr<const void> keep);
  /// A push's admission once decoded: `take` hands the gradient to the shard.
  template <typename Take>
  Effects admit_push(RequestId id, const std::string& shard, std::int32_t replica, std::int64_t step, Take take);
  Effects pull(RequestId id, std::string_view body);
  Effects join(RequestId id, std::string_view body, const PeerAddr& from);
  /// A shard's optimizer state, answered at once (k_ps_optimizer_state_handle).
  Effects optimizer_state(RequestId id, std::string_view body);
  /// A replica process started again asks where it stands, or to push from a step on
  /// (PsRejoinRequest): every synchronous shard here takes it back from that step, or
  /// none does.
  Effects rejoin(RequestId id, std::string_view body);
  /// Every synchronous shard drops `replica`; the Replies of what that releases.
  Effects drop(std::int32_t replica);
  /// A resumed server, its wait after its start over: drops every replica that has not
  /// opened a session since (one dropped before the PS went down, or lost meanwhile).
  Effects drop_absent();
  /// The error for a request to a synchronous shard once a replica is lost.
  [[nodiscard]] Error lost_error(const std::string& shard) const;
  /// Replies to the held requests `released` answers (and the caller's own, `id`).
  Effects answer(const std::string& shard, const Released& released, Effects out);
  Effects refuse(RequestId id, Error error);
  Shard* find(const std::string& name, RequestId id, Effects& out);
  /// The shard a PsPullRequest in `body` names (parsed into `req`), or nullptr with `out`
  /// refusing the request (malformed bytes, an unknown shard).
  Shard* requested(RequestId id, std::string_view body, pb::PsPullRequest& req, Effects& out);

  std::string device_;
  std::map<std::string, Shard> shards_;
  std::map<Key, std::deque<RequestId>> waiting_;
  std::map<RequestId, std::pair<std::int32_t, PeerAddr>> sessions_;  ///< session -> (replica, its address)
  std::map<std::int32_t, std::string> lost_;                         ///< replica -> why it was lost
  std::optional<Duration> drop_after_;                               ///< set_drop_lost_after
  std::map<TimerId, std::int32_t> drop_timers_;                      ///< armed: replica to drop when it fires
  std::optional<TimerId> absent_timer_;                              ///< armed on a resumed start: drop_absent
  TimerId next_timer_ = 1;
  std::set<std::int32_t> dropped_;                                   ///< replicas dropped
  std::set<std::int32_t> finished_;                                  ///< replicas whose session ended normally
  ServerStats stats_;
  bool splice_pulls_ = false;
  std::optional<std::int64_t> resumed_at_;                           ///< resume_at's step
};

}  // namespace apiary::core::ps
