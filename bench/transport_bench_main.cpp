// apiary_transport_bench: `apiary bench transport` as a standalone tool (same code, same
// output). It is also its own server side:
//   apiary_transport_bench [--modes tcp,shm] [--busy] [--quick] [--rtt-iters N] ...
//   apiary_transport_bench bench transport-server --mode tcp|shm [--busy] [--direct] [--secure]
#include <sstream>

#include <CLI/CLI.hpp>

#include "bench/transport_bench.hpp"

int main(int argc, char** argv) {
  // The server side, spawned by the client side as `<exe> bench transport-server ...`.
  if (argc >= 3 && std::string(argv[1]) == "bench" && std::string(argv[2]) == "transport-server") {
    CLI::App server{"Serve the transport benchmark's handles until stdin closes."};
    std::string mode = "tcp";
    bool busy = false;
    server.add_option("--mode", mode, "tcp or shm")->check(CLI::IsMember({"tcp", "shm"}));
    server.add_flag("--busy", busy, "busy-poll 50 us before sleeping");
    bool direct = false;
    server.add_flag("--direct", direct, "serve the echo from a role on the transport thread");
    bool secure = false;
    server.add_flag("--secure", secure, "encrypted connections (else --insecure)");
    std::string authority;
    server.add_option("--authority", authority, "authorize every call with this swarm authority key file");
    try {
      server.parse(argc - 2, argv + 2);
    } catch (const CLI::ParseError& e) {
      return server.exit(e);
    }
    return apiary::bench::run_transport_bench_server(mode, busy, direct, secure, authority);
  }

  CLI::App app{"apiary's RPC figures between two processes on 127.0.0.1, beside bare UCX and ucx_perftest "
               "measured in the same run."};
  apiary::bench::TransportBenchOptions o;
  std::string modes = "tcp,shm";
  app.add_option("--modes", modes, "comma-separated transports: tcp, shm");
  app.add_option("--rtt-iters", o.rtt_iters, "sequential 64 B round trips");
  app.add_option("--rate-calls", o.rate_calls, "calls timed for calls/s");
  app.add_option("--in-flight", o.rate_in_flight, "calls in flight for calls/s");
  app.add_option("--bw-size", o.bw_size, "bytes per bandwidth payload");
  app.add_option("--bw-iters", o.bw_iters, "bandwidth payloads");
  app.add_flag("--busy", o.busy_poll, "also measure with 50 us busy-poll on both sides");
  app.add_flag("--quick", o.quick, "small counts (smoke test)");
  app.add_flag("--secure", o.secure, "also measure encrypted connections beside plaintext ones");
  app.add_option("--self-exe", o.self_exe, "executable running the server side (default: this one)");
  CLI11_PARSE(app, argc, argv);
  o.modes.clear();
  std::istringstream in(modes);
  for (std::string m; std::getline(in, m, ',');)
    if (!m.empty()) o.modes.push_back(m);
  return apiary::bench::run_transport_bench(o);
}
