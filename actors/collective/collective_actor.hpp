#pragma once
/// The collective actor: one member of a fixed all-reduce group (every member's address
/// known up front). It serves the group's handles on the gateway and runs, one at a
/// time, the operations its owner asks for: a barrier round (core/collective/barrier.hpp),
/// an all-reduce (core/averaging/allreduce.hpp's AllReduceRunner, every member a node
/// with an equal share), or a mean or gather (core/collective/exchange.hpp: results
/// bit-identical on every member, on handle "<job>::Collective.rpc_exchange").
/// Ops are numbered 0, 1, 2, ... in the order they are asked, and all-reduce n runs as
/// group "<job>/<n>", so members that run the same sequence of ops agree without
/// talking. The part streams of op n use handle
/// "<job>/<n mod 2>::DecentralizedAverager.rpc_aggregate_part": a faster member may
/// open op n + 1's streams while this one still finishes op n, and those are held
/// until op n + 1 starts (the exchange core holds early means and gathers itself).
#include <cstdint>
#include <future>
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

/// What a collective actor needs.
struct CollectiveActorConfig {
  std::string job;                      ///< names the group's handles and op ids
  std::size_t rank = 0;                 ///< own index in `members`
  std::vector<core::PeerAddr> members;  ///< every member's multiaddr, in rank order
  /// The runner's sender timeout (a silent sender is dropped after it); the reducer's
  /// is twice it, and each part stream's deadline four times it.
  std::chrono::milliseconds timeout{10000};
  std::int64_t part_size_bytes = std::int64_t{1} << 19;  ///< AllReduceConfig::part_size_bytes
};

/// What one finished op produced.
struct CollectiveOutput {
  std::vector<std::vector<float>> tensors;  ///< allreduce, mean: the averaged tensors
  std::vector<std::string> gathered;        ///< gather: every member's payload, rank order
};
/// The output of one finished op, or why it failed.
using CollectiveResult = Result<CollectiveOutput>;

/// One operation for the actor. The actor fulfils `done` when the op ends.
struct collective_op_message {
  /// A barrier round (join, leave); an all-reduce (the butterfly runner: own tensor +
  /// the reducer's delta); a mean (core/collective/exchange.hpp: the same encoded
  /// average on every member); a gather of one payload per member.
  /// Abandon: this member failed; every later part of a mean or gather is refused with
  /// `payload` as the reason (no reply; `done` may be null).
  enum class Kind { barrier, allreduce, mean, gather, abandon } kind = Kind::allreduce;
  std::uint64_t level = 0;                    ///< barrier: the level every member must reach
  std::chrono::milliseconds patience{30000};  ///< barrier: the round's deadline from now
  std::vector<std::vector<float>> tensors;    ///< all-reduce, mean: this member's tensors
  std::vector<pb::CompressionType> codecs;    ///< all-reduce, mean: wire codec per tensor
  double weight = 1.0;                        ///< all-reduce, mean: this member's weight
  std::string payload;                        ///< gather: this member's bytes; abandon: the reason
  std::shared_ptr<std::promise<CollectiveResult>> done;
};

/// The handle of the group's barrier.
std::string collective_barrier_handle(const std::string& job);
/// The part-stream handle of op `op`.
std::string collective_part_handle(const std::string& job, std::uint64_t op);
/// The handle of the group's means and gathers.
std::string collective_exchange_handle(const std::string& job);

/// Spawns the actor and serves its handles on `gw` (returns once the gateway routes them).
caf::actor spawn_collective_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, CollectiveActorConfig config);
/// Stops routing the handles to it and ends it.
void stop_collective_actor(Gateway& gw, const std::string& job, const caf::actor& actor);

}  // namespace apiary::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(apiary::actors::collective_op_message)
