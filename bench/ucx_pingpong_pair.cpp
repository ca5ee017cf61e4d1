// --pair: one command that runs both sides of apiary_ucx_pingpong. The server is this
// same executable, forked and exec'ed with --server --port 0; its "port N" line is read
// from a pipe, then this process runs the client and prints the client's result line.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/ucx_pingpong_peer.hpp"

namespace apiary::bench::pingpong {
namespace {

/// Path of the running executable (so the server is exactly this build).
std::string self_exe(const char* argv0) {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return argv0;
  return std::string(buf, static_cast<std::size_t>(n));
}

/// The first two CPUs this process may run on, or an empty list if there are fewer.
std::vector<int> two_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  if (cpus.size() < 2) cpus.clear();
  return cpus;
}

/// Reads "port N\n" from `fd` within `timeout_ms`; -1 (with a message) otherwise.
int read_port(int fd, int timeout_ms) {
  std::string line;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (line.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd pfd{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) == 0) {
      fmt::print(stderr, "error: the server printed no 'port N' line within {} ms\n", timeout_ms);
      return -1;
    }
    char buf[256];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      fmt::print(stderr, "error: the server exited before printing 'port N' (see its error above)\n");
      return -1;
    }
    line.append(buf, static_cast<std::size_t>(n));
  }
  int port = -1;
  if (std::sscanf(line.c_str(), "port %d", &port) != 1 || port <= 0 || port > 65535) {
    fmt::print(stderr, "error: expected 'port N' from the server, got '{}'\n",
               line.substr(0, line.find('\n')));
    return -1;
  }
  return port;
}

/// Waits up to `timeout_ms` for `pid`, then kills it; its exit code, or -1 if killed.
int reap(pid_t pid, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    fmt::print(stderr, "error: cannot pin to CPU {}: {}; pick one of `taskset -p $$`\n", cpu,
               std::strerror(errno));
    return false;
  }
  return true;
}

int run_pair(const Options& o, const char* argv0) {
  const std::vector<int> cpus = o.pin ? two_cpus() : std::vector<int>{};
  if (o.pin && cpus.empty())
    fmt::print(stderr, "warning: --pin needs two allowed CPUs; running unpinned\n");
  const std::string exe = self_exe(argv0);
  std::vector<std::string> args = {exe, "--server", "--port", "0", "--tls", o.tls,
                                   "--timeout", std::to_string(o.timeout_s + 10)};
  if (o.busy) args.emplace_back("--busy");
  if (!cpus.empty()) {
    args.emplace_back("--cpu");
    args.push_back(std::to_string(cpus[0]));
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    fmt::print(stderr, "error: pipe: {}\n", std::strerror(errno));
    return 1;
  }
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) {
    fmt::print(stderr, "error: fork: {}\n", std::strerror(errno));
    return 1;
  }
  if (pid == 0) {  // child: stdout -> pipe, stderr shared with the parent
    ::dup2(fds[1], STDOUT_FILENO);
    ::execv(exe.c_str(), argv.data());
    std::_Exit(127);
  }
  ::close(fds[1]);
  const int port = read_port(fds[0], 10000);
  if (port < 0) {
    reap(pid, 0);
    ::close(fds[0]);
    return 1;
  }
  Options client = o;
  client.role = Options::client;
  client.host = "127.0.0.1";
  client.port = port;
  client.port_given = true;
  int rc = (cpus.empty() || pin_to(cpus[1])) ? run_client(client) : 1;
  const int server_rc = reap(pid, rc == 0 ? 5000 : 500);
  ::close(fds[0]);
  if (rc == 0 && server_rc != 0) {
    fmt::print(stderr, "error: the server exited with {} after a good run\n", server_rc);
    rc = 1;
  }
  return rc;
}

}  // namespace apiary::bench::pingpong
