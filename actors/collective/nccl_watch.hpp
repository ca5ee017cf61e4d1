#pragma once
/// Liveness of a NCCL group's members over apiary's RPC, for what NCCL cannot see: a
/// member process that dies mid-collective leaves the others waiting inside NCCL for
/// ever. Every member but rank 0 holds a stream open to rank 0 (handle
/// nccl_watch_handle(group), its first message the member's rank); the gateway fails a
/// stream whose other side went down. Rank 0 then knows which member went down, and
/// fails every other member's stream with that reason; a member whose stream fails
/// knows that rank 0 went down, or why rank 0 gave up. broken() says so on every
/// member, and NcclGroup aborts its communicator with it (cuda::abort_probe).
///
/// A member that ends its stream (its NcclWatch destroyed) has left normally: that does
/// not break the group.
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/gateway.hpp"
#include "messages/result.hpp"

namespace apiary::actors {

/// The RPC handle of group `group`'s watch streams ("nccl.watch/<group>").
std::string nccl_watch_handle(const std::string& group);

/// What one member's watch shares with its actor.
struct NcclWatchState {
  std::string group;
  std::size_t ranks = 1;
  PeerKey root;
  CallId call = 0;  ///< a member's own stream to rank 0

  mutable std::mutex mu;
  std::string broken;  ///< the first reason, kept
  struct Member {
    std::size_t rank = 0;
    std::string peer;  ///< its listen address, or its connection's key if it has none
  };
  std::map<CallId, Member> members;  ///< rank 0: the streams it holds

  /// Records `why` unless a reason is known already.
  void break_with(std::string why) {
    std::lock_guard<std::mutex> lock(mu);
    if (broken.empty()) broken = std::move(why);
  }
};

/// One member's watch on its group.
class NcclWatch {
 public:
  /// Rank 0 serves the watch handle on `gw`; any other rank opens its stream to `root`.
  /// Errors: invalid_argument for an empty group, rank >= ranks, or no root on a rank
  /// other than 0.
  [[nodiscard]] static Result<std::unique_ptr<NcclWatch>> start(caf::actor_system& sys, std::shared_ptr<Gateway> gw,
                                                                const std::string& group, std::size_t rank,
                                                                std::size_t ranks, const PeerKey& root);

  /// Empty while no member is known to be down; else why the group is broken, naming the
  /// member that went down first. Thread-safe.
  [[nodiscard]] std::string broken() const;
  /// Members whose stream rank 0 holds (rank 0 only; 0 elsewhere). Thread-safe.
  [[nodiscard]] std::size_t members_watched() const;

  /// Ends this member's stream (rank 0: every stream it holds) and stops the actor.
  ~NcclWatch();
  NcclWatch(const NcclWatch&) = delete;
  NcclWatch& operator=(const NcclWatch&) = delete;

 private:
  NcclWatch(std::shared_ptr<Gateway> gw, std::shared_ptr<NcclWatchState> state, caf::actor actor)
      : gw_(std::move(gw)), state_(std::move(state)), actor_(std::move(actor)) {}

  std::shared_ptr<Gateway> gw_;
  std::shared_ptr<NcclWatchState> state_;
  caf::actor actor_;
};

}  // namespace apiary::actors
