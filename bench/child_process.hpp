#pragma once
/// Child processes for the peer benchmarks: start a tool with posix_spawn, capture its
/// stdout+stderr, wait with a deadline and kill it (and its children) when it overruns.
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "messages/result.hpp"

namespace apiary::bench {

using Clock = std::chrono::steady_clock;

/// How a child process ended.
struct ExitInfo {
  int code = -1;           ///< exit code; -1 when a signal ended it
  int signal = 0;          ///< the terminating signal; 0 when it exited normally
  bool timed_out = false;  ///< we killed it because the deadline passed
  std::string output;      ///< everything it wrote to stdout and stderr, interleaved

  /// True for a normal exit with code 0.
  [[nodiscard]] bool success() const { return code == 0 && signal == 0 && !timed_out; }
  /// "exit code 3", "killed by signal 9", "timed out" -- for error messages.
  [[nodiscard]] std::string describe() const;
  /// For error messages: the first `max_lines` lines that mention an error, else the
  /// last `max_lines` non-empty lines, joined with " | ".
  [[nodiscard]] std::string tail(std::size_t max_lines = 3) const;
};

/// A running child in its own process group; the destructor kills and reaps it.
class Child {
 public:
  /// Starts `argv[0]` (a path, not searched in PATH) with this process's environment
  /// plus `env` entries of the form "NAME=value", which replace same-named variables.
  static Result<Child> start(const std::vector<std::string>& argv,
                             const std::vector<std::string>& env);

  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  /// Process id.
  [[nodiscard]] pid_t pid() const { return pid_; }
  /// Output captured so far.
  [[nodiscard]] const std::string& output() const { return out_; }
  /// Reads output that arrives within `timeout_ms` (0 = only what is there now).
  void pump(int timeout_ms);
  /// True once the process has exited (reaps it without blocking).
  bool exited();
  /// Waits for the exit, reading output; at `deadline` kills the process group.
  ExitInfo wait(Clock::time_point deadline);

 private:
  Child(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  void kill_and_reap();

  pid_t pid_ = -1;
  int fd_ = -1;          ///< read end of the output pipe; -1 after end of output
  bool reaped_ = false;
  int status_ = 0;       ///< waitpid status once reaped_
  std::string out_;
};

/// What a group of children printed (all of it, child by child) and the first failure
/// ("<how it ended>: <its last lines>"), if any did not exit 0.
struct GroupRun {
  std::string output;
  std::optional<std::string> failure;
};

/// Starts every argv as a child with `env` (NAME=value entries added to the
/// environment) and waits for all of them, at most `timeout_s` seconds in all.
Result<GroupRun> run_group(const std::vector<std::vector<std::string>>& argvs, const std::vector<std::string>& env,
                           int timeout_s);

/// Busy percentage of all CPUs over `ms` milliseconds (/proc/stat), -1 if unreadable.
int cpu_busy_pct(int ms);

/// A fresh empty directory `$TMPDIR/<prefix>.XXXXXX` (or under /tmp); removed, with
/// what it holds, by the destructor. `path` is empty if it could not be made.
struct TempDir {
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;
};

/// Locates executable `name`: `explicit_path` if given, else $`env_var` if set, else the
/// first of `dirs` that holds it, else PATH. not_found says where it looked.
Result<std::string> find_executable(std::string_view name, std::string_view explicit_path,
                                    const char* env_var, const std::vector<std::string>& dirs);

/// Path of the running executable ("" if /proc/self/exe cannot be read).
std::string executable_path();

/// Directory holding the running executable ("" if /proc/self/exe cannot be read).
std::string self_dir();

/// A TCP port on 127.0.0.1 that was free when asked, drawn at random below the kernel's
/// ephemeral range (20000..32767), so that no outgoing connection of another process takes
/// it before the child that is told it binds it.
Result<int> free_port();

/// `count` distinct free ports on 127.0.0.1 (free_port's, at most 100 draws).
Result<std::vector<int>> free_ports(std::size_t count);

/// Whether a socket listens on TCP `port` on any local address (/proc/net/tcp, tcp6).
bool is_listening(int port);

/// CPUs this process may run on, ascending (sched_getaffinity).
std::vector<int> allowed_cpus();

/// The machine's load averages, "0.52 0.61 0.70 (1/5/15 min)", for a benchmark's header.
std::string load_averages();

/// Prints "== title ==" and `lines` (the first one the header) in columns as wide as
/// their widest cell, two spaces apart, with no trailing blanks.
void print_table(const std::string& title, const std::vector<std::vector<std::string>>& lines);

/// `values` as one argument of a child's command line: "1,2,3".
template <class T>
std::string joined(const std::vector<T>& values) {
  std::string s;
  for (const auto& x : values) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace apiary::bench
