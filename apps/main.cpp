// apiary: run a node, ping one, manage identities, run benchmarks.
#include <malloc.h>

#include <string>
#include <utility>
#include <vector>

#include "apps/commands.hpp"
#include "messages/log/log.hpp"

int main(int argc, char** argv) {
  // Tensors, parts and frames of hundreds of KiB to hundreds of MiB come and go every
  // round: serve them all from the heap (never a fresh mmap) and keep freed memory there,
  // so each round reuses pages already mapped instead of faulting in fresh ones. One arena:
  // a buffer freed on one thread serves the next allocation on any other (the actor, the
  // transport and CAF's workers all touch the same parts).
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_ARENA_MAX, 1);
  CLI::App app{"apiary: an actor runtime for distributed and decentralized deep-learning training"};
  app.require_subcommand(1);
  // Logs (stderr, structured): the level from --log-level, given before the command, or
  // from the environment (APIARY_LOG; APIARY_LOG_JSON=1 for JSON lines).
  app.add_option_function<std::string>(
         "--log-level",
         [](const std::string& level) {
           if (auto st = apiary::log::set_process_level(level); !st) throw CLI::ValidationError("--log-level", st.error().message);
         },
         "Log level: trace, debug, info, warn (default, or APIARY_LOG), error, off")
      ->type_name("LEVEL");
  const std::vector<std::pair<std::string, apiary::apps::Command>> commands = {
      {"node", apiary::apps::add_node_command(app)},
      {"ping", apiary::apps::add_ping_command(app)},
      {"identity", apiary::apps::add_identity_commands(app)},
      {"bench", apiary::apps::add_bench_commands(app)},
      {"tensor", apiary::apps::add_tensor_commands(app)},
      {"dht", apiary::apps::add_dht_commands(app)},
      {"sim", apiary::apps::add_sim_commands(app)},
      {"strategy", apiary::apps::add_strategy_commands(app)},
      {"ps", apiary::apps::add_ps_command(app)},
      {"average", apiary::apps::add_average_command(app)},
      {"train", apiary::apps::add_train_command(app)},
      {"experts", apiary::apps::add_experts_command(app)},
      {"launch", apiary::apps::add_launch_command(app)},
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;  // --help exits 0; usage errors exit 2
  }
  for (const auto& [name, run] : commands) {
    if (app.got_subcommand(name)) return run();
  }
  return 2;
}
