// Options come in pairs: --mode tcp|shm, --insecure 1, --max-frame N, --keepalive-ms N.
// A process serving the test services: prints "listening HOST:PORT", then serves
// until its stdin closes (the test that started it exited or killed it) or SIGTERM.
//
// With `--call-forever HOST:PORT` it is a client instead: it opens test.rpc_forever
// at HOST:PORT, prints "streaming" once the first message arrives, and keeps the
// stream open until its stdin closes or it is killed (tests kill it mid-stream).
// Should the call end, it prints "call ended: <error>".
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <unistd.h>

#include <caf/all.hpp>

#include "actors/rpc.hpp"
#include "test.pb.h"
#include "tests/support/test_services.hpp"

namespace {

/// Receives the deliveries of the rpc_forever call and reports on stdout.
caf::behavior stream_reporter(caf::event_based_actor* self) {
  auto seen = std::make_shared<long>(0);
  return {
      [self, seen](apiary::actors::Delivery& d) {
        if (d.has_message && ++*seen == 1) {
          std::printf("streaming\n");
          std::fflush(stdout);
        }
        if (d.final) {
          std::printf("call ended: %s\n", d.kind == apiary::actors::DeliveryKind::error ? d.error.what().c_str()
                                                                                          : "completed");
          std::fflush(stdout);
          self->quit();
        }
      },
  };
}

}  // namespace

int main(int argc, char** argv) {
  apiary::actors::GatewayConfig cfg;
  std::string call_forever;  // target of --call-forever, empty when serving
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--mode") cfg.transport.mode = v == "shm" ? apiary::transport::Mode::shm : apiary::transport::Mode::tcp;
    else if (k == "--insecure") cfg.transport.insecure = v == "1";
    else if (k == "--max-frame") cfg.transport.max_frame_bytes = std::stoull(v);
    else if (k == "--keepalive-ms") {
      cfg.transport.keepalive_interval = std::chrono::milliseconds(std::stoi(v));
      cfg.transport.keepalive_timeout = 4 * cfg.transport.keepalive_interval;
    } else if (k == "--call-forever") {
      call_forever = v;
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
  if (call_forever.empty()) {
    apiary::testing::install_test_services(sys, *gw);
    std::printf("listening %s\n", (*gw)->address().c_str());
  } else {
    apiary::pb::TestRequest request;
    auto reporter = sys.spawn(stream_reporter);
    (*gw)->open(reporter, call_forever, "test.rpc_forever", apiary::pb::SERVER_STREAM, std::chrono::minutes(10),
                apiary::actors::to_buffer(request), true);
  }
  std::fflush(stdout);
  char buf[256];
  while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
  (*gw)->stop();
  return 0;
}
