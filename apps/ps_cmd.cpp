// `apiary ps`: parameter-server training as standalone processes. One process per PS
// device (--role ps) serves the shards the strategy places there; one process per
// replica (--role chief for replica 0, --role worker for the others) trains the
// built-in logistic-regression model, pulling parameters and pushing gradients each step.
// --embedded runs the whole job (every PS device and every replica) in this one process,
// on one actor system, each role on its own in-process gateway. An all-reduce strategy
// has no PS role: its replicas average gradients among themselves (apps/ps_allreduce.hpp).
// A mixed strategy (Parallax) has both: PS processes serve its PS variables, and the
// replicas also average the all-reduced ones among themselves (apps/ps_mixed.hpp).
// Processes find each other by --peers or through the job's DHT (apps/ps_discovery.hpp).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/ps/proxy_actor.hpp"
#include "api/parameter_server.hpp"
#include "api/runtime.hpp"
#include "apps/commands.hpp"
#include "apps/ps_allreduce.hpp"
#include "apps/ps_checkpoint.hpp"
#include "apps/ps_discovery.hpp"
#include "apps/ps_mixed.hpp"
#include "apps/ps_roles.hpp"
#include "core/collective/ar_plan.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/ps/plan.hpp"
#include "core/strategy/resource_spec.hpp"
#include "core/strategy/strategy_io.hpp"
#include "core/strategy/validate.hpp"
#include "messages/identity/multiaddr.hpp"

namespace apiary::apps {

namespace cps = core::ps;
namespace cs = core::strategy;

namespace ps_roles {


/// Prints `e` for the command and returns the exit code (2 for bad input, 1 otherwise).
int fail(const Error& e) {
  std::fprintf(stderr, "apiary ps: %s\n", e.what().c_str());
  return e.code == errc::invalid_argument ? 2 : 1;
}

cps::OptimizerConfig optimizer_of(const PsArgs& a) {
  cps::OptimizerConfig opt;
  opt.learning_rate = a.learning_rate;
  opt.kind = a.optimizer == "adam"       ? cps::OptimizerKind::adam
             : a.optimizer == "momentum" ? cps::OptimizerKind::momentum
                                         : cps::OptimizerKind::sgd;
  return opt;
}


/// Splits "host:port" ("[v6]:port" too). Errors: invalid_argument.
Result<std::pair<std::string, std::uint16_t>> split_host_port(const std::string& text, const char* what) {
  auto m = messages::Multiaddr::from_host_port(text, what);
  if (!m) return m.error();
  return std::make_pair(m->host, m->port);
}

/// The training plan from the files, checked against the model and the cluster; of the
/// strategy's PS part only when `ps_only` (a mixed strategy), with the variables in
/// `sparse` marked sparse.
Result<cps::TrainingPlan> load_plan(const PsArgs& a, bool ps_only = false, const std::vector<std::string>& sparse = {}) {
  auto bytes = read_file(a.strategy, "strategy");
  if (!bytes) return bytes.error();
  auto strategy =
      cs::parse_strategy(*bytes, a.text ? cs::StrategyFormat::text : cs::StrategyFormat::binary, a.strategy);
  if (!strategy) return strategy.error();
  auto spec_text = read_file(a.resource_spec, "resource spec");
  if (!spec_text) return spec_text.error();
  auto spec = cs::parse_resource_spec(*spec_text, a.resource_spec);
  if (!spec) return spec.error();
  auto item = cps::logistic_graph_item(a.features);
  for (auto& v : item.variables) {
    v.sparse = v.sparse || std::find(sparse.begin(), sparse.end(), v.name) != sparse.end();
  }
  if (auto valid = cs::validate(*strategy, item, *spec); !valid) {
    return make_error(errc::invalid_argument, "{}: {} (the model is logistic regression: {} [{}] and {} [1])",
                      a.strategy, valid.error().message, cps::k_logreg_weights, a.features, cps::k_logreg_bias);
  }
  return cps::plan_training(ps_only ? core::collective::ps_part(*strategy) : *strategy, item, optimizer_of(a));
}

/// --peers DEVICE=HOST:PORT entries.
Result<std::map<std::string, actors::PeerKey>> parse_peers(const std::vector<std::string>& peers) {
  std::map<std::string, actors::PeerKey> out;
  for (const auto& p : peers) {
    const auto eq = p.find('=');
    if (eq == std::string::npos) {
      return make_error(errc::invalid_argument,
                        "--peers: expected DEVICE=HOST:PORT such as "
                        "localhost:CPU:0=127.0.0.1:7000, got '{}'",
                        p);
    }
    if (auto hp = split_host_port(p.substr(eq + 1), "--peers"); !hp) return hp.error();
    out[p.substr(0, eq)] = p.substr(eq + 1);
  }
  return out;
}

/// Set when stdin closed under --stop-on-stdin-eof.
std::atomic<bool> g_stdin_closed{false};

/// Watches stdin: at its end, sets g_stdin_closed and raises SIGTERM (which a PS process
/// waits for; replicas check the flag between steps). A parent holding the pipe stops
/// the process by closing it, or by dying.
void watch_stdin() {
  std::thread([] {
    char buf[256];
    while (std::fread(buf, 1, sizeof buf, stdin) > 0) {
    }
    g_stdin_closed = true;
    ::kill(::getpid(), SIGTERM);
  }).detach();
}

Result<std::unique_ptr<Runtime>> start_runtime(const std::string& host_port, const std::string& mode) {
  auto hp = split_host_port(host_port, "--listen");
  if (!hp) return hp.error();
  auto listen = messages::Multiaddr::from_ip(hp->first, hp->second);
  if (!listen) return make_error(errc::invalid_argument, "--listen: {}", listen.error().message);
  RuntimeOptions ro;
  ro.listen = listen->to_string();
  ro.mode = mode == "shm" ? transport::Mode::shm : transport::Mode::tcp;
  return Runtime::start(ro);
}

ParameterServerOptions ps_options(const PsArgs& a, const cps::TrainingPlan& plan, const std::string& device) {
  ParameterServerOptions o;
  o.device = device;
  o.plan = std::make_shared<const cps::TrainingPlan>(plan);
  o.initial = a.restored ? a.restored->values : cps::logistic_initial(a.features);
  if (a.restored && restores_optimizer(*a.restored, optimizer_of(a).kind)) o.states = a.restored->states;
  return o;
}

int run_ps(const PsArgs& a, const cps::TrainingPlan& plan) {
  auto started_rt = start_runtime(a.listen, a.mode);
  if (!started_rt) return fail(started_rt.error());
  Runtime& rt = **started_rt;
  auto ps = ParameterServer::start(rt, ps_options(a, plan, a.device));
  if (!ps) {
    rt.stop();
    return fail(ps.error());
  }
  // The job's DHT node (the first PS process bootstraps it), publishing this PS's address.
  auto dht = start_job_dht(rt.system(), rt.gateway(), a.initial_peers);
  if (!dht) {
    ps->reset();
    rt.stop();
    return fail(dht.error());
  }
  auto publisher = std::make_unique<Publisher>(**dht);
  publisher->add(ps_key(a.job, a.device), rt.gateway()->address());
  std::printf("ps %s listening %s shards %s\n", a.device.c_str(), rt.gateway()->address().c_str(),
              (*ps)->shard_names().c_str());
  std::printf("ps %s dht %s key %s\n", a.device.c_str(), (*dht)->address().to_string().c_str(),
              ps_key(a.job, a.device).c_str());
  std::fflush(stdout);
  if (a.stdin_stops) watch_stdin();
  const int sig = wait_for_shutdown_signal();
  std::printf("ps %s stopping on %s\n", a.device.c_str(), sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stdout);
  publisher.reset();
  (*dht)->stop();
  ps->reset();
  rt.stop();
  return 0;
}

int run_replica(const PsArgs& a, cps::TrainingPlan plan, const AllReducePart& ar) {
  const std::int32_t id = a.role == "chief" ? 0 : a.replica;
  if (a.role == "worker" && id <= 0) {
    return fail(make_error(errc::invalid_argument,
                           "--replica: expected a worker's replica id 1..{}, got {} "
                           "(replica 0 is the chief)",
                           static_cast<std::int64_t>(plan.replicas.size()) - 1, id));
  }
  auto servers = parse_peers(a.peers);
  if (!servers) return fail(servers.error());
  // --peers proxy:<node>=HOST:PORT name node proxies; PS devices without an entry are
  // looked up in the DHT.
  std::map<std::string, std::string> proxies;
  auto wanted = split_peers(a, plan, *servers, proxies);
  if (!wanted) return fail(wanted.error());
  auto started_rt = start_runtime(a.listen, a.mode);
  if (!started_rt) return fail(started_rt.error());
  Runtime& rt = **started_rt;
  // The job's DHT node, when there is one to join: finds the PS devices not in --peers.
  std::unique_ptr<Dht> dht;
  std::unique_ptr<Publisher> publisher;
  auto stop_all = [&] {
    publisher.reset();
    if (dht) dht->stop();
    rt.gateway()->stop();
  };
  if (!a.initial_peers.empty()) {
    auto started = start_job_dht(rt.system(), rt.gateway(), a.initial_peers);
    if (!started) {
      stop_all();
      return fail(started.error());
    }
    dht = std::move(*started);
    publisher = std::make_unique<Publisher>(*dht);
  }
  if (!wanted->empty()) {
    auto found = find_addresses(*dht, *wanted, std::chrono::milliseconds(a.timeout_ms), "PS device",
                                fmt::format("start a PS process for each (apiary ps --role ps --device DEVICE) with "
                                            "--job {} and --initial-peers of the same DHT, or give --peers "
                                            "DEVICE=HOST:PORT",
                                            a.job));
    if (!found) {
      stop_all();
      return fail(found.error());
    }
    servers->insert(found->begin(), found->end());
  }
  auto proxy =
      setup_node_proxy(a, plan, id, *servers, proxies, rt.system(), rt.gateway(), dht.get(), publisher.get());
  if (!proxy) {
    stop_all();
    return fail(proxy.error());
  }
  const std::size_t replicas = plan.replicas.size();
  auto replica = start_replica(a, rt.system(), rt.gateway(), id, &plan, *servers, proxy->pull_via, ar, "apiary.ps.mixed");
  if (!replica) {
    proxy->expected_reads = 0;
    finish_node_proxy(a, *proxy, *rt.gateway());
    stop_all();
    return fail(replica.error());
  }
  std::printf("replica %d of %zu (%s) listening %s: %lld steps of %zu samples\n", id, replicas, a.role.c_str(),
              rt.gateway()->address().c_str(), static_cast<long long>(a.steps), a.batch);
  std::fflush(stdout);
  if (a.stdin_stops) watch_stdin();
  const int rc = train(a, **replica, replicas, ar.plan != nullptr);
  replica->reset();
  if (rc != 0) proxy->expected_reads = 0;  // a failed job: do not wait for the others' reads
  finish_node_proxy(a, *proxy, *rt.gateway());
  stop_all();
  return rc;
}

}  // namespace ps_roles

using namespace ps_roles;

Command add_ps_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ps",
                                 "Parameter-server training: a PS process, or a replica training logistic "
                                 "regression on synthetic data");
  auto a = std::make_shared<PsArgs>();
  cmd->add_option("--role", a->role,
                  "ps (serve a PS device's shards), chief (replica 0) or worker; required unless --embedded")
      ->check(CLI::IsMember({"ps", "chief", "worker"}));
  cmd->add_option("--strategy", a->strategy, "Strategy file (see `apiary strategy build`; binary unless --text)")
      ->required();
  cmd->add_flag("--text", a->text, "The strategy file is protobuf text format");
  cmd->add_option("--resource-spec", a->resource_spec, "resource_spec.yml the strategy was built for")->required();
  cmd->add_option("--listen", a->listen, "Listen address host:port (port 0: any)")->capture_default_str();
  cmd->add_option("--peers", a->peers,
                  "Replicas: DEVICE=HOST:PORT of every PS device, e.g. "
                  "localhost:CPU:0=127.0.0.1:7000 (those missing are looked up in the DHT, see --initial-peers), "
                  "and proxy:NODE=HOST:PORT of the node's proxy (local_replication); with an all-reduce "
                  "strategy, of every replica device; with a mixed strategy (Parallax), also "
                  "replica:DEVICE=HOST:PORT of every replica device")
      ->expected(0, -1);
  cmd->add_option("--initial-peers", a->initial_peers,
                  "Multiaddrs (with /p2p/) of the job's DHT nodes, e.g. the one a PS process prints as "
                  "'ps DEVICE dht MULTIADDR'; replicas find the PS devices not in --peers there. The first "
                  "PS process starts without it")
      ->expected(0, -1);
  cmd->add_option("--job", a->job, "Name of the job in the DHT: addresses live under <job>.ps.<device>")
      ->check([](const std::string& v) {
        return v.empty() || v.find_first_of(" \t\n") != std::string::npos ? "expected a non-empty name without blanks"
                                                                           : std::string{};
      })
      ->capture_default_str();
  cmd->add_option("--device", a->device, "PS role: the PS device this process serves, e.g. localhost:CPU:0");
  cmd->add_option("--replica", a->replica, "Worker role: replica id 1..R-1 (graph_config.replicas order)");
  cmd->add_option("--steps", a->steps, "Training steps")->check(CLI::Range(0, 1000000))->capture_default_str();
  cmd->add_option("--batch", a->batch, "Samples per replica per step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--samples", a->samples, "Samples in the synthetic data set")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--features", a->features, "Features per sample")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the synthetic data")->capture_default_str();
  cmd->add_option("--optimizer", a->optimizer, "PS role, and replicas of all-reduce and mixed strategies (same value everywhere): sgd, momentum or adam")
      ->check(CLI::IsMember({"sgd", "momentum", "adam"}))
      ->capture_default_str();
  cmd->add_option("--learning-rate", a->learning_rate, "PS role, and replicas of all-reduce and mixed strategies (same value everywhere): step size")
      ->capture_default_str();
  cmd->add_option("--timeout-ms", a->timeout_ms, "Replicas: deadline of each pull and push (ms)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{86400000}))
      ->capture_default_str();
  cmd->add_option("--step-delay-ms", a->step_delay_ms, "Replicas: extra time per step (ms), to make a straggler")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{3600000}))
      ->capture_default_str();
  cmd->add_flag("--embedded", a->embedded,
                "Run the whole job in this process: every PS device and every replica (no --role, --peers)");
  cmd->add_flag("--stop-on-stdin-eof", a->stdin_stops, "Stop when stdin closes (for a parent that holds the pipe)");
  cmd->add_option("--save", a->save,
                  "The chief writes a checkpoint here after the last step (every variable whole, however the "
                  "strategy partitions it); other roles ignore it");
  cmd->add_option("--save-every", a->save_every,
                  "With --save: the chief also writes a checkpoint at the start of every step that is a multiple of "
                  "this (put {step} in the --save path to keep each)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1000000}));
  cmd->add_option("--restore", a->restore,
                  "Start from this checkpoint (written by --save, with any strategy for the same model); every "
                  "role of the job takes the same file");
  cmd->add_option("--mode", a->mode, "Same-host lanes: tcp or shm")
      ->check(CLI::IsMember({"tcp", "shm"}))
      ->capture_default_str();
  auto sparse = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--sparse", *sparse,
                  "All-reduce and mixed strategies: a variable whose gradient is sparse (the rows it touches: "
                  "all-gathered and averaged under all-reduce, pushed as rows to a PS), e.g. logreg/w:0; repeatable");
  return [a, sparse]() {
    block_shutdown_signals();
    if (a->save_every > 0 && a->save.empty()) {
      return fail(make_error(errc::invalid_argument, "--save-every {}: expected --save PATH too", a->save_every));
    }
    if (a->embedded != a->role.empty()) {
      return fail(make_error(errc::invalid_argument, "expected exactly one of --role and --embedded, got {}",
                             a->embedded ? "both" : "neither"));
    }
    // An all-reduce strategy runs without PS processes (apps/ps_allreduce.hpp).
    auto ar_plan = load_allreduce_plan(a->strategy, a->text, a->resource_spec, a->features, *sparse);
    if (!ar_plan) return fail(ar_plan.error());
    if (!a->restore.empty()) {
      auto restored = read_checkpoint(a->restore, model_variables(a->features));
      if (!restored) return fail(restored.error());
      a->restored = std::move(*restored);
      note_optimizer_change(*a->restored, optimizer_of(*a).kind);
    }
    if (*ar_plan && (*ar_plan)->ps_variables.empty()) {
      if (a->stdin_stops) watch_stdin();
      return run_allreduce_job(*a, **ar_plan);
    }
    if (*ar_plan) {
      // A mixed strategy: PS processes serve its PS part, replicas also all-reduce
      // (apps/ps_mixed.hpp).
      auto ps_plan = load_plan(*a, true, *sparse);
      if (!ps_plan) return fail(ps_plan.error());
      if (a->role == "ps") return run_ps(*a, *ps_plan);
      return run_mixed_job(*a, **ar_plan, std::move(*ps_plan));
    }
    auto plan = load_plan(*a);
    if (!plan) return fail(plan.error());
    if (a->embedded) return run_embedded(*a, *plan);
    if (a->role == "ps") return run_ps(*a, *plan);
    return run_replica(*a, std::move(*plan));
  };
}

}  // namespace apiary::apps
