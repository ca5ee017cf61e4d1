// A process serving the test services: prints "listening HOST:PORT", then serves
// until its stdin closes (the test that started it exited or killed it) or SIGTERM.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <unistd.h>

#include <caf/all.hpp>

#include "tests/support/test_services.hpp"

int main(int argc, char** argv) {
  apiary::actors::GatewayConfig cfg;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--mode") cfg.transport.mode = v == "shm" ? apiary::transport::Mode::shm : apiary::transport::Mode::tcp;
    else if (k == "--max-frame") cfg.transport.max_frame_bytes = std::stoull(v);
    else if (k == "--keepalive-ms") {
      cfg.transport.keepalive_interval = std::chrono::milliseconds(std::stoi(v));
      cfg.transport.keepalive_timeout = 4 * cfg.transport.keepalive_interval;
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  caf::actor_system_config sys_cfg;
  sys_cfg.set("work-stealing.moderate-poll-attempts", 0);
  caf::actor_system sys{sys_cfg};
  auto gw = apiary::actors::Gateway::start(sys, cfg);
  if (!gw) {
    std::fprintf(stderr, "error: %s\n", gw.error().what().c_str());
    return 1;
  }
  apiary::testing::install_test_services(sys, *gw);
  std::printf("listening %s\n", (*gw)->address().c_str());
  std::fflush(stdout);
  char buf[256];
  while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
  (*gw)->stop();
  return 0;
}
