// `apiary bench transport`: actor-to-actor RPC over UCX beside ucx_perftest and a bare
// UCX ping-pong from the same run. `bench transport-server` is its server side.
#include <unistd.h>

#include <cstdio>

#include "apps/commands.hpp"
#ifdef APIARY_HAVE_TRANSPORT_BENCH
#include "bench/transport_bench.hpp"
#endif

namespace apiary::apps {

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
  server->group("");  // internal: hidden from --help
  return [=]() {
#ifdef APIARY_HAVE_TRANSPORT_BENCH
    if (server->parsed()) return bench::run_transport_bench_server(*server_mode, *server_busy);
    bench::TransportBenchOptions o;
    o.modes = *modes;
    o.busy_poll = *busy;
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
