#pragma once
/// `apiary experts`: a standalone expert server process with hivemind-server's flags
/// (reference §6.1, `hivemind-server`): the flags read into options here, and the
/// process run (a runtime, a DHT node joining the swarm, an ExpertServer declaring its
/// experts there, its multiaddr and a throughput line every --stats-every seconds).
#include <functional>
#include <string>
#include <vector>

#include "api/expert_server.hpp"
#include "api/runtime.hpp"
#include "messages/result.hpp"

namespace apiary {

/// What `apiary experts` runs.
struct ExpertServerCommand {
  RuntimeOptions runtime;                  ///< --listen, --identity
  std::vector<std::string> initial_peers;  ///< --initial-peers: DHT multiaddrs to join from
  ExpertServerOptions server;              ///< the experts and their pools
  double stats_every = 10;                 ///< --stats-every: seconds between throughput lines (0: none)
};

/// The flags and what they set, one per line (for --help and usage errors).
[[nodiscard]] std::string expert_server_usage();

/// Reads `args` (the flags after `apiary experts`: "--hidden-dim 1024", list flags
/// taking every value up to the next flag). Errors: errc::invalid_argument naming the
/// flag (unknown, missing value, not a number) and the options ExpertServer refuses
/// are refused at start.
[[nodiscard]] Result<ExpertServerCommand> parse_expert_server_args(const std::vector<std::string>& args);

/// Runs the server of `command` until `wait_for_stop` returns (its return, e.g. the
/// signal's name, is printed): prints "serving <multiaddr>", the uids, and a throughput
/// line every stats_every seconds through `print`. Errors: the runtime's, the DHT's and
/// ExpertServer::start's.
[[nodiscard]] Status run_expert_server(const ExpertServerCommand& command,
                                       const std::function<void(const std::string&)>& print,
                                       const std::function<std::string()>& wait_for_stop);

/// parse_expert_server_args(args), then run_expert_server of what they say (`apiary
/// experts`). Errors: those of both.
[[nodiscard]] Status run_expert_server(const std::vector<std::string>& args,
                                       const std::function<void(const std::string&)>& print,
                                       const std::function<std::string()>& wait_for_stop);

}  // namespace apiary
