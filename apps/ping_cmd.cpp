// `apiary ping MULTIADDR [-c N]`: probe a node over UCX and print round-trip times.
#include <algorithm>
#include <cstdio>
#include <thread>

#include "api/node.hpp"
#include "apps/commands.hpp"
#include "messages/identity/multiaddr.hpp"

namespace apiary::apps {

Command add_ping_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("ping", "Probe a node and print round-trip times; exits 1 if it never answers");
  auto target = std::make_shared<std::string>();
  auto count = std::make_shared<int>(4);
  auto timeout_ms = std::make_shared<int>(2000);
  auto interval_ms = std::make_shared<int>(200);
  auto mode = std::make_shared<std::string>("tcp");
  cmd->add_option("address", *target, "Multiaddr of the node, e.g. /ip4/127.0.0.1/tcp/4100/p2p/12D3KooW...")->required();
  cmd->add_option("-c,--count", *count, "Number of probes")->check(CLI::Range(1, 1000000))->capture_default_str();
  cmd->add_option("--timeout", *timeout_ms, "Deadline of each probe in milliseconds")
      ->check(CLI::Range(1, 600000))
      ->capture_default_str();
  cmd->add_option("--interval", *interval_ms, "Milliseconds between probes")->check(CLI::Range(0, 60000))->capture_default_str();
  cmd->add_option("--mode", *mode, "tcp or shm (must match the node's)")->check(CLI::IsMember({"tcp", "shm"}));
  auto insecure = std::make_shared<bool>(false);
  add_insecure_flag(*cmd, *insecure);
  return [=]() {
    auto addr = messages::Multiaddr::parse(*target);
    if (!addr) {
      std::fprintf(stderr, "apiary ping: %s\n", addr.error().what().c_str());
      return 2;
    }
    auto pinger = Pinger::start(*addr, transport_mode(*mode), *insecure);
    if (!pinger) {
      std::fprintf(stderr, "apiary ping: %s\n", pinger.error().what().c_str());
      return 1;
    }
    int answered = 0;
    std::vector<double> rtts;
    for (int seq = 1; seq <= *count; ++seq) {
      const PingReply reply = (*pinger)->probe(static_cast<std::uint64_t>(seq), std::chrono::milliseconds(*timeout_ms));
      if (reply.matched) {
        ++answered;
        rtts.push_back(reply.rtt_us);
        std::printf("reply from %s: seq=%d time=%.1f µs\n", addr->to_string().c_str(), seq, reply.rtt_us);
      } else {
        std::printf("%s from %s: seq=%d %s\n", reply.answered ? "bad reply" : "no reply", addr->to_string().c_str(),
                    seq, reply.problem.c_str());
      }
      std::fflush(stdout);
      if (seq < *count) std::this_thread::sleep_for(std::chrono::milliseconds(*interval_ms));
    }
    std::sort(rtts.begin(), rtts.end());
    std::printf("%d probes, %d answered", *count, answered);
    if (!rtts.empty()) {
      std::printf(", rtt min/median/max = %.1f/%.1f/%.1f µs", rtts.front(), rtts[rtts.size() / 2], rtts.back());
    }
    std::printf("\n");
    return answered > 0 ? 0 : 1;
  };
}

}  // namespace apiary::apps
