#pragma once
/// apiary::launch: starts every process of a job on the hosts of its resource spec and
/// watches them (what `apiary launch` runs).
///
/// The processes are the job's places (api/job_places.hpp): one per replica, then, with
/// `ps_processes`, one per PS device. Each runs the trainer command with its place in
/// the environment, the variables torchrun sets and apiary's own:
///
///   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR (replica 0's host),
///   MASTER_PORT (the job's first port - 1), APIARY_PORT (the first port),
///   APIARY_ROLE (chief, worker or ps), APIARY_DEVICE, APIARY_SERVE (a PS process's device)
///
/// plus the `shared_envs` of the node's ssh entry. A place whose node is a loopback name
/// starts here as a child; any other through the remote shell: `ssh [-l USER] [-p PORT]
/// [-i KEY] NODE LINE` for ssh (the node's ssh entry), else `REMOTE_SHELL NODE sh -c LINE`
/// (e.g. `ip netns exec`, with namespaces named by their nodes' addresses). LINE changes
/// to this directory, runs the entry's `python_venv` command, starts the trainer with
/// stdin from /dev/null and stops it (SIGTERM) when its own stdin closes, so closing the
/// pipe to the remote shell, or losing the connection, stops the remote process.
///
/// Output: every line of every process, stdout to stdout and stderr to stderr, behind
/// "[NODE rRANK ROLE] ". The first process to fail (exit status not 0) stops the others:
/// SIGTERM to each (and its stdin closed), SIGKILL after `grace`; so does SIGINT or
/// SIGTERM to the launcher. With `restart_ps` N, a PS process that fails is started again
/// instead (up to N times each) with APIARY_RESUME=1: `apiary ps` then continues the job
/// from its latest checkpoint while the replicas wait for it (--ps-restart-wait-ms).
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "api/job_places.hpp"
#include "messages/result.hpp"

namespace apiary {

struct LaunchOptions {
  /// The strategy file (`apiary strategy build`); empty: the resource spec's replicas (as
  /// every builder lays them out), for trainers that build their strategy themselves.
  std::string strategy;
  bool text = false;          ///< protobuf text format
  std::string resource_spec;  ///< the cluster it was built for
  bool ps_processes = false;  ///< also one process per PS device
  std::uint32_t port = 15000;  ///< the job's first port
  std::string remote_shell = "ssh";  ///< words split at blanks
  std::vector<std::string> command;  ///< the trainer and its arguments
  std::string directory;             ///< where every process starts (empty: this process's)
  std::chrono::milliseconds grace{5000};  ///< SIGTERM to SIGKILL when stopping
  int restart_ps = 0;                     ///< times a failed PS process is started again
};

/// How one place is started.
struct LaunchCommand {
  JobPlace place;
  bool local = false;                      ///< a child of the launcher, no remote shell
  std::vector<std::string> argv;           ///< what is executed here
  std::vector<std::string> environment;    ///< "NAME=VALUE" the place adds (local: set in the child)
  /// A PS place started again: its argv and environment with APIARY_RESUME=1.
  std::vector<std::string> resume_argv;
  std::vector<std::string> resume_environment;
};

/// The commands of every place of the job. Errors: invalid_argument (no command, an
/// unreadable strategy or resource spec, a strategy whose devices are not the spec's,
/// an empty remote shell) naming what is wrong.
[[nodiscard]] Result<std::vector<LaunchCommand>> launch_commands(const LaunchOptions& options);

/// Quotes `word` for a POSIX shell ('...', with ' as '\'').
[[nodiscard]] std::string shell_quote(const std::string& word);

/// Where the launcher's lines go.
struct LaunchOutput {
  std::function<void(const std::string&)> out;   ///< a process's stdout line, prefixed, with '\n'
  std::function<void(const std::string&)> err;   ///< its stderr lines and the launcher's own
};

/// Starts every command and watches them to their end. `signal_fd` (-1: none) is a
/// signalfd of the signals that stop the job. Returns the launcher's exit status: 0 when
/// every process ended with 0; else the first failure's status (a process killed by
/// signal S: 128 + S), or 128 + S when signal S stopped the job. Errors: internal when a
/// process cannot be started (pipes, fork). A PS process that fails while `restart_ps`
/// restarts are left for it is started again (resume_argv) instead of stopping the job.
[[nodiscard]] Result<int> run_launch(const std::vector<LaunchCommand>& commands, const LaunchOutput& output,
                                     int signal_fd, std::chrono::milliseconds grace, int restart_ps = 0);

}  // namespace apiary
