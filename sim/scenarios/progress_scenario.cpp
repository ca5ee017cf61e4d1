#include "sim/scenarios/progress_scenario.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "core/dht/node_id.hpp"
#include "core/dht/node_role.hpp"
#include "core/dht/schema_validator.hpp"
#include "core/dht/validation.hpp"
#include "core/mux.hpp"
#include "core/optim/epoch.hpp"
#include "core/optim/progress_role.hpp"
#include "sim/faults.hpp"
#include "sim/role_host.hpp"
#include "sim/scenarios/dht_swarm.hpp"

namespace apiary::sim::scenarios {

namespace optim = core::optim;
using core::Effects;
using core::TimePoint;

Status validate(const ProgressScenarioConfig& c) {
  auto bad = [](const char* field, const std::string& got, const char* want) {
    return make_error(errc::invalid_argument, "expected {} {}, got {}; fix the scenario config", field, want, got);
  };
  if (c.peers < 2 || c.peers > (std::size_t{1} << 20)) return bad("peers", std::to_string(c.peers), "in [2, 2^20]");
  if (c.batch < 1) return bad("batch", std::to_string(c.batch), ">= 1");
  if (!(c.min_speed > 0) || !(c.max_speed >= c.min_speed)) {
    return bad("speeds", fmt::format("{}-{}", c.min_speed, c.max_speed), "0 < min <= max");
  }
  if (!(c.epoch_seconds > 0)) return bad("epoch_seconds", fmt::format("{}", c.epoch_seconds), "> 0");
  if (c.epochs < 1) return bad("epochs", "0", ">= 1");
  if (!(c.churn >= 0 && c.churn < 1)) return bad("churn", fmt::format("{}", c.churn), "in [0, 1)");
  if (!(c.bandwidth >= 0)) return bad("bandwidth", fmt::format("{}", c.bandwidth), ">= 0");
  if (c.bootstrap_peers < 1) return bad("bootstrap_peers", "0", ">= 1");
  optim::ProgressConfig tracker = c.tracker;
  tracker.target_batch_size = 1;
  return tracker.validate();
}

namespace {

/// One trainer's node: its DHT node ("dht") and progress tracker ("progress").
class TrainerHost final : public RoleHost<core::Mux> {
 public:
  TrainerHost(core::Mux mux, std::vector<core::PeerAddr> bootstrap)
      : RoleHost<core::Mux>(std::move(mux)), bootstrap_(std::move(bootstrap)) {}

  Effects on_start(TimePoint now) override {
    Effects out = RoleHost<core::Mux>::on_start(now);
    core::dht::NodeOp start = [bootstrap = bootstrap_](core::dht::Node& node, TimePoint at, core::dht::OpId op) {
      return node.start(at, op, bootstrap);
    };
    Effects more = call(now, "dht", core::dht::k_run_method, core::Value::of(std::move(start)), nullptr);
    out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
    return out;
  }

  [[nodiscard]] const optim::ProgressRole& progress() const {
    return *static_cast<const optim::ProgressRole*>(role().find("progress"));
  }

 private:
  std::vector<core::PeerAddr> bootstrap_;
};

/// A trainer as the driver sees it.
struct Trainer {
  core::PeerAddr addr;
  TrainerHost* host = nullptr;
  double speed = 0;  ///< samples per second
  std::int64_t epoch = 0;
  std::int64_t samples = 0;
  TimePoint joined{};
};

/// An ETA a trainer computed: when, and for which epoch's end.
struct Eta {
  double at = 0;
  double eta = 0;  ///< virtual s
};

struct Run {
  explicit Run(const ProgressScenarioConfig& c) : config(c), world(c.seed) {}
  ProgressScenarioConfig config;
  World world;
  std::shared_ptr<core::dht::RecordValidator> validator;
  std::vector<Trainer> trainers;
  std::map<std::int64_t, double> began;   ///< epoch -> virtual s the first peer entered it
  std::map<std::int64_t, std::vector<std::size_t>> reached;  ///< epoch -> trainers that were at it
  std::map<std::int64_t, std::vector<Eta>> etas;
  std::int64_t swarm_epoch = 0;
  std::size_t joined = 0;
  std::size_t killed = 0;
  std::size_t regressions = 0;
  std::size_t caught_up = 0;
  double last_epoch_seconds = 0;

  [[nodiscard]] double seconds() const { return core::to_seconds(world.now()); }
  [[nodiscard]] double dht_now() const { return seconds() + config.dht_epoch; }
};

void step(Run& run, std::size_t i);

/// Adds trainer i (a new node) starting at `at`, bootstrapping from `bootstrap`.
Status add_trainer(Run& run, std::vector<core::PeerAddr> bootstrap, TimePoint at) {
  World& world = run.world;
  const std::size_t i = run.trainers.size();
  const auto id = core::dht::NodeId::random([&] { return world.rng().next_u64(); });
  const std::uint64_t seed = world.rng().next_u64();
  core::PeerAddr addr = dht_addr(i, id);
  core::Mux mux;
  core::dht::NodeConfig node = run.config.node;
  node.seed = seed;
  core::dht::NodeRoleConfig dht;
  dht.addressed = false;
  (void)mux.add("dht", std::make_unique<core::dht::NodeRole>(
                           std::make_unique<core::dht::Node>(id, addr, std::move(node), run.validator,
                                                             run.config.dht_epoch),
                           dht));
  optim::ProgressRoleConfig progress;
  progress.run_id = "run";
  progress.tracker = run.config.tracker;
  progress.peer_id = addr.multiaddr();
  progress.owner_marker = fmt::format("[owner:sim{}]", i);
  progress.dht_epoch = run.config.dht_epoch;
  (void)mux.add("progress", std::make_unique<optim::ProgressRole>(std::move(progress)));
  auto host = std::make_unique<TrainerHost>(std::move(mux), std::move(bootstrap));
  Trainer trainer;
  trainer.addr = addr;
  trainer.host = host.get();
  trainer.speed = run.config.min_speed + (run.config.max_speed - run.config.min_speed) * world.rng().uniform01();
  trainer.joined = at;
  if (auto added = world.add_node(addr, std::move(host)); !added) return added.error();
  if (auto started = world.start_node(addr, at); !started) return started.error();
  run.trainers.push_back(std::move(trainer));
  return ok_status();
}

std::vector<core::PeerAddr> random_running(Run& run, std::size_t count) {
  std::vector<core::PeerAddr> live;
  for (const Trainer& t : run.trainers) {
    if (run.world.running(t.addr)) live.push_back(t.addr);
  }
  std::vector<core::PeerAddr> out;
  while (out.size() < count && !live.empty()) {
    const std::size_t k = run.world.rng().uniform(live.size());
    out.push_back(live[k]);
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return out;
}

/// The swarm entered `epoch`: churn for the epoch it begins.
void on_swarm_epoch(Run& run, std::int64_t epoch) {
  const double now = run.seconds();
  if (auto prev = run.began.find(epoch - 1); prev != run.began.end()) run.last_epoch_seconds = now - prev->second;
  run.began.emplace(epoch, now);
  run.swarm_epoch = epoch;
  if (run.config.churn <= 0 || static_cast<std::size_t>(epoch) >= run.config.epochs) return;
  std::vector<core::PeerAddr> live;
  for (const Trainer& t : run.trainers) {
    if (run.world.running(t.addr)) live.push_back(t.addr);
  }
  const auto count = static_cast<std::size_t>(std::llround(run.config.churn * static_cast<double>(live.size())));
  const double span = run.last_epoch_seconds > 0 ? run.last_epoch_seconds : run.config.epoch_seconds;
  const TimePoint from = run.world.now();
  const TimePoint until = from + std::chrono::duration_cast<core::Duration>(std::chrono::duration<double>(span));
  auto kills = kill_random(run.world, std::move(live), count, from, until);
  if (!kills) return;
  for (const Kill& kill : kills.value()) {
    run.world.schedule(kill.at, [&run](World& w) {  // a fresh peer takes its place
      ++run.killed;
      const std::size_t index = run.trainers.size();
      if (!add_trainer(run, random_running(run, run.config.bootstrap_peers), w.now())) return;
      ++run.joined;
      w.schedule(w.now() + run.config.warmup / 5, [&run, index](World&) { step(run, index); });
    });
  }
}

/// The trainer moved to `epoch` (from its own), after a step or a catch-up.
void enter_epoch(Run& run, std::size_t i, std::int64_t epoch, bool catch_up) {
  Trainer& t = run.trainers[i];
  if (epoch < t.epoch) ++run.regressions;
  if (catch_up) ++run.caught_up;
  t.epoch = epoch;
  t.samples = 0;
  run.reached[epoch].push_back(i);
  Effects fx = t.host->call(run.world.now(), "progress", optim::k_update_epoch_method,
                            core::Value::of(std::optional<std::int64_t>(epoch)), nullptr);
  (void)run.world.submit(t.addr, std::move(fx));
  if (epoch > run.swarm_epoch) on_swarm_epoch(run, epoch);
}

/// One batch of trainer i, then its next one.
void step(Run& run, std::size_t i) {
  World& world = run.world;
  Trainer& t = run.trainers[i];
  if (!world.running(t.addr) || run.swarm_epoch >= static_cast<std::int64_t>(run.config.epochs)) return;
  t.samples += run.config.batch;
  (void)world.submit(t.addr, t.host->call(world.now(), "progress", optim::k_report_method,
                                          core::Value::of(optim::ProgressReport{t.epoch, t.samples, true}), nullptr));
  optim::ProgressSnapshot seen;
  (void)world.submit(t.addr, t.host->call(world.now(), "progress", optim::k_look_method, {},
                                          [&seen](Result<core::Value> r) {
                                            if (r.ok() && r->as<optim::ProgressSnapshot>() != nullptr) {
                                              seen = *r->as<optim::ProgressSnapshot>();
                                            }
                                          }));
  const std::int64_t global = seen.global.epoch;
  if (std::isfinite(seen.global.eta_next_epoch) && seen.global.eta_next_epoch > 0) {
    run.etas[global].push_back(Eta{run.seconds(), seen.global.eta_next_epoch - run.config.dht_epoch});
  }
  if (optim::should_load_state(t.epoch, global, true, seen.fetched_this_epoch) && global > t.epoch) {
    enter_epoch(run, i, global, true);  // behind the swarm: the state of a peer at its epoch
  } else if (seen.ready_to_update_epoch) {
    enter_epoch(run, i, optim::next_epoch(t.epoch, global), false);
  }
  const double seconds = static_cast<double>(run.config.batch) / t.speed;
  world.schedule(world.now() + std::chrono::duration_cast<core::Duration>(std::chrono::duration<double>(seconds)),
                 [&run, i](World&) { step(run, i); });
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace

Result<ProgressScenarioReport> run_progress_scenario(const ProgressScenarioConfig& c) {
  if (auto st = validate(c); !st) return st.error();
  auto run = std::make_unique<Run>(c);
  const double mean_speed = (c.min_speed + c.max_speed) / 2;
  run->config.tracker.target_batch_size =
      std::max<std::int64_t>(1, std::llround(c.epoch_seconds * mean_speed * static_cast<double>(c.peers)));
  auto composite = std::make_shared<core::dht::CompositeValidator>();
  composite->extend(std::make_unique<core::dht::SchemaValidator>(
      std::vector<core::dht::SchemaField>{optim::progress_schema_field()},
      core::dht::SchemaOptions{std::string("run"), true}));
  run->validator = composite;
  auto latency = dht_link_rule(c.seed, c.min_latency, c.max_latency, 0.0);
  if (!latency) return latency.error();
  run->world.network().set_rule([rule = std::move(latency.value()), bandwidth = c.bandwidth](
                                    const core::PeerAddr& from, const core::PeerAddr& to) {
    LinkModel link = rule(from, to);
    link.bandwidth = bandwidth;
    return link;
  });
  for (std::size_t i = 0; i < c.peers; ++i) {
    std::vector<core::PeerAddr> bootstrap;
    const std::size_t want = std::min(c.bootstrap_peers, i);
    while (bootstrap.size() < want) {
      const core::PeerAddr& pick = run->trainers[run->world.rng().uniform(i)].addr;
      if (std::find(bootstrap.begin(), bootstrap.end(), pick) == bootstrap.end()) bootstrap.push_back(pick);
    }
    if (auto added = add_trainer(*run, std::move(bootstrap), c.start_interval * static_cast<core::Duration::rep>(i));
        !added) {
      return added.error();
    }
  }
  const TimePoint training = c.start_interval * static_cast<core::Duration::rep>(c.peers) + c.warmup;
  run->began.emplace(0, core::to_seconds(training));
  for (std::size_t i = 0; i < c.peers; ++i) {
    run->reached[0].push_back(i);
    // Trainers begin within one step of each other.
    const double offset = run->world.rng().uniform01() * static_cast<double>(c.batch) / c.min_speed;
    run->world.schedule(training + std::chrono::duration_cast<core::Duration>(std::chrono::duration<double>(offset)),
                        [r = run.get(), i](World&) { step(*r, i); });
  }
  const auto target = static_cast<std::int64_t>(c.epochs);
  while (run->swarm_epoch < target && run->world.now() < c.max_time && run->world.step()) {
  }

  ProgressScenarioReport report;
  report.seed = c.seed;
  report.peers = c.peers;
  report.target_batch_size = run->config.tracker.target_batch_size;
  report.finished = run->swarm_epoch >= target;
  const double end = run->seconds();
  for (const auto& [epoch, began] : run->began) {
    EpochReport e;
    e.epoch = epoch;
    e.began = began;
    auto next = run->began.find(epoch + 1);
    const double ended = next == run->began.end() ? end : next->second;
    e.seconds = next == run->began.end() ? 0 : ended - began;
    std::vector<std::size_t> reached = run->reached[epoch];
    std::sort(reached.begin(), reached.end());
    e.reached = static_cast<std::size_t>(std::unique(reached.begin(), reached.end()) - reached.begin());
    if (next != run->began.end()) {
      std::vector<double> errors;
      for (const Eta& eta : run->etas[epoch]) {
        if (eta.at >= began + (ended - began) / 2 && eta.at < ended) errors.push_back(std::abs(eta.eta - ended));
      }
      e.eta_samples = errors.size();
      e.eta_median_error = quantile(errors, 0.5);
      e.eta_p90_error = quantile(errors, 0.9);
    }
    report.epochs.push_back(e);
  }
  const double epoch_span = run->last_epoch_seconds > 0 ? run->last_epoch_seconds : c.epoch_seconds;
  for (std::size_t i = 0; i < run->trainers.size(); ++i) {
    const Trainer& t = run->trainers[i];
    if (!run->world.running(t.addr)) continue;
    ++report.live_at_end;
    const bool settled = end - core::to_seconds(t.joined) >= 2 * epoch_span;
    if (settled && t.epoch < run->swarm_epoch - 1) ++report.stalled;
  }
  for (const Trainer& t : run->trainers) {
    if (!run->world.running(t.addr)) continue;
    optim::ProgressSnapshot seen;
    (void)run->world.submit(t.addr, t.host->call(run->world.now(), "progress", optim::k_look_method, {},
                                                 [&seen](Result<core::Value> r) {
                                                   if (r.ok() && r->as<optim::ProgressSnapshot>() != nullptr) {
                                                     seen = *r->as<optim::ProgressSnapshot>();
                                                   }
                                                 }));
    report.reports_stored += seen.reports_stored;
    report.fetches += seen.fetches;
  }
  report.joined = run->joined;
  report.killed = run->killed;
  report.regressions = run->regressions;
  report.caught_up = run->caught_up;
  report.trace_hash = run->world.trace_hash();
  report.virtual_time = run->world.now();
  report.world = run->world.stats();
  report.anomalies = run->world.anomalies().size();
  return report;
}

std::string format_report(const ProgressScenarioReport& r) {
  std::string out = fmt::format("{} peers, target_batch_size {}, {} joined, {} killed, {} live at the end\n", r.peers,
                                r.target_batch_size, r.joined, r.killed, r.live_at_end);
  for (const auto& e : r.epochs) {
    out += fmt::format("epoch {:>3}: began {:>7.1f} s, lasted {:>6.1f} s, reached by {:>5} peers, ETA error in its "
                       "second half: median {:.2f} s, p90 {:.2f} s ({} ETAs)\n",
                       e.epoch, e.began, e.seconds, e.reached, e.eta_median_error, e.eta_p90_error, e.eta_samples);
  }
  out += fmt::format("stalled peers {}, epochs gone back {}, catch-ups {}, reports stored {}, fetches {}\n", r.stalled,
                     r.regressions, r.caught_up, r.reports_stored, r.fetches);
  out += fmt::format("finished {}, virtual time {:.1f} s, {} events, {} calls, anomalies {}\n",
                     r.finished ? "yes" : "no", core::to_seconds(r.virtual_time), r.world.events, r.world.calls,
                     r.anomalies);
  out += fmt::format("seed={} trace_hash=0x{:016x}\n", r.seed, r.trace_hash);
  return out;
}

}  // namespace apiary::sim::scenarios
