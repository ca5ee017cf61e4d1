#pragma once
/// The all-reduce side of a simulated replica, shared by ArReplicaHost and
/// MixedReplicaHost: its core::collective::ArStep over the World's network (the
/// exchange's call and timer ids from k_ar_member_id_base up) and its own copy's
/// optimizers of the all-reduced variables, with the errors that name a failed member.
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
#include "core/effects.hpp"
#include "core/ps/optimizer.hpp"
#include "core/time.hpp"
#include "messages/result.hpp"

namespace apiary::sim::scenarios {

/// The first call and timer id of the exchange; a host's own ids lie below it.
inline constexpr std::uint64_t k_ar_member_id_base = std::uint64_t{1} << 20;

/// What ArMember::create needs.
struct ArMemberConfig {
  std::shared_ptr<const core::collective::ArPlan> plan;  ///< the all-reduced variables
  std::vector<core::PeerAddr> members;                  ///< every replica's World address, rank order
  std::size_t rank = 0;                                  ///< this replica's index in members
  std::string job;                                       ///< names the exchange handle
  core::Duration timeout{};                              ///< ExchangeConfig::timeout of each collective
  core::ps::OptimizerConfig optimizer;                   ///< the update rule of the all-reduced variables
  std::string label;                                     ///< how errors name the replica kind ("mixed replica")
};

class ArMember {
 public:
  /// Errors: invalid_argument (`params` lacks an all-reduced variable), ArStep's.
  [[nodiscard]] static Result<ArMember> create(ArMemberConfig config,
                                               const std::map<std::string, std::vector<float>>& params);

  /// The handle the exchange serves.
  [[nodiscard]] const std::string& handle() const { return handle_; }
  [[nodiscard]] core::collective::ArStep& step() { return step_; }
  [[nodiscard]] const core::collective::ArStep& step() const { return step_; }

  /// Begins step `step_index`'s collectives over `gradients` with `weight`; a member in
  /// `down` (its connection broke) fails it instead, naming the member.
  [[nodiscard]] Result<core::Effects> begin(core::TimePoint now, std::size_t step_index,
                                            const std::map<std::string, std::vector<float>>& gradients, double weight,
                                            const std::set<core::PeerAddr>& down);
  /// An inbound request: the exchange's, or refused with not_found.
  [[nodiscard]] core::Effects on_request(core::TimePoint now, core::RequestId id, const std::string& handle,
                                         const std::string& request);
  /// The error when the connection to `peer`, another member, broke at step `step_index`.
  [[nodiscard]] std::optional<Error> lost(const core::PeerAddr& peer, std::size_t step_index) const;
  /// Once step().done(): applies the averages to `params` (this replica's copy).
  [[nodiscard]] Status apply(std::size_t step_index, std::map<std::string, std::vector<float>>& params);
  /// Leaves the running op and refuses every held and later part, because of `why`.
  [[nodiscard]] core::Effects stop(const Error& why);

 private:
  ArMember(ArMemberConfig config, core::collective::ArStep step);

  ArMemberConfig config_;
  std::string handle_;
  core::collective::ArStep step_;
  std::map<std::string, core::ps::Optimizer> optimizers_;
};

}  // namespace apiary::sim::scenarios
