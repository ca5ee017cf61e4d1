#include "sim/scenarios/averaging_scenario.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "core/dht/node_id.hpp"
#include "sim/faults.hpp"
#include "sim/scenarios/dht_swarm.hpp"

namespace apiary::sim::scenarios {

namespace mm = core::averaging;
using core::TimePoint;

double RoundReport::completion() const {
  return live == 0 ? 1.0 : static_cast<double>(completed) / static_cast<double>(live);
}

double AveragingScenarioReport::min_completion() const {
  double lowest = 1.0;
  for (const auto& r : rounds) lowest = std::min(lowest, r.completion());
  return lowest;
}

Status validate(const AveragingScenarioConfig& c) {
  auto bad = [](const char* field, const std::string& got, const char* want) {
    return make_error(errc::invalid_argument, "expected {} {}, got {}; fix the scenario config",
                      field, want, got);
  };
  if (c.peers < 2) return bad("peers", std::to_string(c.peers), ">= 2");
  if (c.peers > (std::size_t{1} << 24)) return bad("peers", std::to_string(c.peers), "<= 2^24");
  if (c.group < 2) return bad("group", std::to_string(c.group), ">= 2");
  if (c.rounds < 1) return bad("rounds", std::to_string(c.rounds), ">= 1");
  if (!(c.fail_rate >= 0.0 && c.fail_rate < 1.0)) return bad("fail_rate", fmt::format("{}", c.fail_rate), "in [0, 1)");
  if (c.min_latency < core::Duration::zero() || c.max_latency < c.min_latency) {
    return bad("latencies", fmt::format("{}-{} ns", c.min_latency.count(), c.max_latency.count()),
               "0 <= min <= max");
  }
  if (c.values < 1) return bad("values", std::to_string(c.values), ">= 1");
  if (c.grid_bits > 16) return bad("grid_bits", std::to_string(c.grid_bits), "<= 16");
  if (c.bootstrap_peers < 1) return bad("bootstrap_peers", "0", ">= 1");
  if (c.matchmaking_deadline + c.averager.call_timeout > c.round_period) {
    return bad("round_period", fmt::format("{} ns", c.round_period.count()),
               ">= matchmaking_deadline + averager.call_timeout");
  }
  return ok_status();
}

namespace {

/// The group key of peer `i` before its first group: bucket i mod 2^bits.
std::string initial_key(const AveragingScenarioConfig& c, std::size_t i) {
  std::string bits;
  for (std::size_t b = c.grid_bits; b-- > 0;) bits.push_back(((i >> b) & 1U) != 0 ? '1' : '0');
  return c.prefix + ".0b" + bits;
}

/// Mean over elements of the std across `vectors`, and the mean of all their values.
std::pair<double, double> spread_and_mean(const std::vector<const std::vector<float>*>& vectors) {
  if (vectors.empty()) return {0.0, 0.0};
  const std::size_t n = vectors.front()->size();
  double spread = 0.0;
  double total = 0.0;
  for (std::size_t e = 0; e < n; ++e) {
    double sum = 0.0;
    for (const auto* v : vectors) sum += (*v)[e];
    const double mean = sum / static_cast<double>(vectors.size());
    double var = 0.0;
    for (const auto* v : vectors) var += ((*v)[e] - mean) * ((*v)[e] - mean);
    spread += std::sqrt(var / static_cast<double>(vectors.size()));
    total += mean;
  }
  return {spread / static_cast<double>(n), total / static_cast<double>(n)};
}

/// The swarm of one run.
struct Run {
  explicit Run(std::uint64_t seed) : world(seed) {}
  World world;
  std::vector<core::PeerAddr> addrs;
  std::vector<AveragerHost*> hosts;
};

Status add_peers(Run& run, const AveragingScenarioConfig& c) {
  World& world = run.world;
  for (std::size_t i = 0; i < c.peers; ++i) {
    // Peer i bootstraps its DHT node from up to bootstrap_peers random earlier peers.
    std::vector<core::PeerAddr> bootstrap;
    const std::size_t want = std::min(c.bootstrap_peers, i);
    while (bootstrap.size() < want) {
      const core::PeerAddr& pick = run.addrs[world.rng().uniform(i)];
      if (std::find(bootstrap.begin(), bootstrap.end(), pick) == bootstrap.end()) bootstrap.push_back(pick);
    }
    const auto id = core::dht::NodeId::random([&] { return world.rng().next_u64(); });
    const std::uint64_t seed = world.rng().next_u64();
    std::vector<float> values(c.values);
    for (float& v : values) v = static_cast<float>(2.0 * world.rng().uniform01() - 1.0);
    core::PeerAddr addr = dht_addr(i, id);
    auto host = std::make_unique<AveragerHost>(id, addr, c.averager, seed, std::move(values),
                                               std::move(bootstrap));
    AveragerHost* typed = host.get();
    if (auto added = world.add_node(addr, std::move(host)); !added) return added.error();
    const TimePoint at = c.start_interval * static_cast<core::Duration::rep>(i);
    if (auto st = world.start_node(addr, at); !st) return st.error();
    run.addrs.push_back(std::move(addr));
    run.hosts.push_back(typed);
  }
  return ok_status();
}

/// Schedules round `r` beginning at `begin`: every live peer's step, then the kills.
std::size_t schedule_round(Run& run, const AveragingScenarioConfig& c, std::size_t r, TimePoint begin) {
  World& world = run.world;
  std::vector<std::size_t> live;
  for (std::size_t i = 0; i < run.addrs.size(); ++i) {
    if (world.running(run.addrs[i])) live.push_back(i);
  }
  const auto jitter_ns = static_cast<std::uint64_t>(std::max<core::Duration::rep>(c.start_jitter.count(), 1));
  for (std::size_t i : live) {
    const TimePoint at = begin + core::Duration(static_cast<core::Duration::rep>(world.rng().uniform(jitter_ns)));
    world.schedule(at, [&run, &c, r, i, begin](World& w) {
      if (!w.running(run.addrs[i])) return;
      AveragerHost& host = *run.hosts[i];
      const double epoch = c.averager.dht_epoch;
      mm::StepParams params;
      params.scheduled_time = epoch + core::to_seconds(w.now() + c.min_matchmaking_time);
      params.deadline = epoch + core::to_seconds(begin + c.matchmaking_deadline);
      params.target_group_size = c.group;
      params.min_group_size = 2;
      params.min_matchmaking_time = c.min_matchmaking_time;
      params.request_timeout = c.request_timeout;
      params.schema_hash = fmt::format("f32x{}", c.values);
      params.group_key = c.grid_bits > 0 && !host.next_group_key().empty() ? host.next_group_key()
                                                                           : initial_key(c, i);
      (void)w.submit(run.addrs[i], host.begin_round(w.now(), r, std::move(params)));
    });
  }
  // Attrition: fail_rate of the live peers die at random times inside the round.
  const auto kills = std::min(live.size(), static_cast<std::size_t>(
                                               std::llround(c.fail_rate * static_cast<double>(live.size()))));
  std::vector<core::PeerAddr> candidates;
  for (std::size_t i : live) candidates.push_back(run.addrs[i]);
  (void)kill_random(world, std::move(candidates), kills, begin, begin + c.round_period - core::Duration(1));
  return kills;
}

std::vector<std::size_t> running(const Run& run) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < run.addrs.size(); ++i) {
    if (run.world.running(run.addrs[i])) out.push_back(i);
  }
  return out;
}

}  // namespace

Result<AveragingScenarioReport> run_averaging_scenario(const AveragingScenarioConfig& c) {
  if (auto st = validate(c); !st) return st.error();
  auto run = std::make_unique<Run>(c.seed);
  auto rule = dht_link_rule(c.seed, c.min_latency, c.max_latency, 0.0);
  if (!rule) return rule.error();
  run->world.network().set_rule(std::move(rule.value()));
  if (auto st = add_peers(*run, c); !st) return st.error();

  AveragingScenarioReport report;
  report.seed = c.seed;
  report.peers = c.peers;
  report.group = c.group;
  const TimePoint first = c.start_interval * static_cast<core::Duration::rep>(c.peers) + c.warmup;
  for (std::size_t r = 0; r < c.rounds; ++r) {
    const TimePoint begin = first + c.round_period * static_cast<core::Duration::rep>(r);
    run->world.run_until(begin);
    RoundReport round;
    std::vector<std::vector<float>> before(run->addrs.size());
    for (std::size_t i : running(*run)) before[i] = run->hosts[i]->values();
    if (c.keep_values) round.values_before = before;
    round.round = r;
    round.killed = schedule_round(*run, c, r, begin);
    run->world.run_until(begin + c.round_period);

    std::vector<const std::vector<float>*> was;
    std::vector<const std::vector<float>*> now;
    std::map<std::string, std::size_t> groups;
    for (std::size_t i = 0; i < run->addrs.size(); ++i) {
      const PeerRound pr = run->hosts[i]->round(r);
      if (c.keep_values) round.values_after.push_back(run->hosts[i]->values());
      if (pr.grouped) groups[pr.group_id] = pr.group_size;
      if (!run->world.running(run->addrs[i]) || before[i].empty()) continue;
      ++round.live;
      was.push_back(&before[i]);
      now.push_back(&run->hosts[i]->values());
      if (pr.completed) {
        ++round.completed;
        round.failed_peers += pr.failed_peers;
      } else {
        ++round.errors[pr.error.empty() ? std::string("no outcome by the round's end") : pr.error];
      }
    }
    for (const auto& [id, size] : groups) ++round.group_sizes[size];
    std::tie(round.spread_before, round.mean_before) = spread_and_mean(was);
    std::tie(round.spread_after, round.mean_after) = spread_and_mean(now);
    report.rounds.push_back(std::move(round));
  }
  report.trace_hash = run->world.trace_hash();
  report.virtual_time = run->world.now();
  report.world = run->world.stats();
  report.anomalies = run->world.anomalies().size();
  return report;
}

std::string format_report(const AveragingScenarioReport& report) {
  std::string out;
  for (const auto& r : report.rounds) {
    std::string sizes;
    std::size_t groups = 0;
    for (auto it = r.group_sizes.rbegin(); it != r.group_sizes.rend(); ++it) {
      sizes += fmt::format("{}{}x{}", sizes.empty() ? "" : " ", it->second, it->first);
      groups += it->second;
    }
    out += fmt::format(
        "round {:>3}: completed {}/{} live ({:.1f}%), killed {}, groups {} [{}], spread {:.6f} -> "
        "{:.6f}, mean {:+.6f} -> {:+.6f}\n",
        r.round, r.completed, r.live, 100.0 * r.completion(), r.killed, groups, sizes,
        r.spread_before, r.spread_after, r.mean_before, r.mean_after);
    for (const auto& [why, count] : r.errors) out += fmt::format("           {} x {}\n", count, why);
  }
  out += fmt::format("min completion:  {:.1f}%\n", 100.0 * report.min_completion());
  out += fmt::format("virtual time:    {:.1f} s, {} events, {} calls, anomalies {}\n",
                     core::to_seconds(report.virtual_time), report.world.events, report.world.calls,
                     report.anomalies);
  out += fmt::format("seed={} trace_hash=0x{:016x}\n", report.seed, report.trace_hash);
  return out;
}

}  // namespace apiary::sim::scenarios
