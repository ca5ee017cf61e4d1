#pragma once
/// The roles of `apiary bench transport`'s transport-thread rows (internal to bench/):
/// an echo server and a call driver, each a core::Role, so the same round trip runs on
/// the transport-thread host (actors/direct_host.hpp) with no thread hand-off per call.
#include <memory>
#include <string>
#include <vector>

#include "core/role.hpp"

namespace apiary::bench::transport_bench {

/// Serves `handle`: answers every request with its own bytes.
std::unique_ptr<core::Role> make_echo_role(std::string handle);

/// What the driver's local method "drive" takes: `calls` unary calls of `payload` to
/// `handle` at `peer`, one at a time, each answer `reply_bytes` long.
struct DriveOrder {
  core::PeerAddr peer;
  std::string handle;
  std::string payload;
  std::size_t reply_bytes = 0;
  std::size_t calls = 0;
  core::Duration timeout{};
};

/// "drive" completes with the round trips in µs (std::vector<double>), each timed from
/// the role's `now` when it issued the call to its `now` when the answer came; the
/// first failed call's error ends the run.
std::unique_ptr<core::Role> make_driver_role();

}  // namespace apiary::bench::transport_bench
