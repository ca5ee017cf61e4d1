#pragma once
/// A blocking all-reduce API for a training loop: one member of a fixed group, the group's
/// roles (core/collective/group_roles.hpp) on the generic actor host. Typical use:
///
///     auto c = Collective::create(sys, gw, config);   // serves the group's handles
///     c->join(patience);                               // every member is listening
///     for each step: auto avg = c->mean(tensors, weight, codecs);  // or allreduce, gather
///     c->leave(patience);                              // every member finished every op
///
/// Every member must call allreduce the same number of times with the same tensor
/// sizes and codecs; op n of each member meets op n of the others. A member that dies
/// or stalls past the timeout makes the op fail on the others with errc::peer_down
/// naming it (never a hang: every wait has a deadline).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/gateway.hpp"
#include "core/effects.hpp"
#include "messages/result.hpp"
#include "runtime.pb.h"

namespace apiary::actors {

/// What a member needs.
struct CollectiveActorConfig {
  std::string job;                      ///< names the group's handles and op ids
  std::size_t rank = 0;                 ///< own index in `members`
  std::vector<core::PeerAddr> members;  ///< every member's multiaddr, in rank order
  /// The runner's sender timeout (a silent sender is dropped after it); the reducer's
  /// is twice it, and each part stream's deadline four times it.
  std::chrono::milliseconds timeout{10000};
  std::int64_t part_size_bytes = std::int64_t{1} << 19;  ///< AllReduceConfig::part_size_bytes
};

/// One member's blocking handle on its group. Use from one thread.
class Collective {
 public:
  /// Checks `config` (at least one member, rank in range, multiaddr members, a job
  /// name, a positive timeout) and starts the actor. Errors: invalid_argument.
  [[nodiscard]] static Result<std::unique_ptr<Collective>> create(caf::actor_system& sys, std::shared_ptr<Gateway> gw,
                                                                  CollectiveActorConfig config);

  /// Waits until every member serves the group's handles (up to `patience`).
  /// Errors: deadline_exceeded naming the members that never answered.
  [[nodiscard]] Status join(std::chrono::milliseconds patience);

  /// All-reduces `tensors` (float32; the same sizes on every member) with this
  /// member's `weight` (e.g. its sample count; the result is sum(w_i x_i) / sum(w_i)),
  /// each tensor travelling with its codec (one entry applies to all; empty: NONE).
  /// Errors: peer_down naming the members that failed, or the runner's error.
  [[nodiscard]] Result<std::vector<std::vector<float>>> allreduce(std::vector<std::vector<float>> tensors,
                                                                  double weight,
                                                                  std::vector<pb::CompressionType> codecs = {});

  /// Averages `tensors` like allreduce(), but every member ends with the same bits:
  /// decode(encode(average)) in each tensor's codec (NONE or FLOAT16), its own share
  /// included (core/collective/exchange.hpp). Errors: peer_down naming the members that
  /// failed; invalid_argument or unsupported for a bad weight or codec.
  [[nodiscard]] Result<std::vector<std::vector<float>>> mean(std::vector<std::vector<float>> tensors, double weight,
                                                             std::vector<pb::CompressionType> codecs = {});

  /// Gives every member every member's `payload`: the result is the payloads in rank
  /// order (own included). Errors: peer_down naming the members that failed.
  [[nodiscard]] Result<std::vector<std::string>> gather(std::string payload);

  /// Waits until every member finished as many ops as this one (up to
  /// `patience`), so that stopping the gateway next leaves nobody waiting for an answer.
  /// Errors: deadline_exceeded naming the members that did not get there.
  [[nodiscard]] Status leave(std::chrono::milliseconds patience);

  /// This member failed with `why`: for `linger` it keeps serving the group, refusing
  /// every later part of a mean or gather with `why`, so that the members still calling
  /// it learn the cause (e.g. which member went down first) rather than only that this
  /// one is gone. Blocks for `linger`.
  void abandon(const Error& why, std::chrono::milliseconds linger);

  /// Ops (all-reduces, means, gathers) run so far.
  [[nodiscard]] std::uint64_t ops() const { return ops_; }

  /// Stops serving the group's handles and ends the actor.
  ~Collective();
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

 private:
  Collective(std::shared_ptr<Gateway> gw, CollectiveActorConfig config) : gw_(std::move(gw)), config_(std::move(config)) {}
  /// Runs `method` of role `role` in the group's host, waiting at most `limit`.
  Result<core::Value> call(const char* role, const char* method, core::Value args, std::chrono::milliseconds limit);
  /// Meets the others at `level`.
  Status meet(std::uint64_t level, std::chrono::milliseconds patience);

  std::shared_ptr<Gateway> gw_;
  CollectiveActorConfig config_;
  caf::actor host_;
  std::vector<std::string> handles_;
  std::uint64_t ops_ = 0;
};

}  // namespace apiary::actors
