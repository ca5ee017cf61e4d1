#include "core/averaging/matchmaking_types.hpp"

#include <cmath>

#include "core/averaging/group_key.hpp"

namespace apiary::core::averaging {

Status validate(const StepParams& p) {
  if (!std::isfinite(p.scheduled_time)) {
    return make_error(errc::invalid_argument,
                      "matchmaking: expected a finite scheduled_time (DHT seconds), got {}; pass "
                      "the time the all-reduce should begin",
                      p.scheduled_time);
  }
  if (std::isnan(p.deadline)) {
    return make_error(errc::invalid_argument,
                      "matchmaking: expected a deadline in DHT seconds (or +inf), got NaN");
  }
  if (p.min_group_size < 1) {
    return make_error(errc::invalid_argument,
                      "matchmaking: expected min_group_size >= 1, got 0; use 2 for a real group");
  }
  if (p.target_group_size != 0 && p.target_group_size < p.min_group_size) {
    return make_error(errc::invalid_argument,
                      "matchmaking: expected target_group_size (0 or >= min_group_size {}), got "
                      "{}; raise it or lower min_group_size",
                      p.min_group_size, p.target_group_size);
  }
  if (p.min_matchmaking_time <= Duration::zero()) {
    return make_error(errc::invalid_argument,
                      "matchmaking: expected min_matchmaking_time > 0, got {} ns",
                      p.min_matchmaking_time.count());
  }
  if (p.request_timeout <= Duration::zero()) {
    return make_error(errc::invalid_argument,
                      "matchmaking: expected request_timeout > 0, got {} ns",
                      p.request_timeout.count());
  }
  if (p.schema_hash.empty()) {
    return make_error(errc::invalid_argument,
                      "matchmaking: expected a non-empty schema_hash, got an empty one; hash the "
                      "averaged tensors' shapes and dtypes");
  }
  if (!is_valid_group_key(p.group_key)) {
    return make_error(errc::invalid_argument,
                      "matchmaking: expected a group key prefix.0b<bits>, got '{}'", p.group_key);
  }
  return ok_status();
}

std::uint64_t uniform_below(const NextU64& next, std::uint64_t n) {
  if (n <= 1) return 0;
  // Reject the top partial range so every residue is equally likely.
  const std::uint64_t limit = (~std::uint64_t{0}) - ((~std::uint64_t{0}) % n + 1) % n;
  for (;;) {
    const std::uint64_t x = next();
    if (x <= limit) return x % n;
  }
}

PeerAddr address_of_multiaddr(const PeerIdBytes& id) {
  auto addr = PeerAddr::parse(id);
  return addr ? std::move(*addr) : PeerAddr{};
}

}  // namespace apiary::core::averaging
