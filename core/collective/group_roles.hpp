#pragma once
/// A fixed group's collectives as roles, for any host: one member of a group whose
/// members' addresses are all known up front (Horovod's model; core/collective/README.md).
/// add_group_roles() puts three roles in a Mux:
///   "barrier"   BarrierRole (barrier_role.hpp): "meet" before the first op and after the last
///   "exchange"  ExchangeRole: "mean" (ExchangeMeanArgs -> the averaged tensors, the same
///               bits on every member) and "gather" (std::string payload -> every member's
///               payload, rank order) over core::collective::Exchange; "stop" (Error) leaves
///               the running op and refuses every later part with that reason
///   "allreduce" GroupAllReduceRole: "allreduce" (GroupAllReduceArgs -> the averaged
///               tensors): op n runs core::averaging::AllReduceRunner as group
///               "<job>/<n>" (every member a node with an equal share), its part streams on
///               "<job>/<n mod 2>::DecentralizedAverager.rpc_aggregate_part"; the streams of
///               the next op that a faster member opens early are held until that op starts.
/// Ops are numbered 0, 1, 2, ... over both kinds in the order the members ask for them,
/// so members that run the same sequence agree without talking. A member that fails or
/// stalls ends the op with an error naming its rank and address.
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "core/averaging/allreduce.hpp"
#include "core/collective/exchange.hpp"
#include "core/mux.hpp"
#include "core/role.hpp"

namespace apiary::core::collective {

/// The group, as every member configures it.
struct GroupConfig {
  std::string job;               ///< names the handles and op ids
  std::size_t rank = 0;          ///< own index in `members`
  std::vector<PeerAddr> members; ///< every member's multiaddr, rank order
  /// The runner's sender timeout (a silent sender is dropped after it); the reducer's is
  /// twice it, each part stream's deadline four times it; the exchange's wait for the
  /// others' parts.
  Duration timeout = std::chrono::seconds(10);
  std::int64_t part_size_bytes = std::int64_t{1} << 19;  ///< AllReduceConfig::part_size_bytes
};

/// The handles of a group's barrier, means and gathers, and op `op`'s part streams.
[[nodiscard]] std::string group_barrier_handle(const std::string& job);
[[nodiscard]] std::string group_exchange_handle(const std::string& job);
[[nodiscard]] std::string group_part_handle(const std::string& job, std::uint64_t op);

/// What "mean" takes.
struct ExchangeMeanArgs {
  std::vector<std::vector<float>> tensors;
  double weight = 1.0;
  std::vector<pb::CompressionType> codecs;  ///< per tensor (one applies to all; empty: NONE)
};

class ExchangeRole final : public Role {
 public:
  explicit ExchangeRole(Exchange exchange, std::string handle)
      : exchange_(std::move(exchange)), handle_(std::move(handle)) {}
  [[nodiscard]] std::vector<std::string> handles() const override { return {handle_}; }
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

 private:
  /// Completes the running op once the exchange has its result.
  Effects advance(Effects out);

  Exchange exchange_;
  std::string handle_;
  std::optional<OpId> running_;
  bool gather_ = false;  ///< the running op is a gather
};

/// What "allreduce" takes.
struct GroupAllReduceArgs {
  std::uint64_t op = 0;  ///< the group's op number (over means and gathers too)
  std::vector<std::vector<float>> tensors;
  double weight = 1.0;
  std::vector<pb::CompressionType> codecs;
  /// Every member ends with the same bits, compressed parts included
  /// (AllReduceConfig::identical_results): data-parallel replicas.
  bool identical_results = false;
};

class GroupAllReduceRole final : public Role {
 public:
  explicit GroupAllReduceRole(GroupConfig config) : config_(std::move(config)) {}
  [[nodiscard]] std::vector<std::string> handles() const override;
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

 private:
  Effects start(TimePoint now, OpId op, GroupAllReduceArgs& args);
  /// Feeds one input to the runner (none running: dropped, or held when it opens the
  /// next op's stream).
  Effects feed(TimePoint now, Input input);
  /// Completes the running op once the runner finished.
  Effects advance(Effects out);
  /// The member `from` names (a member's multiaddr, with or without /p2p/), or "".
  [[nodiscard]] PeerAddr member_of(const PeerAddr& from) const;

  GroupConfig config_;
  std::optional<averaging::AllReduceRunner> runner_;
  std::optional<OpId> running_;
  std::uint64_t op_ = 0;                  ///< the running (or last) op's number
  std::string part_handle_;               ///< its part handle
  std::deque<Input> held_;                ///< early streams of a later op, in arrival order
  std::vector<RequestId> held_requests_;  ///< their requests
  std::uint64_t generation_ = 0;          ///< ops started: each runner's ids lie in its own range
};

/// Adds the group's roles ("barrier", "exchange", "allreduce") to `mux`. Errors:
/// invalid_argument (no job, a rank out of range, a timeout <= 0), the Exchange's and
/// the Mux's.
[[nodiscard]] Status add_group_roles(Mux& mux, const GroupConfig& config);

}  // namespace apiary::core::collective
