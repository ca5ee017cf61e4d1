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

/// The shared command-line options, as parsed.
struct AveragerArgs {
  std::string listen = "/ip4/127.0.0.1/tcp/0";
  std::vector<std::string> initial_peers;
  std::string prefix = "apiary";
  std::string mode = "node";
  std::string codec = "NONE";
  std::string group_bits;
  std::size_t target_group_size = 16;
  std::size_t min_group_size = 2;
  double min_matchmaking_time = 2.0;
  double request_timeout = 3.0;
  double sender_timeout = 5.0;
  double reducer_timeout = 10.0;
  double alpha = 1.0;
  double bandwidth = 0;  ///< 0: undeclared
  std::int64_t part_size = std::int64_t{1} << 19;
  double share_state = -1;  ///< state-sharing priority (< 0: do not share)
  bool load_state = false;  ///< download the state from peers before the first step
  std::string reduce_on = "auto";  ///< auto, cpu, gpu or role (ReduceOn)
  int gpu = 0;                     ///< CUDA ordinal for auto and gpu
  std::string transport = "tcp";   ///< UCX lanes to same-host peers: tcp or shm
  int busy_poll_us = 0;            ///< DhtOptions::busy_poll, µs
};

/// Rounds on common time boundaries (multiples of `every` seconds of Unix time): each
/// round at the first boundary at least `lead` seconds away and after the last round's.
/// A group assembles as soon as it is full, so a peer also waits until `lead` seconds
/// before the boundary to begin matchmaking: groups that finish early then never start
/// the next round while their slower peers are still on this one.
class RoundClock {
 public:
  explicit RoundClock(double every) : every_(every) {}
  /// Waits until `lead` seconds before the next round's boundary and returns the
  /// seconds left to it (the step's scheduled_in).
  double wait_for_round(double lead);

 private:
  double every_;
  double last_ = 0;
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
