#pragma once
/// BarrierRole: a member's side of a fixed group's barrier (core/collective/barrier.hpp)
/// as a role, so that any host can meet a group before its first collective and after
/// its last one. It serves the barrier's handle.
///
/// Local method "meet" (BarrierMeet): reaches the level itself (a member asking at a
/// level has got there), then waits until every other member reached it too; completes
/// with nothing, or with the round's error (errc::deadline_exceeded naming the members
/// that never answered). One round at a time.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/collective/barrier.hpp"
#include "core/role.hpp"

namespace apiary::core::collective {

/// What "meet" takes.
struct BarrierMeet {
  std::uint64_t level = 0;  ///< e.g. 0 before the first collective, the steps done after the last
  Duration patience = std::chrono::seconds(30);  ///< the round's deadline from now
};

class BarrierRole final : public Role {
 public:
  explicit BarrierRole(BarrierConfig config) : handle_(config.handle), barrier_(std::move(config)) {}

  [[nodiscard]] std::vector<std::string> handles() const override { return {handle_}; }
  [[nodiscard]] Effects on(TimePoint now, Input input) override;

 private:
  /// Completes the round's op once the barrier finished it.
  Effects advance(Effects out);

  std::string handle_;
  Barrier barrier_;
  std::optional<OpId> running_;
};

}  // namespace apiary::core::collective
