// `apiary bench transport`: actor-to-actor RPC over UCX beside ucx_perftest and a bare
// UCX ping-pong from the same run. `bench transport-server` is its server side.
// `apiary bench dht`: N DHT nodes per process beside OpenDHT; `bench dht-child` is apiary's side.
// `apiary bench allreduce`: all-reduce beside Gloo and Open MPI; `bench allreduce-rank` is apiary's rank.
// `apiary bench ps`: PS steps beside both all-reduces; `bench ps-process` is a PS shard or a replica.
// `apiary bench experts`: MoE expert server throughput beside hivemind's; `bench experts-server` and
// `bench experts-client` are apiary's processes.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "apps/commands.hpp"
#ifdef APIARY_HAVE_TRANSPORT_BENCH
#include "bench/transport_bench.hpp"
#endif
#ifdef APIARY_HAVE_CODECS_BENCH
#include "bench/codecs_bench.hpp"
#endif
#ifdef APIARY_HAVE_DHT_BENCH
#include "bench/dht_bench.hpp"
#endif
#ifdef APIARY_HAVE_ALLREDUCE_BENCH
#include "bench/allreduce_bench.hpp"
#include "bench/allreduce_bench_apiary.hpp"
#include "bench/ps_bench.hpp"
#include "bench/ps_bench_process.hpp"
#endif
#ifdef APIARY_HAVE_EXPERTS_BENCH
#include "bench/experts_bench.hpp"
#endif

namespace apiary::apps {
namespace {

/// `bench dht` flags, held until the command runs (defaults: bench::DhtBenchOptions's).
struct DhtFlags {
  std::vector<std::size_t> nodes{32, 128, 256};
  std::size_t ops = 1000;
  std::vector<std::size_t> concs{1, 16};
  std::size_t reps = 1;
  bool latest = false;
  bool authorized = false;
  std::vector<std::string> systems{"apiary", "opendht"};
  std::string mode = "tcp";
  std::size_t per_gateway = 64;
  std::string host = "transport";
};

/// `bench allreduce` flags (defaults: bench::AllReduceBenchOptions's).
struct AllReduceFlags {
  std::vector<std::size_t> ranks{2, 4};
  std::vector<std::size_t> sizes{4096, 1048576, 16777216, 67108864};
  std::vector<std::string> systems{"apiary-tcp", "apiary-shm", "apiary-shm-poll", "gloo", "mpi-shm", "mpi-tcp"};
  std::int64_t part_size = std::int64_t{1} << 19;  // hivemind's and the Averager's (bench/README.md)
  bool quick = false;
  bool no_timers = false;
  bool keep_heap = false;
  bool one_timer = false;
  int busy_poll_us = 0;
};

/// Runs `main` (a benchmark's child process side) on the command line CLI11 left to
/// `sub` (a prefix command: its flags are parsed by the child itself), named as it.
template <class Main>
int run_child(Main main, CLI::App& sub) {
  std::vector<std::string> args = {sub.get_name()};
  for (auto& a : sub.remaining()) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return main(static_cast<int>(argv.size()), argv.data());
}

/// `bench experts` flags (defaults: bench::ExpertsBenchOptions's).
struct ExpertsFlags {
  std::vector<std::string> presets{"minimalistic", "ffn_small_batch", "default"};
  std::vector<std::string> systems{"apiary", "hivemind"};
  bool no_bound = false;
  bool no_latency = false;
  std::string python;
};

/// `bench experts` and its hidden child commands: which was parsed, and how to run it.
struct ExpertsBench {
  CLI::App* bench = nullptr;
  CLI::App* server = nullptr;
  CLI::App* client = nullptr;
  std::shared_ptr<ExpertsFlags> flags = std::make_shared<ExpertsFlags>();

  [[nodiscard]] bool parsed() const { return bench->parsed() || server->parsed() || client->parsed(); }
  [[nodiscard]] int run() const {
#ifdef APIARY_HAVE_EXPERTS_BENCH
    if (server->parsed()) return run_child(bench::run_experts_bench_server, *server);
    if (client->parsed()) return run_child(bench::run_experts_bench_client, *client);
    bench::ExpertsBenchOptions o;
    o.presets = flags->presets;
    o.systems = flags->systems;
    o.bound = !flags->no_bound;
    o.latency = !flags->no_latency;
    o.python = flags->python;
    return bench::run_experts_bench(o);
#else
    std::fprintf(stderr, "apiary bench: this build has no experts benchmark\n");
    return 1;
#endif
  }
};

ExpertsBench add_experts_bench(CLI::App& cmd) {
  ExpertsBench e;
  ExpertsFlags& f = *e.flags;
  e.bench = cmd.add_subcommand("experts", "MoE expert server samples/s (benchmark_throughput.py) vs hivemind and the bound");
  e.bench->add_option("--presets", f.presets, "Workloads to run")->delimiter(',')
      ->check(CLI::IsMember({"minimalistic", "ffn_small_batch", "default", "tiny"}))->capture_default_str();
  e.bench->add_option("--systems", f.systems, "Systems to run")->delimiter(',')
      ->check(CLI::IsMember({"apiary", "hivemind"}))->capture_default_str();
  e.bench->add_flag("--no-bound", f.no_bound, "Skip the in-process bounds");
  e.bench->add_flag("--no-latency", f.no_latency, "Skip the batch-1 overhead");
  e.bench->add_option("--hivemind-python", f.python,
                      "hivemind's interpreter (default: $APIARY_HIVEMIND_PYTHON, else <build>/hivemind-venv/bin/python)");
  for (auto** child : {&e.server, &e.client}) {
    *child = cmd.add_subcommand(child == &e.server ? "experts-server" : "experts-client",
                                "apiary side of `bench experts` (started by it)");
    (*child)->prefix_command();  // its flags are parsed by the child itself
    (*child)->group("");         // internal: hidden from --help
  }
  return e;
}

}  // namespace

Command add_bench_commands(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Benchmarks, printed beside established peers from the same run");
  cmd->require_subcommand(1);
  auto* transport = cmd->add_subcommand("transport", "RPC round trip, calls/s and bandwidth vs ucx_perftest and bare UCX");
  auto modes = std::make_shared<std::vector<std::string>>(std::vector<std::string>{"tcp", "shm"});
  auto busy = std::make_shared<bool>(false);
  auto quick = std::make_shared<bool>(false);
  transport->add_option("--modes", *modes, "UCX modes to measure")->check(CLI::IsMember({"tcp", "shm"}))->capture_default_str();
  transport->add_flag("--busy-poll", *busy, "Also measure with busy polling (costs a core per process)");
  transport->add_flag("--quick", *quick, "Small iteration counts (a smoke test, not a measurement)");
  auto* server = cmd->add_subcommand("transport-server", "Server side of `bench transport` (started by it)");
  auto server_mode = std::make_shared<std::string>("tcp");
  auto server_busy = std::make_shared<bool>(false);
  server->add_option("--mode", *server_mode)->check(CLI::IsMember({"tcp", "shm"}));
  server->add_flag("--busy", *server_busy);
  auto server_direct = std::make_shared<bool>(false);
  server->add_flag("--direct", *server_direct, "serve the echo from a role on the transport thread");
  auto server_secure = std::make_shared<bool>(false);
  server->add_flag("--secure", *server_secure, "encrypted connections (else --insecure)");
  auto server_authority = std::make_shared<std::string>();
  server->add_option("--authority", *server_authority, "authorize every call with this swarm authority key file");
  auto secure = std::make_shared<bool>(false);
  transport->add_flag("--secure", *secure,
                      "Also measure encrypted connections beside plaintext (--insecure) ones: RTT added, bandwidth ratio");
  server->group("");  // internal: hidden from --help
  auto* codecs = cmd->add_subcommand("codecs", "Tensor codec encode/decode GB/s on randn float32, one core, vs memcpy");
  auto codecs_options = std::make_shared<std::pair<std::size_t, std::size_t>>(64, 3);
  codecs->add_option("--mib", codecs_options->first, "Input size in MiB")->check(CLI::Range(1, 4096))->capture_default_str();
  codecs->add_option("--repeat", codecs_options->second, "Timed runs per figure (best is shown)")->check(CLI::Range(1, 100))->capture_default_str();
  auto* dht = cmd->add_subcommand("dht", "N DHT nodes in one process: put/get latency, success, memory vs OpenDHT");
  auto df = std::make_shared<DhtFlags>();
  dht->add_option("--nodes", df->nodes, "Node counts, one child process per system and count")
      ->delimiter(',')->check(CLI::Range(2, 100000))->capture_default_str();
  dht->add_option("--ops", df->ops, "Puts, then as many gets, per concurrency level")
      ->check(CLI::Range(1, 1000000))->capture_default_str();
  dht->add_option("--conc", df->concs, "Operations in flight")
      ->delimiter(',')->check(CLI::Range(1, 1024))->capture_default_str();
  dht->add_option("--reps", df->reps, "Child runs per system and count (medians shown)")
      ->check(CLI::Range(1, 100))->capture_default_str();
  dht->add_flag("--latest", df->latest, "apiary gets ask every replica (get(key, latest=true))");
  dht->add_flag("--authorized", df->authorized,
                "apiary nodes authorize every call (members of one swarm authority: tokens and signatures)");
  dht->add_option("--systems", df->systems, "Systems to run")
      ->delimiter(',')->check(CLI::IsMember({"apiary", "opendht"}))->capture_default_str();
  dht->add_option("--mode", df->mode, "apiary's UCX lanes between the in-process nodes")
      ->check(CLI::IsMember({"tcp", "shm"}))->capture_default_str();
  dht->add_option("--host", df->host, "apiary nodes' role host: its own actor, or the transport's thread")
      ->check(CLI::IsMember({"actor", "transport"}));
  dht->add_option("--per-gateway", df->per_gateway,
                  "apiary nodes sharing one gateway (one transport, one connection per pair of gateways); "
                  "1 = a gateway per node, like a process per node")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  auto* dht_child = cmd->add_subcommand("dht-child", "apiary side of `bench dht` (started by it)");
  dht_child->prefix_command();  // its flags are parsed by the child itself
  dht_child->group("");         // internal: hidden from --help
  auto* allreduce = cmd->add_subcommand("allreduce", "float32 all-reduce, 2 and 4 processes: apiary vs Gloo ring and Open MPI");
  auto ar = std::make_shared<AllReduceFlags>();
  allreduce->add_option("--ranks", ar->ranks, "Group sizes")->delimiter(',')->check(CLI::Range(2, 64))->capture_default_str();
  allreduce->add_option("--sizes", ar->sizes, "Buffer sizes in bytes (multiples of 4)")->delimiter(',')->capture_default_str();
  allreduce->add_option("--systems", ar->systems, "Systems to run")->delimiter(',')
      ->check(CLI::IsMember({"apiary-tcp", "apiary-shm", "apiary-shm-dev", "apiary-shm-poll", "gloo", "mpi-shm", "mpi-tcp"}))->capture_default_str();
  allreduce->add_option("--part-size", ar->part_size, "apiary's part size in bytes")->check(CLI::Range(64, 1 << 30))->capture_default_str();
  allreduce->add_flag("--quick", ar->quick, "About a tenth of the iterations (a smoke run, under 2 min)");
  allreduce->add_flag("--no-timers", ar->no_timers, "apiary ranks drop the runner's fault timers (profiling only)");
  allreduce->add_flag("--keep-heap", ar->keep_heap, "apiary ranks keep freed memory in the heap (no fresh page faults per op)");
  allreduce->add_flag("--one-timer", ar->one_timer, "apiary ranks keep the runner's timers behind one CAF wake-up");
  allreduce->add_option("--busy-poll-us", ar->busy_poll_us, "apiary ranks' transport busy-polls this long before sleeping")
      ->check(CLI::Range(0, 100000))->capture_default_str();
  auto* allreduce_rank = cmd->add_subcommand("allreduce-rank", "apiary rank of `bench allreduce` (started by it)");
  allreduce_rank->prefix_command();  // its flags are parsed by the rank itself
  allreduce_rank->group("");         // internal: hidden from --help
  auto* ps = cmd->add_subcommand("ps", "PS steps, N replicas x 1 and 2 shards, vs the UCX bound and both all-reduces");
  auto pf = std::make_shared<std::tuple<std::size_t, std::vector<std::size_t>, std::size_t, bool, std::string>>(
      100, std::vector<std::size_t>{1, 2}, 4, false, "tcp");
  ps->add_option("--model-mb", std::get<0>(*pf), "Model size, MiB of float32")->check(CLI::Range(1, 4096))->capture_default_str();
  ps->add_option("--shards", std::get<1>(*pf), "PS shard counts")->check(CLI::Range(1, 64))->capture_default_str();
  ps->add_option("--replicas", std::get<2>(*pf), "Replica processes")->check(CLI::Range(2, 64))->capture_default_str();
  ps->add_flag("--quick", std::get<3>(*pf), "Fewer steps and iterations (a smoke run, under 2 min)");
  ps->add_option("--mode", std::get<4>(*pf), "UCX lanes of apiary's processes and of the bound's bandwidth")
      ->check(CLI::IsMember({"tcp", "shm"}))->capture_default_str();
  auto* ps_process = cmd->add_subcommand("ps-process", "PS shard or replica of `bench ps` (started by it)");
  ps_process->prefix_command();  // its flags are parsed by the process itself
  ps_process->group("");         // internal: hidden from --help
  auto experts = add_experts_bench(*cmd);
  return [=]() {
    if (experts.parsed()) return experts.run();
    if (ps->parsed() || ps_process->parsed()) {
#ifdef APIARY_HAVE_ALLREDUCE_BENCH
      if (ps_process->parsed()) return run_child(bench::run_ps_bench_process, *ps_process);
      bench::PsBenchOptions o;
      std::tie(o.model_mb, o.shards, o.replicas, o.quick, o.mode) = *pf;
      return bench::run_ps_bench(o);
#else
      std::fprintf(stderr, "apiary bench: this build has no PS benchmark\n");
      return 1;
#endif
    }
    if (allreduce->parsed() || allreduce_rank->parsed()) {
#ifdef APIARY_HAVE_ALLREDUCE_BENCH
      if (allreduce_rank->parsed()) return run_child(bench::run_allreduce_rank, *allreduce_rank);
      bench::AllReduceBenchOptions o;
      o.ranks = ar->ranks;
      o.sizes = ar->sizes;
      o.systems = ar->systems;
      o.part_size_bytes = ar->part_size;
      o.quick = ar->quick;
      o.timers = !ar->no_timers;
      o.keep_heap = ar->keep_heap;
      o.one_timer = ar->one_timer;
      o.busy_poll_us = ar->busy_poll_us;
      if (o.quick) o.quiet_wait_s = 5;
      return bench::run_allreduce_bench(o);
#else
      std::fprintf(stderr, "apiary bench: this build has no all-reduce benchmark\n");
      return 1;
#endif
    }
    if (dht->parsed() || dht_child->parsed()) {
#ifdef APIARY_HAVE_DHT_BENCH
      if (dht_child->parsed()) return run_child(bench::run_dht_bench_apiary_child, *dht_child);
      bench::DhtBenchOptions o;
      o.nodes = df->nodes;
      o.ops = df->ops;
      o.concs = df->concs;
      o.reps = df->reps;
      o.latest = df->latest;
      o.authorized = df->authorized;
      o.systems = df->systems;
      o.mode = df->mode;
      o.per_gateway = df->per_gateway;
      o.host = df->host;
      return bench::run_dht_bench(o);
#else
      std::fprintf(stderr, "apiary bench: this build has no DHT benchmark\n");
      return 1;
#endif
    }
    if (codecs->parsed()) {
#ifdef APIARY_HAVE_CODECS_BENCH
      return bench::run_codecs_bench({codecs_options->first, codecs_options->second});
#else
      std::fprintf(stderr, "apiary bench: this build has no codecs benchmark\n");
      return 1;
#endif
    }
#ifdef APIARY_HAVE_TRANSPORT_BENCH
    if (server->parsed())
      return bench::run_transport_bench_server(*server_mode, *server_busy, *server_direct, *server_secure,
                                               *server_authority);
    bench::TransportBenchOptions o;
    o.modes = *modes;
    o.busy_poll = *busy;
    o.secure = *secure;
    o.quick = *quick;
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    o.self_exe = n > 0 ? std::string(self, static_cast<std::size_t>(n)) : "apiary";
    return bench::run_transport_bench(o);
#else
    std::fprintf(stderr, "apiary bench: this build has no transport benchmark\n");
    return 1;
#endif
  };
}

}  // namespace apiary::apps
