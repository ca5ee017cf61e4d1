#pragma once
/// The `apiary` subcommands. Each registers its options on the app and returns the
/// function that runs it (exit code: 0 ok, 1 failure, 2 bad usage).
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include <CLI/CLI.hpp>

#include "core/role.hpp"
#include "messages/result.hpp"
#include "transport/transport.hpp"

namespace apiary::apps {

using Command = std::function<int()>;

Command add_node_command(CLI::App& app);
Command add_ping_command(CLI::App& app);
Command add_identity_commands(CLI::App& app);
Command add_bench_commands(CLI::App& app);
/// `apiary tensor encode|decode`: raw values <-> serialized Tensor messages.
Command add_tensor_commands(CLI::App& app);
/// `apiary dht [store|get]`: a DHT node, or one-shot store/get clients.
Command add_dht_commands(CLI::App& app);
/// `apiary sim dht`: a simulated DHT swarm under churn, latency and loss.
Command add_sim_commands(CLI::App& app);
/// `apiary sim calibrate` under `sim` (sim_calibrate.cpp); its action returns -1 when
/// another subcommand was chosen.
Command add_calibrate_command(CLI::App& sim);
/// `apiary strategy build|check`: AutoDist strategies from a graph item and a resource spec.
Command add_strategy_commands(CLI::App& app);
/// `apiary strategy search` under `strategy` (strategy_search_cmd.cpp); its action
/// returns -1 when another subcommand was chosen.
Command add_strategy_search_command(CLI::App& strategy);
/// `apiary average`: an averager process averaging one vector with its peers.
Command add_average_command(CLI::App& app);
/// `apiary train`: a collaborative training process (local SGD + periodic averaging).
Command add_train_command(CLI::App& app);
/// `apiary ps`: parameter-server training processes (PS shards, chief and worker replicas).
Command add_ps_command(CLI::App& app);
/// `apiary experts`: an expert server (hivemind-server's flags).
Command add_experts_command(CLI::App& app);
/// `apiary launch`: every process of a job on the hosts of its resource spec.
Command add_launch_command(CLI::App& app);

/// Blocks SIGINT and SIGTERM in the calling thread (and the threads it starts later),
/// so that wait_for_shutdown_signal can take them synchronously.
void block_shutdown_signals();

/// Puts the memory malloc takes from the system from now on on transparent huge pages
/// (2 MiB aligned regions, advised), for the simulator's commands, whose hosts hold
/// hundreds of megabytes of small blocks read at random: on 4 KiB pages most of a big
/// swarm's time went to TLB misses. Call before starting threads. Under the sanitizers
/// (ASan's allocator) it does nothing (default_heap.cpp).
void heap_on_huge_pages();
/// Waits for SIGINT or SIGTERM; returns its name ("SIGINT" or "SIGTERM").
const char* wait_for_shutdown_signal();
/// Prints `e` for `apiary COMMAND` and returns the exit code (2 for bad input, 1 otherwise).
int fail(const char* command, const Error& e);

/// Registers --batch, --samples and --features: the synthetic data set and the
/// logistic-regression model of `apiary ps` and `apiary sim ps`.
/// Refuses samples x features beyond 2^30 values, naming both.
void add_model_options(CLI::App& cmd, std::size_t& batch, std::size_t& samples, std::size_t& features,
                       double& density);

/// Registers --host: which role host runs the command's node, "actor" or "transport".
inline void add_host_option(CLI::App& cmd, core::HostKind& kind) {
  cmd.add_option_function<std::string>(
         "--host", [&kind](const std::string& name) {
           kind = name == "transport" ? core::HostKind::transport_thread : core::HostKind::actor;
         },
         "The node's role host: actor (its own) or transport (the transport's thread, no hand-off per call)")
      ->check(CLI::IsMember({"actor", "transport"}));
}

/// Adds --insecure: plaintext connections, for a trusted cluster or shared memory on one host.
inline void add_insecure_flag(CLI::App& cmd, bool& insecure) {
  cmd.add_flag("--insecure", insecure,
               "Plaintext connections (a trusted cluster, or shared memory on one host); every peer must say so "
               "too. Default: encrypted, PeerIDs proven (Noise XX)");
}

/// Adds --relay-service and --auto-relay (transport/README.md "Relays") to a DHT node's
/// command, and the limits of the slots it grants as a relay (`RelayLimits`; each limit
/// needs --relay-service).
inline void add_relay_flags(CLI::App& cmd, bool& relay_service, bool& auto_relay, transport::RelayLimits& limits) {
  auto* service = cmd.add_flag("--relay-service", relay_service,
                               "Serve as a relay: peers behind NAT reserve a slot here and are dialled through this node");
  cmd.add_flag("--auto-relay", auto_relay,
               "When the initial peers cannot call this node back (behind NAT), be reached through the first of "
               "them that serves as a relay (started with --relay-service)");
  const auto seconds = [&cmd, service](const char* name, std::chrono::milliseconds& to, const char* what) {
    cmd.add_option_function<double>(
           name, [&to](double s) { to = std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000.0)); },
           what + std::string(" (seconds; default ") + std::to_string(to.count() / 1000) + ")")
        ->check(CLI::Range(0.001, 30.0 * 24 * 3600))
        ->needs(service);
  };
  const auto bytes = [&cmd, service](const char* name, std::uint64_t& to, const char* what) {
    cmd.add_option(name, to, what + std::string(" (bytes; suffixes kb, mb, gb = 1024^n; default ") +
                                 std::to_string(to >> 20) + "mb)")
        ->transform(CLI::AsSizeValue(false))
        ->check(CLI::Range(std::uint64_t{1}, std::numeric_limits<std::uint64_t>::max()))
        ->needs(service);
  };
  const auto count = [&cmd, service](const char* name, std::size_t& to, const char* what) {
    cmd.add_option(name, to, what + std::string(" (default ") + std::to_string(to) + ")")
        ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
        ->needs(service);
  };
  count("--relay-slots", limits.max_reservations, "As a relay: peers holding a slot at once");
  count("--relay-circuits-per-peer", limits.max_circuits_per_peer,
        "As a relay: relayed connections to one peer at once");
  seconds("--relay-slot-s", limits.reservation, "As a relay: a slot's life unless its peer renews it");
  bytes("--relay-slot-bytes", limits.reservation_bytes,
        "As a relay: bytes carried to and from one peer between renewals of its slot");
  seconds("--relay-circuit-s", limits.circuit, "As a relay: one relayed connection's life");
  bytes("--relay-circuit-bytes", limits.circuit_bytes,
        "As a relay: bytes one relayed connection may carry, both ways together");
}

/// Adds --authority: authorization of every call with a swarm's shared authority key file.
inline void add_authority_option(CLI::App& cmd, std::string& authority_file) {
  cmd.add_option("--authority", authority_file,
                 "Authorize every call: an Ed25519 key file (see `apiary identity create`) shared by the swarm's "
                 "members, which each mint their own tokens with it; calls from others are refused, and their "
                 "answers not believed");
}

/// The UCX lanes to same-host peers named by a --mode or --transport flag ("tcp" or "shm").
inline transport::Mode transport_mode(const std::string& name) {
  return name == "shm" ? transport::Mode::shm : transport::Mode::tcp;
}

}  // namespace apiary::apps
