// `apiary node`: serve until SIGINT/SIGTERM, then print the RTT table and exit cleanly.
#include <csignal>
#include <atomic>
#include <cstdio>
#include <thread>

#include "api/node.hpp"
#include "apps/commands.hpp"

namespace apiary::apps {

void block_shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

const char* wait_for_shutdown_signal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig == SIGINT ? "SIGINT" : "SIGTERM";
}

int fail(const char* command, const Error& e) {
  std::fprintf(stderr, "apiary %s: %s\n", command, e.what().c_str());
  return e.code == errc::invalid_argument ? 2 : 1;
}

Command add_node_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("node", "Run a node: listen, find the swarm from bootstrap peers, ping them");
  auto opts = std::make_shared<NodeOptions>();
  auto mode = std::make_shared<std::string>("tcp");
  auto interval_ms = std::make_shared<int>(1000);
  auto report_s = std::make_shared<double>(0);
  cmd->add_option("--listen", opts->listen, "Listen multiaddr, e.g. /ip4/127.0.0.1/tcp/0")->capture_default_str();
  cmd->add_option("--identity", opts->identity_file,
                  "Ed25519 key file (see `apiary identity create`); default: a fresh key for this run");
  cmd->add_option("--bootstrap", opts->bootstrap, "Multiaddrs of peers to start from")->expected(0, -1);
  cmd->add_option("--mode", *mode, "Same-host lanes: tcp (UCX detects dead peers) or shm (shared memory)")
      ->check(CLI::IsMember({"tcp", "shm"}))
      ->capture_default_str();
  add_insecure_flag(*cmd, opts->insecure);
  add_authority_option(*cmd, opts->authorization.authority_file);
  add_host_option(*cmd, opts->host);
  cmd->add_option("--ping-interval", *interval_ms, "Milliseconds between ping rounds")
      ->check(CLI::Range(10, 3600000))
      ->capture_default_str();
  cmd->add_option("--report-every", *report_s, "Also print the RTT table every this many seconds (0: only at exit)")
      ->check(CLI::Range(0.0, 86400.0));
  return [opts, mode, interval_ms, report_s]() {
    block_shutdown_signals();
    opts->mode = transport_mode(*mode);
    opts->ping_interval = std::chrono::milliseconds(*interval_ms);
    auto node = Node::start(*opts);
    if (!node) return fail("node", node.error());
    std::printf("listening %s\n", (*node)->address().to_string().c_str());
    std::fflush(stdout);
    std::atomic<bool> done{false};
    std::thread reporter;
    if (*report_s > 0) {
      reporter = std::thread([&] {
        auto next = std::chrono::steady_clock::now();
        while (!done) {
          next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(*report_s));
          while (!done && std::chrono::steady_clock::now() < next) std::this_thread::sleep_for(std::chrono::milliseconds(20));
          if (!done) {
            std::printf("%s", (*node)->rtt_table().c_str());
            std::fflush(stdout);
          }
        }
      });
    }
    const char* sig = wait_for_shutdown_signal();
    done = true;
    if (reporter.joinable()) reporter.join();
    std::printf("%s", (*node)->rtt_table().c_str());
    std::printf("stopping on %s\n", sig);
    std::fflush(stdout);
    (*node)->stop();
    return 0;
  };
}

}  // namespace apiary::apps
