#pragma once
/// AllReduceRole: a replica's all-reduced part of a training step, as a role: its
/// core::collective::ArStep over the members' exchange (it serves
/// "<job>::Collective.rpc_exchange"), with the errors that name a failed member by rank
/// and address. It averages; the optimizers are the caller's.
///
/// Local methods, one step at a time:
///   "step"  ArStepArgs   -> core::collective::ArAverages (every member gets the same bits)
///   "stop"  Error (why)  -> nothing; leaves the running op and refuses every held and later
///                           part, so that no member waits for this replica
///   "watch" no args      -> completes only with the error that ended the role outside a
///                           step (a member went down)
/// After a failure every call completes with that failure.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/collective/ar_plan.hpp"
#include "core/collective/ar_step.hpp"
#include "core/role.hpp"

namespace apiary::core::train {

/// What an AllReduceRole needs.
struct AllReduceConfig {
  std::shared_ptr<const collective::ArPlan> plan;  ///< the all-reduced variables
  std::vector<PeerAddr> members;                   ///< every replica's address, rank order
  std::size_t rank = 0;                            ///< this replica's index in members
  std::string job;                                 ///< names the exchange handle
  Duration timeout = std::chrono::seconds(5);      ///< ExchangeConfig::timeout of each collective
  std::string label = "replica";                   ///< how errors of create() name the replica kind
  /// Non-empty: the fusion groups whose transport is NCCL are Asked of this role of the
  /// process ("mean" with NcclMeanArgs, answering the averaged tensors); empty: every
  /// group goes through the exchange.
  std::string nccl_role;
  /// Non-empty: the fusion groups whose transport is RING are Asked of this role of the
  /// process ("allreduce" with collective::GroupAllReduceArgs, identical results: a
  /// GroupAllReduceRole, its parts streamed); empty: they go through the exchange.
  std::string ring_role;
};

/// What an NCCL role's "mean" takes: one fusion group's tensors, averaged with the other
/// replicas' weighted by `weight`; it answers std::vector<std::vector<float>>.
struct NcclMeanArgs {
  std::int32_t group = 0;
  std::vector<std::vector<float>> tensors;
  std::vector<pb::CompressionType> codecs;
  double weight = 1.0;
};

/// What "step" takes.
struct ArStepArgs {
  std::int64_t step = 0;  ///< the training step (errors name it)
  /// This replica's whole gradient of every all-reduced variable (dense and sparse as
  /// dense tensors; others are ignored).
  std::map<std::string, std::vector<float>> gradients;
  double weight = 1.0;  ///< its averaging weight (its samples)
  /// A sparse variable's gradient given as its rows (instead of a dense tensor above).
  std::map<std::string, ps::SparseGradient> sparse;
};

class AllReduceRole final : public Role {
 public:
  /// Errors: invalid_argument (no plan, rank out of range, members not one per replica),
  /// ArStep::create's.
  [[nodiscard]] static Result<std::unique_ptr<AllReduceRole>> create(AllReduceConfig config);

  [[nodiscard]] std::vector<std::string> handles() const override { return {handle_}; }
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

  /// Collectives completed so far.
  [[nodiscard]] std::uint64_t ops() const { return step_.done_ops(); }

 private:
  AllReduceRole(AllReduceConfig config, collective::ArStep step);
  Effects on_call(TimePoint now, LocalCall call);
  /// Completes the running step once the ArStep has its averages (or its error).
  Effects advance(Effects out);
  Effects fail(Error error);
  /// Asks the NCCL or ring role to run the group the step hands out, if it hands one.
  void ask_external(Effects& out);

  AllReduceConfig config_;
  std::string handle_;
  collective::ArStep step_;
  std::set<PeerAddr> down_;    ///< members whose connection broke
  std::int64_t current_ = 0;   ///< the step being run, or the next one
  std::optional<OpId> running_;
  std::optional<OpId> watch_;
  std::optional<OpId> external_;  ///< the Ask running an NCCL or ring group
  std::string external_role_;     ///< the role it asked
  std::uint64_t ring_ops_ = 0;    ///< ring groups asked so far (the ring role's op numbers)
  OpId next_ask_ = 1;
  std::optional<Error> failure_;
};

}  // namespace apiary::core::train
