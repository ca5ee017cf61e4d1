#pragma once
/// The ping role (core::ping::Pinger) on a role host of either kind: it serves probes over
/// the gateway, probes every known peer each interval, and gives a printable RTT table.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>

#include "actors/role_host.hpp"
#include "core/ping/pinger.hpp"

namespace apiary::actors {

/// Starts a host of `kind` for a Pinger of the node listening at `self_addr`, serving core::ping::k_handle, and starts probing `bootstrap`. Stop it with
/// stop_role(gw, host, {core::ping::k_handle}).
RoleHost spawn_ping_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, core::PeerAddr self_addr,
                          core::ping::Config config, std::vector<core::PeerAddr> bootstrap,
                          HostKind kind = HostKind::actor);

/// The RTT table of the pinger hosted by `ping` (format_rtt_table); an error when the
/// host does not answer within `patience`.
[[nodiscard]] Result<std::string> ping_report(const RoleHost& ping,
                                              std::chrono::milliseconds patience = std::chrono::seconds(1));

/// Formats a pinger's view as a table: peer, answered/sent, min/median/max RTT in µs.
std::string format_rtt_table(const std::string& self, const std::map<core::PeerAddr, core::ping::PeerStats>& peers);

}  // namespace apiary::actors
