// The DHT scenario's figures: success ratios and the readable report.
#include <chrono>
#include <string>

#include <fmt/format.h>

#include "sim/scenarios/dht_scenario.hpp"

namespace apiary::sim::scenarios {

namespace {

double share(std::size_t num, std::size_t den, double if_empty) {
  return den == 0 ? if_empty : static_cast<double>(num) / static_cast<double>(den);
}

double seconds(core::Duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

double DhtScenarioReport::store_success() const { return share(stores_ok, stores_done, 0.0); }

double DhtScenarioReport::get_success() const { return share(gets_ok, gets_done, 0.0); }

double DhtScenarioReport::get_success_alive() const {
  return share(gets_alive_ok, gets_alive, 1.0);
}

std::string format_report(const DhtScenarioReport& r) {
  std::string out;
  auto line = [&out](const std::string& text) {
    out += text;
    out += '\n';
  };
  line(fmt::format("seed:                   {}", r.seed));
  line(fmt::format("trace_hash:             0x{:016x}", r.trace_hash));
  line(fmt::format("nodes:                  {} ({} killed, {} joined, {} failed bootstrap)",
                   r.nodes, r.killed, r.joined, r.bootstrap_failed));
  line(fmt::format("stores:                 {}/{} ok ({:.2f}%), {} unfinished, {} lost with "
                   "their node, {:.2f} replicas each",
                   r.stores_ok, r.stores_done, 100.0 * r.store_success(),
                   r.stores - r.stores_done - r.stores_aborted, r.stores_aborted,
                   r.replicas_per_store));
  line(fmt::format("gets:                   {}/{} ok ({:.2f}%), {} unfinished, {} lost with "
                   "their node, {} served locally",
                   r.gets_ok, r.gets_done, 100.0 * r.get_success(),
                   r.gets - r.gets_done - r.gets_aborted, r.gets_aborted, r.gets_local));
  line(fmt::format("gets, replica alive:    {}/{} ok ({:.3f}%); {} keys lost every replica, {} never stored "
                   "(the storing node crashed first)",
                   r.gets_alive_ok, r.gets_alive, 100.0 * r.get_success_alive(), r.keys_without_replica,
                   r.keys_never_held));
  line(fmt::format("hops per get:           mean {:.2f}, p50 {}, p99 {}, max {} ({} remote gets)",
                   r.hops.mean, r.hops.p50, r.hops.p99, r.hops.max, r.hops.samples));
  line(fmt::format("messages per store:     {:.1f} node requests, {:.1f} world calls",
                   r.requests_per_store, r.calls_per_store));
  line(fmt::format("messages per get:       {:.1f} node requests, {:.1f} world calls",
                   r.requests_per_get, r.calls_per_get));
  line(fmt::format("virtual time:           {:.3f} s (store phase {:.3f} s, get phase {:.3f} s)",
                   seconds(r.virtual_time), seconds(r.store_phase), seconds(r.get_phase)));
  line(fmt::format("world:                  {} events, {} calls, {} timeouts, {} lost, {} to "
                   "dead nodes, {} late replies, {} anomalies",
                   r.world.events, r.world.calls, r.world.timeouts, r.world.lost, r.world.to_dead,
                   r.world.late, r.anomalies));
  return out;
}

}  // namespace apiary::sim::scenarios
