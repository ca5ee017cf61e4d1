// `apiary launch`: starts every process of a job on the hosts of its resource spec (local
// ones as children, others through a remote shell) and watches them (apiary::launch,
// api/launcher.hpp).
#include <sys/signalfd.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>

#include "api/launcher.hpp"
#include "apps/commands.hpp"

namespace apiary::apps {

Command add_launch_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "launch",
      "Start every process of a job on the hosts of its resource spec: one per replica (RANK, WORLD_SIZE, "
      "APIARY_PORT, ... in its environment) and, with --ps-processes, one per PS device; stop them all when one "
      "fails or on Ctrl-C. Usage: apiary launch --strategy S --resource-spec R -- TRAINER ARGS...");
  auto o = std::make_shared<LaunchOptions>();
  auto grace_ms = std::make_shared<std::int64_t>(5000);
  auto dry_run = std::make_shared<bool>(false);
  cmd->add_option("--strategy", o->strategy,
                  "Strategy file (see `apiary strategy build`); without it, one process per replica of the resource "
                  "spec (every GPU, then the CPUs of nodes without GPUs), for trainers that build their strategy");
  cmd->add_flag("--text", o->text, "The strategy file is protobuf text format");
  cmd->add_option("--resource-spec", o->resource_spec, "resource_spec.yml the strategy was built for")->required();
  cmd->add_flag("--ps-processes", o->ps_processes,
                "Also start one process per PS device of the strategy (ranks after the replicas; APIARY_SERVE "
                "names its device), as `apiary ps` needs");
  cmd->add_option("--port", o->port, "The job's first port: rank i listens at PORT + i on its host")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  cmd->add_option("--remote-shell", o->remote_shell,
                  "How to reach a host that is not this one: ssh (with the node's ssh entry), or another "
                  "command run as `REMOTE_SHELL HOST sh -c LINE`, e.g. 'ip netns exec'")
      ->capture_default_str();
  cmd->add_option("--directory", o->directory, "Where every process starts (default: this directory)");
  cmd->add_option("--grace-ms", *grace_ms, "When stopping the job: SIGTERM, then SIGKILL this many ms later")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{3600000}))
      ->capture_default_str();
  cmd->add_option("--restart-ps", o->restart_ps,
                  "Start a PS process that fails again, up to this many times each, with APIARY_RESUME=1 (`apiary "
                  "ps` then continues the job from its latest --save checkpoint; give the replicas "
                  "--ps-restart-wait-ms); 0: a failure stops the job")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_flag("--dry-run", *dry_run, "Print each process's environment and command, start nothing");
  cmd->add_option("command", o->command, "The trainer and its arguments, after --")->expected(-1);
  return [o, grace_ms, dry_run]() {
    auto commands = launch_commands(*o);
    if (!commands) return fail("launch", commands.error());
    if (*dry_run) {
      for (const auto& c : *commands) {
        std::string line = "rank " + std::to_string(c.place.rank) + " " + c.place.role + " " + c.place.device +
                           (c.local ? " (here):" : " (remote):");
        for (const auto& e : c.environment) line += " " + e;
        for (const auto& a : c.argv) line += " " + shell_quote(a);
        std::printf("%s\n", line.c_str());
      }
      return 0;
    }
    block_shutdown_signals();
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    const int sfd = ::signalfd(-1, &set, SFD_CLOEXEC);
    LaunchOutput output;
    output.out = [](const std::string& line) {
      std::fputs(line.c_str(), stdout);
      std::fflush(stdout);
    };
    output.err = [](const std::string& line) {
      std::fflush(stdout);
      std::fputs(line.c_str(), stderr);
    };
    auto rc = run_launch(*commands, output, sfd, std::chrono::milliseconds(*grace_ms), o->restart_ps);
    if (sfd >= 0) ::close(sfd);
    if (!rc) return fail("launch", rc.error());
    return *rc;
  };
}

}  // namespace apiary::apps
