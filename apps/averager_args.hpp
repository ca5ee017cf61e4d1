#pragma once
/// The options `apiary average` and `apiary train` share: where the node listens, whom
/// it bootstraps from, and how its Averager forms groups and averages.
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "api/averager.hpp"
#include "api/dht.hpp"

namespace apiary::apps {

/// The shared command-line options, as parsed: those of the node and the averager that
/// the flags set as they are, and the others as given.
struct AveragerArgs {
  AveragerArgs() {
    averager.prefix = "apiary";
    averager.min_matchmaking_time = 2.0;
  }
  DhtOptions dht;            ///< --listen, --initial-peers
  AveragerOptions averager;  ///< the group sizes, timeouts, alpha, part size, GPU
  std::string mode = "node";
  std::string codec = "NONE";
  double bandwidth = 0;  ///< 0: undeclared
  double share_state = -1;  ///< state-sharing priority (< 0: do not share)
  bool load_state = false;  ///< download the state from peers before the first step
  std::string reduce_on = "auto";  ///< auto, cpu, gpu or role (ReduceOn)
  std::string transport = "tcp";   ///< UCX lanes to same-host peers: tcp or shm
  bool insecure = false;           ///< plaintext connections (every peer must say so)
  int busy_poll_us = 0;            ///< DhtOptions::busy_poll, µs
};

/// Registers the shared options on `cmd`.
void add_averager_options(CLI::App& cmd, AveragerArgs& args);

/// Averager options from the arguments (tensors left empty).
AveragerOptions averager_options(const AveragerArgs& args);

/// A started node: its DHT and its averager.
struct AveragerNode {
  std::unique_ptr<Dht> dht;
  std::unique_ptr<Averager> averager;
};

/// Starts the DHT node and the averager over `options`, and prints "listening
/// <multiaddr>"; on error prints it to stderr prefixed with `command` and returns it.
Result<AveragerNode> start_averager_node(const AveragerArgs& args, AveragerOptions options, const char* command);

}  // namespace apiary::apps
