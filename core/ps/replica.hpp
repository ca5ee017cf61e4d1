#pragma once
/// A replica's side of the parameter-server path: one training step over every shard
/// it talks to. Per step it pulls every shard, reassembles partitioned variables,
/// hands the parameters to the trainer, cuts the trainer's gradients into the shards'
/// pieces (dense slices or re-indexed rows, reference autodist.md §3.7) and pushes
/// them; the step ends when every shard has acknowledged its push.
///
/// Phases, in order, for step n = 0, 1, 2, ...:
///   idle --start_pull--> pulling --last on_pull_reply--> computing
///        --push--> pushing --last on_push_ack--> idle (step n + 1)
/// The class sends nothing itself: it returns the requests, and its owner delivers them
/// to the shards and feeds the answers back.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/ps/partition.hpp"
#include "core/ps/shard.hpp"
#include "messages/result.hpp"

namespace apiary::core::ps {

/// A variable as a replica sees it: its shape and the shards holding its pieces.
struct VariablePlan {
  std::string name;                 ///< variable name
  std::vector<std::int64_t> shape;  ///< whole shape
  std::string partitioner;          ///< "" when unpartitioned, else e.g. "2,1"
  bool sparse = false;              ///< gradients come as rows of axis 0
  std::vector<std::size_t> shards;  ///< shard id of each piece, in partition order
};

/// A request for one shard.
struct ShardPull {
  std::size_t shard = 0;   ///< shard id
  std::int64_t step = 0;   ///< step the parameters are for
};

/// A gradient for one shard.
struct ShardPush {
  std::size_t shard = 0;  ///< shard id
  Push push;              ///< replica, step, piece of the gradient, samples
};

/// push_views()' form of a push: the gradient of an unpartitioned dense variable is
/// the caller's own tensor, not a copy; other variables' pieces are cut out as push()
/// cuts them.
struct ShardPushView {
  std::size_t shard = 0;       ///< shard id
  std::int32_t replica = 0;    ///< who pushes
  std::int64_t step = 0;       ///< which step
  double samples = 1.0;        ///< examples behind the gradient
  const float* dense = nullptr;  ///< the caller's values (when `piece` is empty)
  std::size_t count = 0;         ///< values at `dense`
  std::optional<Gradient> piece;  ///< a piece cut out (partitioned or sparse variables)
};

/// Where a replica is in its step.
enum class ReplicaPhase { idle, pulling, computing, pushing };

/// One replica's step state machine over several shards.
class Replica {
 public:
  /// A replica `id` over `variables`; every shard id must belong to one piece of one
  /// variable. Errors: invalid_argument on a bad partitioner, a shard count that does
  /// not match it, a shard used twice or a sparse variable split off axis 0.
  [[nodiscard]] static Result<Replica> create(std::int32_t id, std::vector<VariablePlan> variables);

  /// idle -> pulling: one pull per shard for the current step. Errors: protocol in
  /// another phase.
  [[nodiscard]] Result<std::vector<ShardPull>> start_pull();

  /// A shard's answer. Returns true when it was the last one (phase becomes
  /// computing). Errors: protocol (not pulling, a shard answering twice, another
  /// replica's or step's reply) or invalid_argument (wrong size).
  [[nodiscard]] Result<bool> on_pull_reply(std::size_t shard, const PullReply& reply);
  /// on_pull_reply() taking the reply's values over instead of copying them.
  [[nodiscard]] Result<bool> on_pull_reply(std::size_t shard, PullReply&& reply);
  /// on_pull_reply() for a piece the caller put in place itself (`reply` without its
  /// values): the values of a variable split along axis 0 (pieces_are_ranges) written
  /// into the caller's own vector of the whole variable at the piece's range. Every piece
  /// of such a variable comes this way or none does; take_parameters() then leaves the
  /// variable out, the caller holding it. Errors: on_pull_reply()'s, and
  /// invalid_argument for a piece of another variable.
  [[nodiscard]] Result<bool> on_pull_reply_in_place(std::size_t shard, const PullReply& reply);

  /// The reassembled parameters of the current step, by variable name (computing only).
  [[nodiscard]] Result<std::map<std::string, std::vector<float>>> parameters() const;
  /// parameters() handing over the pulled pieces instead of copying them: an
  /// unpartitioned variable's values move out as they came; a variable whose pieces came
  /// in place is left out. Call it once per step (a second call, or parameters() after
  /// it, fails: the pieces are gone). parameters() fails when pieces came in place.
  [[nodiscard]] Result<std::map<std::string, std::vector<float>>> take_parameters();

  /// computing -> pushing: cuts each variable's gradient (dense: the whole tensor;
  /// sparse: rows of the whole variable) into one push per shard. Every variable needs
  /// a gradient. Errors: protocol in another phase; invalid_argument on a missing,
  /// unknown or mis-sized gradient (the phase stays computing).
  [[nodiscard]] Result<std::vector<ShardPush>> push(const std::map<std::string, Gradient>& gradients,
                                                    double samples = 1.0);
  /// push() without copying unpartitioned dense gradients: their pushes point into
  /// `gradients`, which must outlive them. Same checks, errors and phase change.
  [[nodiscard]] Result<std::vector<ShardPushView>> push_views(const std::map<std::string, Gradient>& gradients,
                                                              double samples = 1.0);

  /// A shard's acknowledgement. Returns true when it was the last one (the step ends,
  /// phase becomes idle). Errors: protocol on an unexpected ack.
  [[nodiscard]] Result<bool> on_push_ack(std::size_t shard, const PushAck& ack);

  /// Before its first pull: the replica's steps start at `step` (a replica rejoining a
  /// running job). Errors: protocol after a step began, invalid_argument on step < 0.
  [[nodiscard]] Status start_at(std::int64_t step);

  /// The step being run (or next to run, when idle).
  [[nodiscard]] std::int64_t step() const { return step_; }
  /// The current phase.
  [[nodiscard]] ReplicaPhase phase() const { return phase_; }
  /// Smallest version among this step's pulled pieces (how fresh the parameters are).
  [[nodiscard]] std::int64_t min_version() const { return min_version_; }

 private:
  struct Planned {
    VariablePlan plan;
    std::vector<ShardLayout> layouts;
  };
  Replica(std::int32_t id, std::vector<Planned> variables, std::map<std::size_t, std::pair<std::size_t, std::size_t>> where);
  [[nodiscard]] Error wrong_phase(const char* call, const char* expected) const;
  /// The on_pull_reply()s' checks of `reply` (its size unless `in_place`).
  [[nodiscard]] Status check_reply(std::size_t shard, const PullReply& reply, bool in_place = false) const;
  /// Counts a stored reply at `version`; true when it was the last (phase computing).
  bool pulled(std::int64_t version);
  /// The error for reading pieces that take_parameters() already handed over.
  [[nodiscard]] Error taken(const char* call) const;

  std::int32_t id_;
  std::vector<Planned> variables_;
  std::map<std::size_t, std::pair<std::size_t, std::size_t>> where_;  ///< shard -> (variable, piece)
  std::map<std::size_t, std::vector<float>> pulled_;                  ///< this step's pieces by shard
  std::set<std::size_t> in_place_;  ///< this step's variables (indices) whose pieces the caller put in place
  std::map<std::size_t, bool> acked_;                                 ///< this step's acks by shard
  ReplicaPhase phase_ = ReplicaPhase::idle;
  std::int64_t step_ = 0;
  std::int64_t min_version_ = 0;
};

}  // namespace apiary::core::ps
