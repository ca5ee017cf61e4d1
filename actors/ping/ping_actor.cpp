#include "actors/ping/ping_actor.hpp"

#include <fmt/format.h>


namespace apiary::actors {

RoleHost spawn_ping_actor(caf::actor_system& sys, std::shared_ptr<Gateway> gw, core::PeerAddr self_addr,
                          core::ping::Config config, std::vector<core::PeerAddr> bootstrap, HostKind kind) {
  return spawn_role(sys, std::move(gw),
                    std::make_unique<core::ping::Pinger>(std::move(self_addr), config, std::move(bootstrap)), kind);
}

Result<std::string> ping_report(const RoleHost& ping, std::chrono::milliseconds patience) {
  auto answer = call_role(ping, "", core::ping::k_snapshot_method);
  if (answer.wait_for(patience) != std::future_status::ready) {
    return make_error(errc::deadline_exceeded, "the ping role did not answer within {} ms", patience.count());
  }
  auto value = answer.get();
  if (!value) return value.error();
  const auto* snap = value->as<core::ping::Snapshot>();
  if (snap == nullptr) return make_error(errc::internal, "the ping role answered with a {}", value->type_name());
  return format_rtt_table(snap->self.multiaddr(), snap->peers);
}

std::string format_rtt_table(const std::string& self, const std::map<core::PeerAddr, core::ping::PeerStats>& peers) {
  auto us = [](core::Duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
  std::string out = fmt::format("round-trip times seen by {}\n", self);
  out += fmt::format("{:<48} {:>9} {:>10} {:>10} {:>10}  {}\n", "peer", "ok/sent", "min µs", "median µs", "max µs",
                     "last error");
  for (const auto& [addr, s] : peers) {
    out += fmt::format("{:<48} {:>4}/{:<4} {:>10.1f} {:>10.1f} {:>10.1f}  {}\n", addr, s.answered, s.sent,
                       us(s.min_rtt()), us(s.median_rtt()), us(s.max_rtt()), s.last_error);
  }
  return out;
}

}  // namespace apiary::actors
