// `apiary bench transport`: actor-to-actor RPC over UCX beside ucx_perftest and a bare
// UCX ping-pong from the same run. `bench transport-server` is its server side.
#include <unistd.h>

#include <cstdio>

#include "apps/commands.hpp"
#ifdef APIARY_HAVE_TRANSPORT_BENCH
#include "bench/transport_bench.hpp"
#endif
#ifdef APIARY_HAVE_CODECS_BENCH
#include "bench/codecs_bench.hpp"
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
  auto* codecs = cmd->add_subcommand("codecs", "Tensor codec encode/decode GB/s on randn float32, one core, vs memcpy");
  auto codecs_options = std::make_shared<std::pair<std::size_t, std::size_t>>(64, 3);
  codecs->add_option("--mib", codecs_options->first, "Input size in MiB")->check(CLI::Range(1, 4096))->capture_default_str();
  codecs->add_option("--repeat", codecs_options->second, "Timed runs per figure (best is shown)")->check(CLI::Range(1, 100))->capture_default_str();
  return [=]() {
    if (codecs->parsed()) {
#ifdef APIARY_HAVE_CODECS_BENCH
      return bench::run_codecs_bench({codecs_options->first, codecs_options->second});
#else
      std::fprintf(stderr, "apiary bench: this build has no codecs benchmark\n");
      return 1;
#endif
    }
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
