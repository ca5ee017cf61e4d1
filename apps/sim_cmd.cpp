// `apiary sim dht`: a simulated DHT of N nodes in one deterministic process (sim/), with
// churn, per-link latencies and loss; prints success rates, hops, messages per
// operation, the seed and the trace hash, plus the wall time and peak memory of the run.
// `apiary sim averaging`: N simulated averagers forming groups through their DHT and
// averaging vectors round after round while peers die; prints per-round completion,
// group sizes, spread and mean, the seed and the trace hash, and the wall time.
// `apiary sim ps`: a parameter-server job (a strategy's PS devices and replicas training
// logistic regression) on a simulated network, with a straggler or a killed PS or replica;
// an all-reduce strategy (AllReduce, PartitionedAR, RandomAxisPartitionAR) runs its
// replicas' collectives instead, with no PS; a mixed strategy (Parallax) runs both, each
// variable by its own synchronizer (--sparse names sparse variables); prints per-step loss, versions and virtual
// step times, the seed and the trace hash.
// `apiary sim moe`: expert servers and mixture-of-experts clients, k experts per step,
// a killed server or lossy links; prints per step the experts answered, the mixed
// output's checksum and the virtual step time, failed steps' errors, seed and trace hash.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>

#include "api/job_files.hpp"
#include "apps/commands.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/strategy/validate.hpp"
#include "messages/result.hpp"
#include "sim/scenarios/averaging_scenario.hpp"
#include "sim/scenarios/progress_scenario.hpp"
#include "sim/scenarios/dht_scenario.hpp"
#include "sim/scenarios/moe_scenario.hpp"
#include "sim/scenarios/ps_scenario.hpp"

namespace apiary::apps {

namespace {

using Clock = std::chrono::steady_clock;

/// A latency range in milliseconds.
struct LatencyRange {
  double min_ms = 0.0;
  double max_ms = 0.0;
};

/// Parses "MIN-MAX" (or a single "MS") in milliseconds, 0 <= MIN <= MAX.
Result<LatencyRange> parse_latency(const std::string& text) {
  auto bad = [&text]() {
    return make_error(errc::invalid_argument,
                      "expected --latency-ms MIN-MAX in milliseconds with 0 <= MIN <= MAX "
                      "(e.g. 1-50, or 5 for a fixed latency), got '{}'; fix the range", text);
  };
  const auto dash = text.find('-', 1);  // not a leading minus sign
  const std::string lo = dash == std::string::npos ? text : text.substr(0, dash);
  const std::string hi = dash == std::string::npos ? text : text.substr(dash + 1);
  LatencyRange range;
  try {
    std::size_t used_lo = 0;
    std::size_t used_hi = 0;
    range.min_ms = std::stod(lo, &used_lo);
    range.max_ms = std::stod(hi, &used_hi);
    if (used_lo != lo.size() || used_hi != hi.size()) return bad();
  } catch (const std::exception&) {
    return bad();
  }
  if (!(range.min_ms >= 0.0) || !(range.max_ms >= range.min_ms) || range.max_ms > 1e7) return bad();
  return range;
}

core::Duration from_ms(double ms) {
  return std::chrono::duration_cast<core::Duration>(std::chrono::duration<double, std::milli>(ms));
}

/// Adds `--NAME MS` (0..max ms) to `app`, setting `*target` (the config `holder` keeps alive).
template <class Holder>
void add_ms_option(CLI::App& app, const char* name, std::shared_ptr<Holder> holder, core::Duration Holder::*target,
                   const char* description, double max = 1e7) {
  app.add_option_function<double>(name, [holder, target](double ms) { (*holder).*target = from_ms(ms); }, description)
      ->check(CLI::Range(0.0, max));
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// Peak resident memory of this process so far, in MiB (ru_maxrss is in KiB on Linux).
double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

/// Adds `apiary sim averaging` to `cmd`; returns its action.
std::function<int()> add_averaging_command(CLI::App& cmd) {
  auto* avg = cmd.add_subcommand("averaging",
                                 "Simulated averagers: DHT matchmaking and butterfly all-reduce, rounds with failures");
  // The flags set the scenario's fields, whose defaults are the command's.
  auto config = std::make_shared<sim::scenarios::AveragingScenarioConfig>();
  auto latency = std::make_shared<std::string>("1-100");
  avg->add_option("--peers", config->peers, "Averagers in the swarm")->check(CLI::Range(2, 1 << 24))->capture_default_str();
  avg->add_option("--group", config->group, "Target group size")->check(CLI::Range(2, 1 << 20))->capture_default_str();
  avg->add_option("--rounds", config->rounds, "Averaging rounds")->check(CLI::Range(1, 1000000))->capture_default_str();
  avg->add_option("--fail-rate", config->fail_rate, "Fraction of the live peers killed during each round, in [0, 1)")
      ->check(CLI::Range(0.0, 0.999999))
      ->capture_default_str();
  avg->add_option("--latency-ms", *latency, "One-way latency range MIN-MAX in ms, drawn once per link")
      ->capture_default_str();
  avg->add_option("--seed", config->seed, "Seed of the run; the same seed gives the same trace hash")->capture_default_str();
  avg->add_option("--values", config->values, "Floats averaged per peer")->check(CLI::Range(1, 1 << 26))->capture_default_str();
  avg->add_option("--grid-bits", config->grid_bits, "Moshpit grid bits of the group key (0: one key for all)")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  avg->add_option("--device-ns-per-value", config->averager.device_ns_per_value,
                  "Part reductions on a modelled device per peer, taking this many ns per input value (0: inline)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  return [=]() {
    if (!avg->parsed()) return -1;
    auto range = parse_latency(*latency);
    if (!range) return fail("sim averaging", range.error());
    config->min_latency = from_ms(range->min_ms);
    config->max_latency = from_ms(range->max_ms);
    // Wall time is read here: the simulation itself never reads a clock.
    const Clock::time_point begin = Clock::now();
    auto report = sim::scenarios::run_averaging_scenario(*config);
    const Clock::time_point end = Clock::now();
    if (!report) return fail("sim averaging", report.error());
    std::printf("apiary sim averaging: %zu peers, group %zu, %zu rounds, fail rate %.3f, latency %s ms per link, "
                "%zu floats per peer\n", config->peers, config->group, config->rounds, config->fail_rate,
                latency->c_str(), config->values);
    std::printf("%s", sim::scenarios::format_report(report.value()).c_str());
    std::printf("wall time:       %.2f s\n", seconds_between(begin, end));
    std::printf("peak memory:     %.1f MiB\n", peak_rss_mib());
    return 0;
  };
}

/// Adds `apiary sim progress` to `cmd`; returns its action (-1 when not chosen).
std::function<int()> add_progress_command(CLI::App& cmd) {
  auto* sub = cmd.add_subcommand("progress", "Simulated collaborative trainers of mixed speed: progress trackers "
                                             "through their DHT, epochs, ETAs, churn");
  auto config = std::make_shared<sim::scenarios::ProgressScenarioConfig>();
  auto latency = std::make_shared<std::string>("1-200");
  sub->add_option("--peers", config->peers, "Trainers at the start")->check(CLI::Range(2, 1 << 20))->capture_default_str();
  sub->add_option("--epochs", config->epochs, "Run until the swarm's epoch reaches this")->capture_default_str();
  sub->add_option("--churn", config->churn, "Share of the live peers replaced during each epoch, in [0, 1)")
      ->check(CLI::Range(0.0, 0.999999))
      ->capture_default_str();
  sub->add_option("--epoch-seconds", config->epoch_seconds, "Epoch length the target batch size is set for")
      ->capture_default_str();
  sub->add_option("--bandwidth", config->bandwidth, "Bytes per second of every link (0: unlimited)")->capture_default_str();
  sub->add_option("--latency-ms", *latency, "One-way latency range MIN-MAX in ms, drawn once per link")
      ->capture_default_str();
  sub->add_option("--seed", config->seed, "Seed of the run; the same seed gives the same trace hash")->capture_default_str();
  return [=]() {
    if (!sub->parsed()) return -1;
    auto range = parse_latency(*latency);
    if (!range) return fail("sim progress", range.error());
    config->min_latency = from_ms(range->min_ms);
    config->max_latency = from_ms(range->max_ms);
    const Clock::time_point begin = Clock::now();  // the simulation itself never reads a clock
    auto report = sim::scenarios::run_progress_scenario(*config);
    const Clock::time_point end = Clock::now();
    if (!report) return fail("sim progress", report.error());
    std::printf("%s", sim::scenarios::format_report(report.value()).c_str());
    const double wall = seconds_between(begin, end);
    std::printf("wall time: %.2f s, %.0f events/s, peak memory %.1f MiB\n", wall,
                static_cast<double>(report->world.events) / wall, peak_rss_mib());
    return 0;
  };
}

/// Adds `apiary sim ps` to `cmd`; returns its action (-1 when not chosen).
std::function<int()> add_ps_sim_command(CLI::App& cmd) {
  auto* ps = cmd.add_subcommand("ps", "A simulated training job: a strategy's PS devices and replicas, its all-reduce replicas, or both (mixed strategies such as Parallax)");
  struct Args {
    std::string strategy, resource_spec, latency = "1-10";
    bool text = false, insecure = false;
    double straggler_ms = 0.0, compute_ms = 10.0;
  };
  auto a = std::make_shared<Args>();
  // The other flags set the scenario's fields, whose defaults are the command's (but --steps).
  auto config = std::make_shared<sim::scenarios::PsScenarioConfig>();
  config->steps = 20;
  ps->add_option("--strategy", a->strategy, "Strategy file (see `apiary strategy build`; binary unless --text)")
      ->required();
  ps->add_flag("--text", a->text, "The strategy file is protobuf text format");
  ps->add_option("--resource-spec", a->resource_spec, "resource_spec.yml the strategy was built for")->required();
  ps->add_option("--steps", config->steps, "Training steps")->check(CLI::Range(0, 1000000))->capture_default_str();
  ps->add_option("--latency-ms", a->latency, "One-way latency range MIN-MAX in ms, drawn once per link")
      ->capture_default_str();
  ps->add_option("--compute-ms", a->compute_ms, "Virtual compute time of a step (ms)")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  ps->add_option("--straggler-ms", a->straggler_ms, "Extra compute time per step of the last replica (ms)")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  ps->add_option("--kill-ps-at", config->kill_ps_at, "Kill the first PS device when the chief begins this step (PS and mixed strategies)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1000000}));
  ps->add_option("--kill-replica-at", config->kill_replica_at, "Kill the last replica when it begins this step")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1000000}));
  add_ms_option(*ps, "--restart-replica-after-ms", config, &sim::scenarios::PsScenarioConfig::restart_replica_after,
                "With --kill-replica-at: the killed replica starts again this many ms later (with --drop-lost-after-ms "
                "it rejoins the synchronous job where it stands)");
  add_ms_option(*ps, "--restart-ps-after-ms", config, &sim::scenarios::PsScenarioConfig::restart_ps_after,
                "With --kill-ps-at: the killed PS device starts again this many ms later from the chief's latest "
                "checkpoint (--save-every), and the replicas replay their pushes since (BSP strategies)");
  add_ms_option(*ps, "--ps-restart-wait-ms", config, &sim::scenarios::PsScenarioConfig::ps_restart_wait,
                "With --restart-ps-after-ms: how long the replicas wait for the PS (default 60000)", 1e8);
  ps->add_option_function<std::string>(
        "--profile",
        [config](const std::string& path) {
          std::ifstream in(path);
          const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
          if (!in) throw CLI::ValidationError("--profile", "cannot read " + path + "; write it with apiary sim calibrate");
          auto profile = sim::parse_cost_profile(text, path);
          if (!profile) throw CLI::ValidationError("--profile", profile.error().message);
          config->profile = *profile;
        },
        "A machine's costs (`apiary sim calibrate --out P`): hosts charge processor time for their messages, "
        "bytes and work on the machines of the resource spec's hosts, links take its latency")
      ->check(CLI::ExistingFile);
  ps->add_flag("--insecure", a->insecure,
               "With --profile: the job's connections are plaintext, as apiary ps --insecure runs (default: "
               "encrypted, each byte also charged the profile's secure_byte_ns)");
  ps->add_option("--save-every", config->save_every,
                 "The chief keeps a checkpoint at the start of every step that is a multiple of this, as apiary ps "
                 "--save-every does (what a PS started again continues from)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1000000}));
  add_ms_option(*ps, "--drop-lost-after-ms", config, &sim::scenarios::PsScenarioConfig::drop_lost_after,
                "The PS devices drop a replica that went down this many ms later and the job goes on without it "
                "(default: a lost replica ends the synchronous job)");
  add_model_options(*ps, config->batch, config->samples, config->features, config->density);
  ps->add_option("--learning-rate", config->optimizer.learning_rate, "SGD step size")->capture_default_str();
  ps->add_option("--seed", config->seed, "Seed of the run; the same seed gives the same trace hash")->capture_default_str();
  ps->add_option("--sparse", config->sparse_variables,
                 "A variable whose gradient is sparse (the rows it touches: all-gathered under all-reduce, pushed "
                 "as rows to a PS), e.g. logreg/w:0; repeatable");
  return [=]() {
    if (!ps->parsed()) return -1;
    auto fail = [](const Error& e) { return apps::fail("sim ps", e); };
    auto range = parse_latency(a->latency);
    if (!range) return fail(range.error());
    auto strategy = load_strategy(a->strategy, a->text);
    if (!strategy) return fail(strategy.error());
    auto spec = load_resource_spec(a->resource_spec);
    if (!spec) return fail(spec.error());
    if (auto valid = core::strategy::validate(*strategy, core::ps::logistic_graph_item(config->features), *spec);
        !valid) {
      return fail(make_error(errc::invalid_argument, "{}: {}", a->strategy, valid.error().message));
    }
    config->strategy = std::move(*strategy);
    if (config->profile && !a->insecure) config->profile = config->profile->encrypted();
    config->min_latency = from_ms(range->min_ms);
    config->max_latency = from_ms(range->max_ms);
    config->compute = from_ms(a->compute_ms);
    config->straggler = from_ms(a->straggler_ms);
    const Clock::time_point begin = Clock::now();
    auto report = sim::scenarios::run_ps_scenario(*config);
    const Clock::time_point end = Clock::now();
    if (!report) return fail(report.error());
    std::printf("apiary sim ps: %lld steps, latency %s ms per link, compute %.3f ms, straggler +%.3f ms\n",
                static_cast<long long>(config->steps), a->latency.c_str(), a->compute_ms, a->straggler_ms);
    std::printf("%s", sim::scenarios::format_report(report.value()).c_str());
    std::printf("wall time:    %.3f s\n", seconds_between(begin, end));
    // A clean run finishes every replica; with a kill, every survivor must end with an error.
    if (report->hung) return 1;
    for (const auto& r : report->replicas) {
      if (!r.finished) return 1;
    }
    return 0;
  };
}

/// Adds `apiary sim moe` to `cmd`; returns its action (-1 when not chosen).
std::function<int()> add_moe_sim_command(CLI::App& cmd) {
  auto* moe = cmd.add_subcommand("moe", "Simulated mixture-of-experts: expert servers and clients calling k experts per step");
  struct Args {
    std::string latency = "1-10";
    double timeout_after_k_min_ms = 20.0, call_timeout_ms = 500.0, kill_at_ms = -1.0, batch_timeout_ms = -1.0,
           restart_after_ms = -1.0;
  };
  auto a = std::make_shared<Args>();
  // The other flags set the scenario's fields, whose defaults are the command's.
  auto config = std::make_shared<sim::scenarios::MoeScenarioConfig>();
  moe->add_option("--servers", config->servers, "Expert servers")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  moe->add_option("--experts", config->experts_per_server, "Experts per server (ffn.SERVER.EXPERT)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  moe->add_option("--hidden-dim", config->hidden_dim, "Hidden dim of every ffn expert")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  moe->add_option("--clients", config->clients, "MoE clients")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  moe->add_option("--steps", config->steps, "Steps per client")->check(CLI::Range(0, 1000000))->capture_default_str();
  moe->add_option("--rows", config->rows, "Rows per batch")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  moe->add_option("-k,--k-best", config->k, "Experts asked per step (k)")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  moe->add_option("--k-min", config->k_min, "Answers a step needs")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  moe->add_option("--min-batch-size", config->min_batch_size, "Rows that make an expert's batch ready")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  moe->add_option("--batch-timeout-ms", a->batch_timeout_ms, "Run a smaller batch once its oldest task waited this long (ms)")
      ->check(CLI::Range(0.0, 1e7));
  moe->add_option("--timeout-after-k-min-ms", a->timeout_after_k_min_ms, "Wait for the other experts after k_min answers (ms)")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  moe->add_option("--call-timeout-ms", a->call_timeout_ms, "Deadline of each forward and backward call (ms)")
      ->check(CLI::Range(1e-3, 1e7))
      ->capture_default_str();
  moe->add_option("--latency-ms", a->latency, "One-way latency range MIN-MAX in ms, drawn once per link")
      ->capture_default_str();
  moe->add_option("--loss", config->loss, "Probability that a message is lost, in [0, 1]")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  moe->add_option("--kill-server", config->kill_server, "Kill this server (with --kill-at-ms or --kill-at-step)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 20));
  moe->add_option("--kill-at-ms", a->kill_at_ms, "Kill it at this virtual time (ms)")->check(CLI::Range(0.0, 1e9));
  moe->add_option("--restart-after-ms", a->restart_after_ms,
                  "With --kill-at-ms: the server comes back this long after (ms), its experts fresh")
      ->check(CLI::Range(0.0, 1e9));
  moe->add_option("--kill-at-step", config->kill_at_step, "Kill it when client 0 begins this step")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1000000}));
  moe->add_option("--seed", config->seed, "Seed of the run; the same seed gives the same trace hash")->capture_default_str();
  return [=]() {
    if (!moe->parsed()) return -1;
    auto fail = [](const Error& e) { return apps::fail("sim moe", e); };
    auto range = parse_latency(a->latency);
    if (!range) return fail(range.error());
    config->min_latency = from_ms(range->min_ms);
    config->max_latency = from_ms(range->max_ms);
    config->timeout_after_k_min = from_ms(a->timeout_after_k_min_ms);
    config->call_timeout = from_ms(a->call_timeout_ms);
    if (a->kill_at_ms >= 0.0) config->kill_at = from_ms(a->kill_at_ms);
    if (a->batch_timeout_ms >= 0.0) config->batch_timeout = from_ms(a->batch_timeout_ms);
    if (a->restart_after_ms >= 0.0) config->restart_after = from_ms(a->restart_after_ms);
    const Clock::time_point begin = Clock::now();
    auto report = sim::scenarios::run_moe_scenario(*config);
    const Clock::time_point end = Clock::now();
    if (!report) return fail(report.error());
    std::printf("apiary sim moe: %zu servers x %zu experts (h %u), %zu clients x %lld steps, k %zu, k_min %zu, "
                "latency %s ms per link, loss %.4f\n",
                config->servers, config->experts_per_server, config->hidden_dim, config->clients,
                static_cast<long long>(config->steps), config->k, config->k_min, a->latency.c_str(), config->loss);
    std::printf("%s", sim::scenarios::format_report(report.value()).c_str());
    std::printf("wall time:    %.3f s\n", seconds_between(begin, end));
    // Failed steps are the scenario's to report; a hang is a bug.
    return report->hung ? 1 : 0;
  };
}

}  // namespace

Command add_sim_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("sim", "Simulated clusters: many nodes in one deterministic process");
  cmd->require_subcommand(1);
  auto* dht = cmd->add_subcommand("dht", "A simulated DHT: stores then gets under churn, latency and loss");
  // The flags set the scenario's fields, whose defaults are the command's.
  auto config = std::make_shared<sim::scenarios::DhtScenarioConfig>();
  auto latency = std::make_shared<std::string>("1-50");
  dht->add_option("--nodes", config->nodes, "Nodes in the swarm")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  dht->add_option("--churn", config->churn, "Fraction of nodes killed while storing and getting, in [0, 1)")
      ->check(CLI::Range(0.0, 0.999999))
      ->capture_default_str();
  dht->add_option("--latency-ms", *latency, "One-way latency range MIN-MAX in ms, drawn once per link")
      ->capture_default_str();
  dht->add_option("--loss", config->loss, "Probability that a message is lost, in [0, 1]")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  dht->add_option("--gets", config->gets, "Keys stored, then got back (one store and one get each)")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  dht->add_option("--seed", config->seed, "Seed of the run; the same seed gives the same trace hash")->capture_default_str();
  dht->add_flag("--replace", config->replace_killed, "Replace every killed node by a fresh joiner");
  auto averaging = add_averaging_command(*cmd);
  auto ps = add_ps_sim_command(*cmd);
  auto moe = add_moe_sim_command(*cmd);
  auto progress = add_progress_command(*cmd);
  auto calibrate = add_calibrate_command(*cmd);
  return [=]() {
    if (const int rc = calibrate(); rc >= 0) return rc;
    // A simulated swarm is hundreds of megabytes of small blocks read at random.
    heap_on_huge_pages();
    if (const int rc = averaging(); rc >= 0) return rc;
    if (const int rc = progress(); rc >= 0) return rc;
    if (const int rc = ps(); rc >= 0) return rc;
    if (const int rc = moe(); rc >= 0) return rc;
    auto range = parse_latency(*latency);
    if (!range) return fail("sim dht", range.error());
    config->min_latency = from_ms(range->min_ms);
    config->max_latency = from_ms(range->max_ms);
    config->keys = config->gets;
    // Wall-clock marks of each phase, read here: the simulation itself never reads a clock.
    std::map<sim::scenarios::DhtPhase, Clock::time_point> marks;
    config->on_phase = [&marks](sim::scenarios::DhtPhase p) { marks[p] = Clock::now(); };
    const Clock::time_point begin = Clock::now();
    auto report = sim::scenarios::run_dht_scenario(*config);
    const Clock::time_point end = Clock::now();
    config->on_phase = nullptr;
    if (!report) return fail("sim dht", report.error());
    using sim::scenarios::DhtPhase;
    std::printf("apiary sim dht: %zu nodes, churn %.3f%s, latency %s ms per link, loss %.4f, %zu keys\n",
                config->nodes, config->churn, config->replace_killed ? " (replaced)" : "", latency->c_str(),
                config->loss, config->gets);
    std::printf("%s", sim::scenarios::format_report(report.value()).c_str());
    std::printf("wall time:              %.2f s (bootstrap %.2f s, stores %.2f s, gets %.2f s)\n",
                seconds_between(begin, end), seconds_between(marks[DhtPhase::bootstrap], marks[DhtPhase::stores]),
                seconds_between(marks[DhtPhase::stores], marks[DhtPhase::gets]),
                seconds_between(marks[DhtPhase::gets], marks[DhtPhase::done]));
    std::printf("peak memory:            %.1f MiB\n", peak_rss_mib());
    return 0;
  };
}

}  // namespace apiary::apps
