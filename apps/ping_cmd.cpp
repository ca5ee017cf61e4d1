// `apiary ping MULTIADDR [-c N]`: probe a node over UCX and print round-trip times.
#include <algorithm>
#include <cstdio>
#include <thread>

#include <caf/all.hpp>

#include "actors/rpc.hpp"
#include "actors/effects_executor.hpp"
#include "apps/commands.hpp"
#include "core/ping/pinger.hpp"
#include "messages/identity/multiaddr.hpp"
#include "ping.pb.h"

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
  return [=]() {
    auto addr = messages::Multiaddr::parse(*target);
    if (!addr) {
      std::fprintf(stderr, "apiary ping: %s\n", addr.error().what().c_str());
      return 2;
    }
    auto key = actors::peer_key_of(addr->to_string());
    if (!key) {
      std::fprintf(stderr, "apiary ping: %s\n", key.error().what().c_str());
      return 2;
    }
    caf::actor_system_config cfg;
    cfg.set("work-stealing.moderate-poll-attempts", 0);
    caf::actor_system sys{cfg};
    actors::GatewayConfig gc;
    gc.host = addr->host;  // listen (ephemerally) on the same interface as the target
    gc.transport.mode = *mode == "shm" ? transport::Mode::shm : transport::Mode::tcp;
    auto gw = actors::Gateway::start(sys, gc);
    if (!gw) {
      std::fprintf(stderr, "apiary ping: %s\n", gw.error().what().c_str());
      return 1;
    }
    caf::scoped_actor self{sys};
    int answered = 0;
    std::vector<double> rtts;
    for (int seq = 1; seq <= *count; ++seq) {
      pb::PingProbe probe;
      probe.set_seq(static_cast<std::uint64_t>(seq));
      const auto t0 = std::chrono::steady_clock::now();
      auto r = actors::call_unary(self, **gw, *key, core::ping::k_handle, actors::to_buffer(probe),
                                  std::chrono::milliseconds(*timeout_ms));
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (r) {
        auto ack = actors::from_buffer<pb::PingAck>(*r, "ping answer");
        if (ack && ack->seq() == static_cast<std::uint64_t>(seq)) {
          ++answered;
          rtts.push_back(us);
          std::printf("reply from %s: seq=%d time=%.1f µs\n", addr->to_string().c_str(), seq, us);
        } else {
          std::printf("bad reply from %s: seq=%d %s\n", addr->to_string().c_str(), seq,
                      ack ? "sequence mismatch" : ack.error().what().c_str());
        }
      } else {
        std::printf("no reply from %s: seq=%d %s\n", addr->to_string().c_str(), seq, r.error().what().c_str());
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
    (*gw)->stop();
    return answered > 0 ? 0 : 1;
  };
}

}  // namespace apiary::apps
