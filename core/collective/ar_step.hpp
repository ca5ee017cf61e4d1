#pragma once
/// ArStep: one replica's all-reduced part of a training step over an Exchange, as the
/// all-reduce and mixed (PS + all-reduce) replicas of the simulator run it: the fusion
/// groups' means in plan order (Synchronizer::prepare, every replica getting the same
/// bits), then, when the plan has sparse variables, one gather of every replica's touched
/// rows; then the averaged dense gradients and sparse rows, ready for the optimizer.
///
/// Pure: time comes in as `now`, the Exchange's calls, replies and timers go out as
/// effects. Feed it the exchange's inputs (owns_call / owns_timer route them); after each
/// input, done() tells whether the step's averages (or the error of the op that failed)
/// are ready to take().
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/collective/exchange.hpp"
#include "core/collective/synchronizer.hpp"
#include "core/effects.hpp"
#include "core/ps/optimizer.hpp"
#include "core/ps/partition.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::core::collective {

/// The averages one step yields.
struct ArAverages {
  std::map<std::string, std::vector<float>> dense;       ///< averaged gradient per dense variable
  std::map<std::string, ps::SparseGradient> sparse;       ///< averaged rows per sparse variable
  /// The gradients begin() was given that it did not average (a sparse variable's dense
  /// one, variables outside the plan), handed back as they came.
  std::map<std::string, std::vector<float>> rest;
};

/// Applies a step's averages: for every variable with an optimizer, its averaged dense
/// gradient, or its averaged sparse rows (touched rows only), to its values in `params`.
/// Errors: the optimizer's (e.g. a size mismatch); a variable with neither is not_found.
[[nodiscard]] Status apply_averages(const ArAverages& averages, std::map<std::string, ps::Optimizer>& optimizers,
                                    std::map<std::string, std::vector<float>>& params);

class ArStep {
 public:
  /// Over `plan` (its all-reduced variables) and the exchange of `exchange`. Errors: the
  /// Synchronizer's and the Exchange's.
  [[nodiscard]] static Result<ArStep> create(ArPlan plan, ExchangeConfig exchange);

  /// Begins a step: `gradients` holds this replica's whole gradient of every all-reduced
  /// variable (dense and sparse; others are ignored), `weight` its averaging weight (its
  /// samples); a sparse variable's gradient may come as its rows in `rows` instead. A
  /// step with nothing to all-reduce is done at once. The dense gradients' buffers go
  /// through the collectives and come back in ArAverages::dense holding the averages (a
  /// caller may move the gradients in to spare a copy); the others in ArAverages::rest.
  [[nodiscard]] Effects begin(TimePoint now, std::map<std::string, std::vector<float>> gradients, double weight,
                              const std::map<std::string, ps::SparseGradient>* rows = nullptr);
  [[nodiscard]] Effects on_request(TimePoint now, RequestId id, const std::string& body);
  [[nodiscard]] Effects on_response(TimePoint now, CallId call, const Result<std::string>& result);
  [[nodiscard]] Effects on_timer(TimePoint now, TimerId id);
  /// Leaves the running op and refuses every later part (the replica failed).
  [[nodiscard]] Effects stop(Error why);

  /// Hands the fusion groups whose transport is NCCL to the owner instead of the
  /// exchange: when such a group's turn comes, take_external() gives its input; the
  /// owner averages it (weighted by the step's weight) on its NCCL group and hands the
  /// result to on_external(). Without it, every group goes through the exchange.
  void run_nccl_outside(bool on) { external_nccl_ = on; }
  /// Hands the fusion groups whose transport is RING to the owner too, as NCCL ones
  /// (take_external / on_external): the owner streams them through an all-reduce that
  /// gives every member the same bits (GroupAllReduceRole with identical results) instead
  /// of the exchange's one message per span. CollectiveInput::transport tells them apart.
  void run_ring_outside(bool on) { external_ring_ = on; }
  /// The group waiting to be run by the owner, once (nothing otherwise).
  [[nodiscard]] std::optional<CollectiveInput> take_external();
  /// The averages of the group take_external() gave, or why it failed.
  [[nodiscard]] Effects on_external(TimePoint now, Result<std::vector<std::vector<float>>> averages);
  /// The step's weight (this replica's samples).
  [[nodiscard]] double weight() const { return weight_; }

  /// True when the step's averages, or its error, are ready.
  [[nodiscard]] bool done() const { return outcome_.has_value(); }
  /// The step's averages, or the error of its failed op ("fusion group G: ..." or
  /// "sparse gather: ..."); the next step may begin afterwards.
  [[nodiscard]] Result<ArAverages> take();

  [[nodiscard]] bool owns_call(CallId call) const { return exchange_.owns_call(call); }
  [[nodiscard]] bool owns_timer(TimerId id) const { return exchange_.owns_timer(id); }
  /// Collective ops started so far.
  [[nodiscard]] std::uint64_t ops() const { return exchange_.ops(); }
  /// Collective ops completed so far.
  [[nodiscard]] std::uint64_t done_ops() const { return done_ops_; }
  /// The all-reduce layout.
  [[nodiscard]] const ArPlan& plan() const { return sync_.plan(); }
  /// "rank R (addr)" for member `peer` (R = the group size when it is not a member).
  [[nodiscard]] std::string name_of(const PeerAddr& peer) const;
  /// The first other member (in rank order) that is in `down`, if any.
  [[nodiscard]] std::optional<PeerAddr> first_down(const std::set<PeerAddr>& down) const;

 private:
  ArStep(Synchronizer sync, Exchange exchange, std::vector<PeerAddr> members, std::size_t self)
      : sync_(std::move(sync)), exchange_(std::move(exchange)), members_(std::move(members)), self_(self) {}
  Effects start_op(TimePoint now);
  /// Ends the running op if the exchange finished it; starts the next op or ends the step.
  Effects advance(TimePoint now, Effects out);
  /// Ends the step with the running op's error, naming the op.
  Effects failed_op(Effects out, const Error& e);
  /// A mean's averages: the next op, or the step's end.
  Effects mean_done(TimePoint now, Effects out, std::vector<std::vector<float>> tensors);
  /// Ends the step with its averages.
  Effects assemble(Effects out);
  void finish(Result<ArAverages> outcome) { outcome_ = std::move(outcome); }

  Synchronizer sync_;
  Exchange exchange_;
  std::vector<PeerAddr> members_;  ///< every member, rank order
  std::size_t self_ = 0;           ///< this member's rank
  double weight_ = 1.0;
  std::vector<CollectiveInput> inputs_;            ///< this step's collectives
  std::vector<std::vector<std::vector<float>>> outputs_;  ///< their averages so far
  std::map<std::string, ps::SparseGradient> sparse_;  ///< this step's rows, then their averages
  std::map<std::string, std::vector<float>> rest_;    ///< the given gradients not averaged
  std::optional<Result<ArAverages>> outcome_;
  std::uint64_t done_ops_ = 0;
  bool external_nccl_ = false;                 ///< run_nccl_outside()
  bool external_ring_ = false;                 ///< run_ring_outside()
  bool external_waiting_ = false;              ///< an NCCL group runs at the owner
  std::optional<CollectiveInput> external_;    ///< not taken yet
};

}  // namespace apiary::core::collective
