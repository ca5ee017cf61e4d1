// apiary::run_launch: the launcher's children, their output, and stopping them all when
// one fails or a signal comes (api/launcher.hpp).
#include <fcntl.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "api/launcher.hpp"

extern char** environ;

namespace apiary {

namespace {

/// One started place.
struct Child {
  const LaunchCommand* command = nullptr;
  std::string prefix;
  pid_t pid = -1;
  int in = -1;
  int out[2] = {-1, -1};  ///< stdout, stderr read ends
  std::string pending[2];
  bool reaped = false;
  int status = 0;
  int restarts = 0;  ///< times it was started again (with APIARY_RESUME=1)
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

/// The environment a local place runs with: this process's, with `added` replacing.
std::vector<std::string> child_environment(bool local, const std::vector<std::string>& added) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const auto name = entry.substr(0, entry.find('=') + 1);
    bool replaced = false;
    for (const auto& a : added) replaced = replaced || a.compare(0, name.size(), name) == 0;
    if (!replaced) env.push_back(entry);
  }
  if (local) env.insert(env.end(), added.begin(), added.end());
  return env;
}

Status start(Child& child) {
  int in[2];
  int out[2];
  int err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return make_error(errc::internal, "launch: pipe: {}", std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    return make_error(errc::internal, "launch: pipe: {}", std::strerror(errno));
  }
  const bool again = child.restarts > 0;  // a PS process started again: it resumes
  const auto env_text =
      child_environment(child.command->local, again ? child.command->resume_environment : child.command->environment);
  std::vector<char*> envp;
  for (const auto& e : env_text) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (const auto& a : again ? child.command->resume_argv : child.command->argv) {
    argv.push_back(const_cast<char*>(a.c_str()));
  }
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return make_error(errc::internal, "launch: fork: {}", std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::execvpe(argv[0], argv.data(), envp.data());
    const std::string msg = fmt::format("cannot run {}: {}\n", argv[0], std::strerror(errno));
    (void)!::write(2, msg.data(), msg.size());
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  child.pid = pid;
  child.in = in[1];
  child.out[0] = out[0];
  child.out[1] = err[0];
  for (int fd : child.out) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return ok_status();
}

/// Reads what `child`'s stream `k` has and emits its whole lines (all of it at `eof`).
void drain(Child& child, int k, const LaunchOutput& output) {
  const auto& emit = k == 0 ? output.out : output.err;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(child.out[k], buf, sizeof buf);
    if (n > 0) {
      child.pending[k].append(buf, static_cast<std::size_t>(n));
      std::size_t start = 0;
      for (std::size_t nl; (nl = child.pending[k].find('\n', start)) != std::string::npos; start = nl + 1) {
        if (emit) emit(child.prefix + child.pending[k].substr(start, nl + 1 - start));
      }
      child.pending[k].erase(0, start);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    // End of the stream (or an error): the rest as a last line.
    if (!child.pending[k].empty() && emit) emit(child.prefix + child.pending[k] + "\n");
    child.pending[k].clear();
    close_fd(child.out[k]);
    return;
  }
}

std::string describe(const Child& c) {
  return fmt::format("rank {} ({} {} on {})", c.command->place.rank, c.command->place.role, c.command->place.device,
                     c.command->place.node);
}

bool serves(const Child& c) { return c.command->place.role == "ps"; }

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

std::string how_it_ended(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with {}", WEXITSTATUS(status));
  return fmt::format("was killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
}

}  // namespace

Result<int> run_launch(const std::vector<LaunchCommand>& commands, const LaunchOutput& output, int signal_fd,
                       std::chrono::milliseconds grace, int restart_ps) {
  const auto say = [&output](const std::string& line) {
    if (output.err) output.err("launch: " + line + "\n");
  };
  std::vector<Child> children(commands.size());
  std::optional<int> result;  // set when the job is being stopped
  bool finishing = false;  // the replicas are done, the PS processes told to stop
  bool killing = false;    // SIGKILL at kill_at
  auto kill_at = std::chrono::steady_clock::time_point::max();
  // SIGTERM to every process still running (and its stdin closed), SIGKILL after the grace.
  const auto terminate_all = [&] {
    killing = true;
    kill_at = std::chrono::steady_clock::now() + grace;
    for (auto& c : children) {
      close_fd(c.in);
      if (c.pid > 0 && !c.reaped) ::kill(-c.pid, SIGTERM);
    }
  };
  const auto stop_all = [&](int code) {
    result = code;
    terminate_all();
  };
  for (std::size_t i = 0; i < commands.size(); ++i) {
    auto& c = children[i];
    c.command = &commands[i];
    c.prefix = fmt::format("[{} r{} {}] ", commands[i].place.node, commands[i].place.rank, commands[i].place.role);
    if (auto st = start(c); !st) {
      say(fmt::format("cannot start {}: {}", describe(c), st.error().message));
      stop_all(1);
      break;
    }
  }
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<std::size_t, int>> owners;
    for (std::size_t i = 0; i < children.size(); ++i) {
      for (int k = 0; k < 2; ++k) {
        if (children[i].out[k] < 0) continue;
        fds.push_back({children[i].out[k], POLLIN, 0});
        owners.emplace_back(i, k);
      }
    }
    if (signal_fd >= 0) fds.push_back({signal_fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 50);
    for (std::size_t f = 0; f < owners.size(); ++f) {
      if (fds[f].revents != 0) drain(children[owners[f].first], owners[f].second, output);
    }
    if (signal_fd >= 0 && (fds.back().revents & POLLIN) != 0) {
      signalfd_siginfo info{};
      if (::read(signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info) && !result) {
        const int sig = static_cast<int>(info.ssi_signo);
        say(fmt::format("{}: stopping every process", sig == SIGINT    ? "SIGINT"
                                                       : sig == SIGTERM ? "SIGTERM"
                                                                        : ::strsignal(sig)));
        stop_all(128 + sig);
      }
    }
    bool running = false;
    for (auto& c : children) {
      if (c.pid <= 0 || c.reaped) continue;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) != c.pid) {
        running = true;
        continue;
      }
      c.reaped = true;
      c.status = status;
      for (int k = 0; k < 2; ++k) {
        if (c.out[k] >= 0) drain(c, k, output);
        // A grandchild may hold the pipe: what the process wrote is read; stop here.
        if (c.out[k] >= 0 && !c.pending[k].empty() && (k == 0 ? output.out : output.err)) {
          (k == 0 ? output.out : output.err)(c.prefix + c.pending[k] + "\n");
        }
        close_fd(c.out[k]);
      }
      close_fd(c.in);
      if (status != 0 && !result && !finishing && serves(c) && c.restarts < restart_ps &&
          !c.command->resume_argv.empty()) {
        ++c.restarts;
        say(fmt::format("{} {}; starting it again to resume the job (APIARY_RESUME=1, restart {} of {})",
                        describe(c), how_it_ended(status), c.restarts, restart_ps));
        c.reaped = false;
        c.pending[0].clear();
        c.pending[1].clear();
        if (auto st = start(c); !st) {
          c.reaped = true;
          say(fmt::format("cannot start {} again: {}", describe(c), st.error().message));
          stop_all(1);
        }
        running = true;
        continue;
      }
      if (status != 0 && !result && !finishing) {
        say(fmt::format("{} {}; stopping the others", describe(c), how_it_ended(status)));
        stop_all(exit_code(status));
      }
    }
    if (!running) break;
    // Every replica done: the PS processes serve until told to stop.
    bool replicas_running = false;
    for (const auto& c : children) replicas_running = replicas_running || (c.pid > 0 && !c.reaped && !serves(c));
    if (!result && !finishing && !replicas_running) {
      say("every replica finished: stopping the PS processes");
      finishing = true;
      terminate_all();
    }
    if (killing && std::chrono::steady_clock::now() >= kill_at) {
      for (auto& c : children) {
        if (c.pid > 0 && !c.reaped) {
          say(fmt::format("{} still runs {} ms after SIGTERM: SIGKILL", describe(c), grace.count()));
          ::kill(-c.pid, SIGKILL);
        }
      }
      killing = false;
    }
  }
  if (!result) {
    say(fmt::format("{} processes ended, every one with 0", children.size()));
    return 0;
  }
  return *result;
}

}  // namespace apiary
