// An expert server process for tests: ffn experts of hidden dim 16 with the uids given
// as arguments (seed 7, expert i from seed + i) on 127.0.0.1, printing
// "serving <multiaddr>" once it serves, until its stdin closes or it is killed.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "api/expert_server.hpp"
#include "api/runtime.hpp"

int main(int argc, char** argv) {
  apiary::ExpertServerOptions options;
  options.hidden_dim = 16;
  options.seed = 7;
  options.expert_uids.assign(argv + 1, argv + argc);
  auto runtime = apiary::Runtime::start(apiary::RuntimeOptions{});
  if (!runtime) {
    std::fprintf(stderr, "error: %s\n", runtime.error().what().c_str());
    return 1;
  }
  auto server = apiary::ExpertServer::start(**runtime, options);
  if (!server) {
    std::fprintf(stderr, "error: %s\n", server.error().what().c_str());
    return 1;
  }
  std::printf("serving %s\n", (*server)->address().c_str());
  std::fflush(stdout);
  char buf[256];
  while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
  (*server)->stop();
  (*runtime)->stop();
  return 0;
}
