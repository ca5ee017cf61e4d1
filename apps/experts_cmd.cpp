// `apiary experts`: an expert server with hivemind-server's flags (api/expert_server_args.hpp).
#include "api/expert_server_args.hpp"
#include "apps/commands.hpp"

namespace apiary::apps {

Command add_experts_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("experts", "Serve Mixture-of-Experts experts and declare them in the DHT");
  cmd->prefix_command()->footer(expert_server_usage());
  return [cmd] {
    block_shutdown_signals();
    auto print = [](const std::string& line) { std::printf("%s\n", line.c_str()); std::fflush(stdout); };
    const Status ran = run_expert_server(cmd->remaining(), print, [] { return std::string(wait_for_shutdown_signal()); });
    return ran ? 0 : fail("experts", ran.error());
  };
}

}  // namespace apiary::apps
