#pragma once
/// The ping role as an actor: a thin shell around core::ping::Pinger that serves
/// probes over the gateway, probes every known peer each interval, and answers
/// report_atom with a printable RTT table.
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/gateway.hpp"
#include "core/ping/pinger.hpp"

namespace apiary::actors {

/// Spawns the ping actor for the node listening at `self_addr` (a multiaddr), registers
/// it for core::ping::k_handle, and starts probing `bootstrap`.
caf::actor spawn_ping_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, std::string self_addr,
                            core::ping::Config config, std::vector<std::string> bootstrap);

/// Formats a pinger's view as a table: peer, answered/sent, min/median/max RTT in µs.
std::string format_rtt_table(const std::string& self, const std::map<core::PeerAddr, core::ping::PeerStats>& peers);

}  // namespace apiary::actors
