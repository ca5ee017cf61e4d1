#pragma once
/// Running the `apiary` command (built next to the test binary) from tests.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/support/process.hpp"

namespace apiary::testing {

/// What a finished `apiary` command printed and how it ended.
struct ApiaryRun {
  int rc = -1;
  std::string out;  ///< stdout and stderr together
};

/// Starts `apiary ARGS` through sh, so `args` may end with redirections.
inline std::unique_ptr<Process> spawn_apiary(const std::string& args) {
  return std::make_unique<Process>(
      std::vector<std::string>{"/bin/sh", "-c", "exec " + sibling_executable("apiary") + " " + args});
}

/// Runs `apiary ARGS` (stderr merged) and collects its output, waiting up to `patience`
/// for each line and for the exit.
inline ApiaryRun run_apiary(const std::string& args,
                            std::chrono::milliseconds patience = std::chrono::seconds(30)) {
  auto p = spawn_apiary(args + " 2>&1");
  ApiaryRun r;
  while (auto line = p->read_line(patience)) r.out += *line + "\n";
  r.rc = p->wait(patience);
  return r;
}

/// The multiaddr of the "listening /ip4/127.0.0.1/tcp/..." line `p` prints first; fails
/// the test when `p` prints something else or nothing within `patience`.
inline std::string await_listening(Process& p, std::chrono::milliseconds patience = std::chrono::seconds(30)) {
  auto line = p.read_line(patience);
  REQUIRE(line);
  REQUIRE(line->rfind("listening /ip4/127.0.0.1/tcp/", 0) == 0);
  return line->substr(10);
}

}  // namespace apiary::testing
