#pragma once
/// A parameter-server shard: one variable, or one partition of one, with its
/// optimizer. Replicas push gradients (dense or sparse) tagged with their step and pull
/// parameters for a step; the shard decides when a request is admitted and when the
/// optimizer runs (reference autodist.md §3.2, §3.8 items 1, 6, 7):
///
/// - sync, staleness 0 (BSP): the gradients of step s from every replica are
///   aggregated and applied once, as soon as the last one arrives; a pull for step s is
///   answered only after steps 0..s-1 are applied, so every replica reads version s.
/// - sync, staleness k > 0 (SSP): as above, but a replica's pull or push for step s is
///   admitted only while s <= slowest + k, where slowest is the smallest number of steps
///   any replica has pushed. The bound is exact (a PS-side clock vector), unlike
///   upstream's token queues. A pull for step s then sees version >= s - k.
/// - not sync (async): every push is applied on its own, immediately, and nothing waits.
///
/// Requests that are not admitted are held and come back later, in the `Released` of
/// the call that admits them. The shard applies updates itself when a step completes
/// (no chief on the critical path, §3.8 item 6).
///
/// Aggregation of a synchronous step (§3.8 item 1):
/// - host_mean (AutoDist's PS): each host's replicas are averaged, then the host means
///   are averaged: g = (1/H) sum_h (1/N_h) sum_{r on h} g_r.
/// - sample_weighted (AutoDist's all-reduce, the default): g = sum_r n_r g_r / sum_r n_r
///   with n_r the samples behind replica r's gradient (1 each: the GPU-weighted mean).
/// Sparse gradients are averaged row-wise over all replicas (a row a replica did not
/// send counts as zero, as TensorFlow's sparse accumulator does) and applied without
/// densifying.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/ps/optimizer.hpp"
#include "core/ps/partition.hpp"
#include "messages/result.hpp"

namespace apiary::core::ps {

/// How a synchronous step's gradients are combined.
enum class Aggregation { sample_weighted, host_mean };

/// What a shard holds and how it synchronizes.
struct ShardConfig {
  std::string variable;                     ///< variable (or partition) name, for messages
  ShardLayout layout;                       ///< the shard's shape
  bool sparse = false;                      ///< gradients come as rows (SparseGradient)
  OptimizerConfig optimizer;                ///< update rule
  bool sync = true;                         ///< false: asynchronous updates
  std::int64_t staleness = 0;               ///< steps a replica may run ahead (sync only)
  std::vector<std::int32_t> replica_hosts;  ///< host index of each replica id 0..R-1
  Aggregation aggregation = Aggregation::sample_weighted;  ///< sync aggregation rule
  /// Sync, dense: the most gradient bytes a step keeps unsummed, waiting for the replicas
  /// before them in replica order (see Shard::StepSum). Beyond it, memory goes first.
  std::size_t max_unsummed_bytes = std::size_t{512} << 20;
};

/// A gradient for the whole shard: dense values, or rows.
using Gradient = std::variant<std::vector<float>, SparseGradient>;

/// A dense gradient left where it arrived: `count` little-endian float32 values at
/// `bytes`, which need not be aligned for float.
struct DenseBytes {
  const char* bytes = nullptr;  ///< first byte of the first value
  std::size_t count = 0;        ///< number of values
};

/// A replica's gradient for one step.
struct Push {
  std::int32_t replica = 0;  ///< replica id in [0, replica_hosts.size())
  std::int64_t step = 0;     ///< the replica's step, 0, 1, 2, ... in order
  Gradient gradient;         ///< dense or sparse, matching ShardConfig::sparse
  double samples = 1.0;      ///< examples behind the gradient (sample_weighted), > 0
  /// The step size of the update this push goes into (a learning-rate schedule's), or 0:
  /// the configured one. A synchronous step's update takes the rate of its
  /// lowest-numbered replica's push (every replica should send the same).
  float learning_rate = 0.0F;
};

/// A push the shard has taken in.
struct PushAck {
  std::int32_t replica = 0;  ///< who pushed
  std::int64_t step = 0;     ///< which step
};

/// Parameters handed to a replica.
struct PullReply {
  std::int32_t replica = 0;   ///< who asked
  std::int64_t step = 0;      ///< the step the replica asked for
  std::int64_t version = 0;   ///< updates applied to `values`
  std::vector<float> values;  ///< the shard's parameters, row-major
};

/// Requests answered by one call: the caller's own, if admitted, plus held ones that
/// the call made admissible, in the order they were admitted.
struct Released {
  std::vector<PushAck> acks;      ///< admitted pushes
  std::vector<PullReply> pulls;   ///< answered pulls
};

/// The shard's state machine. Not thread-safe; one owner (an actor) drives it.
class Shard {
 public:
  /// A shard starting from `initial` (layout.size() values). Errors: invalid_argument
  /// on a size mismatch, no replicas, negative staleness, staleness with async, or a
  /// bad optimizer configuration.
  [[nodiscard]] static Result<Shard> create(ShardConfig config, std::vector<float> initial);

  /// Takes a replica's gradient for its next step. Errors: invalid_argument (unknown
  /// replica, wrong gradient kind or size, samples <= 0) or protocol (a step other than
  /// the replica's next one). A refused push changes nothing.
  [[nodiscard]] Result<Released> push(Push p);

  /// push() for a dense gradient that stays in the caller's bytes (a received message),
  /// which `keep` keeps alive: a synchronous shard sums its step's gradients straight
  /// from them once the step is complete. Without `keep` (the bytes live only during the
  /// call), or when it must be kept otherwise (held by the staleness bound, or applied
  /// alone when async), the gradient is copied. Same checks and errors as push().
  [[nodiscard]] Result<Released> push_dense(std::int32_t replica, std::int64_t step, double samples,
                                            DenseBytes gradient, std::shared_ptr<const void> keep = nullptr,
                                            float learning_rate = 0.0F);

  /// Whether each PullReply carries a copy of the parameters (the default). Without,
  /// PullReply::values stays empty and the owner reads values() right after the call:
  /// every pull one call releases sees the state that call leaves (version()).
  void set_pull_values(bool copy) { pull_values_ = copy; }

  /// Asks for the parameters to compute step `step` with. Errors: invalid_argument on an
  /// unknown replica or a negative step.
  [[nodiscard]] Result<Released> pull(std::int32_t replica, std::int64_t step);

  /// A synchronous shard goes on without replica `replica` (it died and is not coming
  /// back): steps complete with the pushes of the others (and whatever it had pushed
  /// before), the mean taken over the replicas that pushed, as AutoDist's aggregation
  /// would for that count (host_mean: each host's weight over its remaining replicas).
  /// Its held requests are dropped, and later pushes and pulls of it refused. Returns what
  /// its absence admits. An asynchronous shard needs nothing of it: no change. Errors:
  /// invalid_argument on an unknown replica.
  [[nodiscard]] Result<Released> drop_replica(std::int32_t replica);
  /// An asynchronous shard takes replica `replica` back from its first step (a replica
  /// process started again after it went down: it pulls the current parameters, and its
  /// pushes count from step 0 again). A synchronous shard keeps its steps: no change.
  /// Errors: invalid_argument on an unknown replica.
  [[nodiscard]] Status rejoin(std::int32_t replica);
  /// Synchronous: the first step replica `replica` could rejoin from: one no other
  /// replica taking part has pushed (held pushes included) and the shard has not applied.
  [[nodiscard]] std::int64_t rejoin_floor(std::int32_t replica) const;
  /// Synchronous: takes back replica `replica`, dropped (or rejoined and not pushed
  /// since), from step `step` on: its pushes count from there (it pulls that step's
  /// parameters first), and the steps before it complete without it. Returns what that
  /// admits (nothing, as a rule). Errors: invalid_argument (an unknown replica, an
  /// asynchronous shard: rejoin() takes its replicas back), protocol (a replica taking
  /// part, a step below rejoin_floor(), or past it with no other replica left to push the
  /// steps between), each naming the shard and the floor.
  [[nodiscard]] Result<Released> rejoin_from(std::int32_t replica, std::int64_t step);
  /// Whether rejoin_from(replica, step) would take it (its errors, changing nothing).
  [[nodiscard]] Status can_rejoin_from(std::int32_t replica, std::int64_t step) const;
  /// BSP: a shard that has taken nothing yet continues a running job at step
  /// `step`, restored from a checkpoint of the parameters after `step` steps (a PS
  /// process started again after it went down): steps 0..step-1 count as applied
  /// (version() is `step`), and every replica pushes from `step` on: it replays the steps
  /// the checkpoint does not hold, then goes on. Errors: invalid_argument (an
  /// asynchronous shard, whose pushes cannot be replayed in their order; an SSP one,
  /// whose checkpoints are snapshots of shards at different steps; a negative step),
  /// protocol (the shard took a push already).
  [[nodiscard]] Status start_at(std::int64_t step);
  /// The step replica `replica` pushes next (held pushes counted); 0 for an unknown id.
  [[nodiscard]] std::int64_t next_step(std::int32_t replica) const {
    return replica >= 0 && static_cast<std::size_t>(replica) < next_.size() ? next_[static_cast<std::size_t>(replica)]
                                                                             : 0;
  }
  /// Whether `replica` is out of the job: dropped, or rejoined and not pushed since.
  [[nodiscard]] bool rejoining(std::int32_t replica) const;
  /// Whether `replica` was dropped.
  [[nodiscard]] bool dropped(std::int32_t replica) const {
    return replica >= 0 && static_cast<std::size_t>(replica) < dropped_.size() &&
           dropped_[static_cast<std::size_t>(replica)];
  }

  /// Current parameters.
  [[nodiscard]] const std::vector<float>& values() const { return *values_; }
  /// The current parameters' storage, for messages that send them without a copy
  /// (Buffer::view_of): while any such view is held, the next update is written to fresh
  /// storage, so the view's values never change.
  [[nodiscard]] std::shared_ptr<const std::vector<float>> shared_values() const { return values_; }
  /// Number of optimizer updates applied.
  [[nodiscard]] std::int64_t version() const { return version_; }
  /// Steps replica `r` has had admitted (its clock).
  [[nodiscard]] std::int64_t clock(std::int32_t r) const { return clock_.at(static_cast<std::size_t>(r)); }
  /// The smallest clock of the replicas not dropped (the slowest one's).
  [[nodiscard]] std::int64_t slowest() const;
  /// Requests held back by the staleness bound.
  [[nodiscard]] std::size_t held() const { return held_pushes_.size() + held_pulls_.size(); }
  /// The optimizer (slots, update count).
  [[nodiscard]] const Optimizer& optimizer() const { return optimizer_; }
  /// Continues the optimizer from `state` (a checkpoint's). Errors: Optimizer::restore's.
  [[nodiscard]] Status restore_optimizer(Optimizer::State state) { return optimizer_.restore(std::move(state)); }
  /// The configuration.
  [[nodiscard]] const ShardConfig& config() const { return config_; }

 private:
  /// A dense gradient of a synchronous step, not summed yet.
  struct PendingDense {
    double w = 0.0;                    ///< its weight w_r
    DenseBytes g;                      ///< its values
    std::shared_ptr<const void> keep;  ///< keeps `g` alive
  };

  /// One synchronous step's weighted sum. Gradients are summed in replica order,
  /// whatever order they arrive in (so a step's update has the same bits every run), when
  /// the step is complete. Dense ones in one blocked pass over all of them, each block of
  /// the sum applied by the optimizer while in cache: each gradient is read once and the
  /// sum is never written out whole. While more than config.max_unsummed_bytes of them
  /// wait, the run next in replica order is summed at once (the same bits: the same
  /// order). Sparse ones row by row.
  struct StepSum {
    std::vector<float> dense;                           ///< sum of w_r g_r (dense), of replicas < folded
    std::int32_t folded = 0;                            ///< dense: replicas 0..folded-1 are in `dense`
    std::map<std::int32_t, PendingDense> pending;       ///< dense: the others taken in, by replica
    std::size_t pending_bytes = 0;                      ///< their size
    std::map<std::int32_t, std::pair<double, SparseGradient>> sparse;  ///< sparse: (w_r, merged g_r) by replica
    double divisor = 0.0;                               ///< sum of n_r (sample_weighted)
    std::map<std::int32_t, float> rates;                ///< each push's learning rate, by replica
  };

  /// host_mean: each replica's weight 1 / (H * N_h) over the replicas taking part.
  void reweight_hosts();

  /// A pull waiting for the staleness bound.
  struct HeldPull {
    std::int32_t replica = 0;
    std::int64_t step = 0;
  };

  Shard(ShardConfig config, std::vector<float> initial, std::vector<double> host_weight);
  [[nodiscard]] Status check(const Push& p) const;
  /// The checks of a push but its gradient's contents (`size`: dense values, if dense).
  [[nodiscard]] Status check_header(std::int32_t replica, std::int64_t step, double samples, bool sparse,
                                    std::size_t size, float learning_rate) const;
  /// The optimizer at `learning_rate` (0: the configured rate) for the next update.
  void set_rate(float learning_rate);
  [[nodiscard]] bool admitted(std::int64_t step) const;
  [[nodiscard]] Status accept(Push p, Released& out);
  /// accept() of a synchronous shard's dense gradient, read from `g`, kept alive by `keep`.
  [[nodiscard]] Status accept_dense(std::int32_t replica, std::int64_t step, double samples, float learning_rate,
                                    DenseBytes g, std::shared_ptr<const void> keep, Released& out);
  /// Takes out of `sum` the run of pending gradients next in replica order.
  std::vector<PendingDense> take_run(StepSum& sum, std::int64_t step) const;
  /// Sums values [at, at + n) of `run`, in order, into `into` (`first`: it holds nothing yet).
  static void sum_block(const std::vector<PendingDense>& run, bool first, std::size_t at, std::size_t n,
                        float* into);
  /// Sums into sum.dense the run of pending gradients next in replica order (early, while
  /// more than config.max_unsummed_bytes wait).
  void fold(StepSum& sum, std::int64_t step);
  /// Values per block of a step's sum: 64 KiB, which stays in cache while the run's
  /// gradients pass through it.
  static constexpr std::size_t k_block = 16384;
  /// Applies every step below the slowest clock, in order.
  [[nodiscard]] Status apply_ready();
  [[nodiscard]] Status apply_step(std::int64_t step);
  [[nodiscard]] Status drain(Released& out);
  [[nodiscard]] PullReply reply(std::int32_t replica, std::int64_t step) const;
  /// The parameters, to update: copied to fresh storage first if a view still holds them.
  [[nodiscard]] std::vector<float>& writable_values();

  ShardConfig config_;
  std::shared_ptr<std::vector<float>> values_;  ///< the parameters (shared with views, see shared_values)
  Optimizer optimizer_;
  std::vector<double> host_weight_;    ///< host_mean: 1 / (H * N_h) per replica
  std::vector<std::int64_t> clock_;    ///< admitted pushes per replica
  std::vector<std::int64_t> next_;     ///< next step each replica may push (held included)
  std::vector<bool> dropped_;          ///< replicas the shard goes on without (drop_replica)
  std::vector<std::int64_t> rejoined_at_;  ///< sync: the step a replica rejoined from (-1: none)
  std::int64_t version_ = 0;
  std::int64_t applied_steps_ = 0;     ///< sync: steps 0..applied_steps_-1 are applied
  std::map<std::int64_t, StepSum> sums_;
  std::vector<float> spare_;           ///< an applied step's dense sum, reused by the next early fold
  std::vector<float> block_;           ///< one block of a step's sum (apply_step)
  bool pull_values_ = true;            ///< copy the parameters into each PullReply
  std::deque<Push> held_pushes_;
  std::deque<HeldPull> held_pulls_;
};

}  // namespace apiary::core::ps
