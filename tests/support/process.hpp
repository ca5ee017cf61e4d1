#pragma once
/// Starting and stopping helper processes from tests: the child's stdin is a pipe the
/// test holds (closing it tells the child to exit), its stdout is read line by line.
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace apiary::testing {

class Process {
 public:
  /// Starts `argv[0]` with `argv`; environment inherited.
  explicit Process(const std::vector<std::string>& argv);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  /// The next line of stdout (without newline), or nullopt on EOF/timeout.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  /// Sends `sig` to the child.
  void kill(int sig);
  /// Waits for exit; returns the exit status (or 128+signal), or -1 on timeout.
  int wait(std::chrono::milliseconds timeout);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int in_fd_ = -1;
  int out_fd_ = -1;
  std::string buffered_;
  bool exited_ = false;
  int status_ = -1;
};

/// Path of a helper executable built next to the running test binary.
std::string sibling_executable(const std::string& name);

/// Starts rpc_test_server with `args` and returns it with its "host:port".
std::pair<std::unique_ptr<Process>, std::string> start_test_server(const std::vector<std::string>& args);

/// A 127.0.0.1 port nobody binds right now, for a process the test starts later. It is
/// drawn at random below the kernel's ephemeral range (20000..32767), so no outgoing
/// connection of a concurrent test (UCX lanes, clients) takes it as its local port in
/// between, and two tests rarely draw the same one. Throws when none is found.
int free_loopback_port();

/// Whether 127.0.0.1:`port` can be bound right now.
bool loopback_port_free(int port);

}  // namespace apiary::testing
