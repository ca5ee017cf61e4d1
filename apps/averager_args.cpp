#include "apps/averager_args.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>

#include "apps/commands.hpp"
#include "runtime.pb.h"

namespace apiary::apps {

void add_averager_options(CLI::App& cmd, AveragerArgs& a) {
  cmd.add_option("--listen", a.dht.listen, "Listen multiaddr (port 0 picks one)")->capture_default_str();
  cmd.add_option("--initial-peers", a.dht.initial_peers, "Multiaddrs (with /p2p/) of DHT nodes to bootstrap from");
  cmd.add_option("--prefix", a.averager.prefix, "Experiment name: group keys are <prefix>.0b<bits>")->capture_default_str();
  cmd.add_option("--mode", a.mode, "node (sends and reduces), client (sends only) or aux (reduces only)")
      ->check(CLI::IsMember({"node", "client", "aux"}))
      ->capture_default_str();
  cmd.add_option("--codec", a.codec,
                 "Part codec: NONE, FLOAT16, MEANSTD_16BIT, QUANTILE_8BIT, UNIFORM_8BIT, BLOCKWISE_8BIT")
      ->capture_default_str();
  cmd.add_option("--group-bits", a.averager.initial_group_bits, "Initial Moshpit group bits, e.g. 01");
  cmd.add_option("--target-group-size", a.averager.target_group_size, "Assemble a group at this size")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 16))
      ->capture_default_str();
  cmd.add_option("--min-group-size", a.averager.min_group_size, "Disband smaller groups")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 16))
      ->capture_default_str();
  cmd.add_option("--min-matchmaking-time", a.averager.min_matchmaking_time, "Seconds of matchmaking before a group starts")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  cmd.add_option("--request-timeout", a.averager.request_timeout, "Seconds a follower waits for a leader")
      ->check(CLI::Range(0.001, 3600.0));
  cmd.add_option("--sender-timeout", a.averager.sender_timeout, "Seconds of a sender's silence before exclusion")
      ->check(CLI::Range(0.001, 3600.0));
  cmd.add_option("--reducer-timeout", a.averager.reducer_timeout, "Seconds of a reducer's silence before local values")
      ->check(CLI::Range(0.001, 3600.0));
  cmd.add_option("--alpha", a.averager.averaging_alpha, "tensor += alpha * (average - tensor)")->check(CLI::Range(1e-9, 1.0));
  cmd.add_option("--bandwidth", a.bandwidth, "Declared bandwidth for load balancing (0: undeclared)")
      ->check(CLI::Range(0.0, 1e12));
  cmd.add_option("--part-size", a.averager.part_size_bytes, "Largest part of the all-reduce, bytes")
      ->check(CLI::Range(std::int64_t{64}, std::int64_t{1} << 30));
  cmd.add_option("--share-state", a.share_state, "Share this peer's tensors with newcomers at this priority (>= 0)")
      ->check(CLI::Range(0.0, 1e12));
  cmd.add_flag("--load-state", a.load_state, "Download the tensors from the highest-priority sharing peer first");
  cmd.add_option("--reduce-on", a.reduce_on,
                 "Where part reductions run: auto (the GPU if usable, else the CPU device actor), cpu, gpu, "
                 "or role (inline in the averager)")
      ->check(CLI::IsMember({"auto", "cpu", "gpu", "role"}))
      ->capture_default_str();
  cmd.add_option("--gpu", a.averager.gpu, "CUDA device ordinal for --reduce-on auto|gpu")
      ->check(CLI::Range(0, 1023))
      ->capture_default_str();
  cmd.add_option("--transport", a.transport, "UCX lanes to same-host peers: tcp, or shm (shared memory + CMA)")
      ->check(CLI::IsMember({"tcp", "shm"}))
      ->capture_default_str();
  add_insecure_flag(cmd, a.insecure);
  add_relay_flags(cmd, a.dht.relay_service, a.dht.auto_relay, a.dht.relay_limits);
  add_authority_option(cmd, a.dht.authorization.authority_file);
  cmd.add_option("--busy-poll-us", a.busy_poll_us,
                 "The transport thread spins this long after each event before sleeping (lower latency, a busy core)")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
}

AveragerOptions averager_options(const AveragerArgs& a) {
  namespace mm = core::averaging;
  AveragerOptions o = a.averager;
  o.mode = a.mode == "client" ? mm::AveragingMode::client
         : a.mode == "aux"    ? mm::AveragingMode::aux
                              : mm::AveragingMode::node;
  if (a.bandwidth > 0) o.bandwidth = a.bandwidth;
  o.reduce_on = a.reduce_on == "cpu"    ? ReduceOn::cpu
              : a.reduce_on == "gpu"    ? ReduceOn::gpu
              : a.reduce_on == "role"   ? ReduceOn::in_role
                                        : ReduceOn::automatic;
  if (a.share_state >= 0) {
    o.state_sharing_priority = a.share_state;
    o.declare_state_period = 10.0;
  }
  return o;
}

Result<AveragerNode> start_averager_node(const AveragerArgs& args, AveragerOptions options, const char* command) {
  auto fail = [command](Error e) {
    std::fprintf(stderr, "apiary %s: %s\n", command, e.what().c_str());
    return e;
  };
  std::string upper = args.codec;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  pb::CompressionType codec = pb::NONE;
  if (!pb::CompressionType_Parse(upper, &codec)) {
    return fail(make_error(errc::invalid_argument,
                           "expected --codec NONE, FLOAT16, MEANSTD_16BIT, QUANTILE_8BIT, UNIFORM_8BIT or "
                           "BLOCKWISE_8BIT, got '{}'", args.codec));
  }
  options.codecs = {codec};
  DhtOptions dht_options = args.dht;
  dht_options.mode = transport_mode(args.transport);
  dht_options.insecure = args.insecure;
  dht_options.busy_poll = std::chrono::microseconds(args.busy_poll_us);
  auto dht = Dht::start(dht_options);
  if (!dht) return fail(dht.error());
  auto averager = Averager::start(**dht, std::move(options));
  if (!averager) return fail(averager.error());
  std::printf("listening %s\n", (*dht)->address().to_string().c_str());
  std::fflush(stdout);
  if (args.load_state) {
    auto state = (*averager)->load_state_from_peers().get();
    if (!state) return fail(state.error());
    std::printf("loaded state from %s\n", state->donor.c_str());
    std::fflush(stdout);
  }
  return AveragerNode{std::move(*dht), std::move(*averager)};
}

}  // namespace apiary::apps
