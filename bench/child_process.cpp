#include "bench/child_process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>

extern char** environ;

namespace apiary::bench {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

/// environ with `overrides` ("NAME=value") replacing or adding variables.
std::vector<std::string> merged_env(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& o : overrides)
      replaced = replaced || std::string_view(o).substr(0, o.find('=')) == name;
    if (!replaced) env.emplace_back(entry);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::string ExitInfo::describe() const {
  if (timed_out) return "timed out and was killed";
  if (signal != 0) return fmt::format("killed by signal {} ({})", signal, ::strsignal(signal));
  return fmt::format("exit code {}", code);
}

std::string ExitInfo::tail(std::size_t max_lines) const {
  std::vector<std::string> lines, errors;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    lines.push_back(line);
    if (line.find("error") != std::string::npos || line.find("ERROR") != std::string::npos)
      errors.push_back(line);
  }
  if (!errors.empty()) {  // the first error is the cause; later ones are its echoes
    errors.resize(std::min(errors.size(), max_lines));
    lines = std::move(errors);
  }
  std::string joined;
  const std::size_t first = lines.size() > max_lines ? lines.size() - max_lines : 0;
  for (std::size_t i = first; i < lines.size(); ++i)
    joined += (i == first ? "" : " | ") + lines[i];
  return joined.empty() ? "(no output)" : joined;
}

Result<Child> Child::start(const std::vector<std::string>& argv,
                           const std::vector<std::string>& env) {
  if (argv.empty()) return make_error(errc::invalid_argument, "expected a program to run, got none");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return make_error(errc::io, "pipe for {} failed: {}", argv[0], std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // own group: killable as a whole
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> args = argv;
  std::vector<std::string> envs = merged_env(env);
  auto c_args = c_strings(args);
  auto c_env = c_strings(envs);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, &attr, c_args.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return make_error(rc == ENOENT ? errc::not_found : errc::io,
                      "could not start {}: {}; check the path and that it is executable", argv[0],
                      std::strerror(rc));
  }
  return Child(pid, fds[0]);
}

Child::Child(Child&& other) noexcept
    : pid_(other.pid_), fd_(other.fd_), reaped_(other.reaped_), status_(other.status_),
      out_(std::move(other.out_)) {
  other.pid_ = -1;
  other.fd_ = -1;
}

Child& Child::operator=(Child&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    pid_ = std::exchange(other.pid_, -1);
    fd_ = std::exchange(other.fd_, -1);
    reaped_ = other.reaped_;
    status_ = other.status_;
    out_ = std::move(other.out_);
  }
  return *this;
}

Child::~Child() { kill_and_reap(); }

void Child::kill_and_reap() {
  if (pid_ > 0 && !reaped_) {
    ::kill(-pid_, SIGKILL);  // the group: a tool's own children go too
    ::waitpid(pid_, &status_, 0);
    reaped_ = true;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Child::pump(int timeout_ms) {
  while (fd_ >= 0) {
    pollfd pfd{fd_, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return;
    char buf[4096];
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {  // end of output: every writer has exited or closed it
      ::close(fd_);
      fd_ = -1;
      return;
    }
    out_.append(buf, static_cast<std::size_t>(n));
    timeout_ms = 0;  // drain what is there, then return
  }
}

bool Child::exited() {
  if (reaped_) return true;
  if (pid_ <= 0) return true;
  if (::waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
  return reaped_;
}

ExitInfo Child::wait(Clock::time_point deadline) {
  ExitInfo info;
  while (!exited()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      info.timed_out = true;
      kill_and_reap();
      break;
    }
    if (fd_ >= 0) {
      pump(static_cast<int>(std::min<long long>(left.count(), 20)));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  // A grandchild may still hold the pipe open; take what is there without waiting on it.
  pump(0);
  if (!info.timed_out) {
    if (WIFEXITED(status_)) info.code = WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) info.signal = WTERMSIG(status_);
  }
  info.output = out_;
  return info;
}

Result<std::string> find_executable(std::string_view name, std::string_view explicit_path,
                                    const char* env_var, const std::vector<std::string>& dirs) {
  std::string tried;
  auto consider = [&](const std::string& path) {
    tried += (tried.empty() ? "" : ", ") + path;
    return is_executable_file(path);
  };
  if (!explicit_path.empty()) {
    if (consider(std::string(explicit_path))) return std::string(explicit_path);
    return make_error(errc::not_found, "expected an executable {} at '{}', found none", name,
                      explicit_path);
  }
  if (const char* from_env = env_var != nullptr ? std::getenv(env_var) : nullptr) {
    if (consider(from_env)) return std::string(from_env);
    return make_error(errc::not_found, "${} names '{}', which is not an executable file", env_var,
                      from_env);
  }
  for (const auto& dir : dirs)
    if (!dir.empty() && consider(dir + "/" + std::string(name))) return dir + "/" + std::string(name);
  const char* path = std::getenv("PATH");
  std::istringstream in(path != nullptr ? path : "");
  for (std::string dir; std::getline(in, dir, ':');)
    if (!dir.empty() && is_executable_file(dir + "/" + std::string(name)))
      return dir + "/" + std::string(name);
  return make_error(errc::not_found, "{} not found (looked in {}{}PATH); set ${} or install it",
                    name, tried, tried.empty() ? "" : ", ", env_var != nullptr ? env_var : "PATH");
}

std::string executable_path() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

std::string self_dir() {
  const std::string path = executable_path();
  if (path.empty()) return "";
  return path.substr(0, path.rfind('/'));
}

Result<int> free_port() {
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  std::uniform_int_distribution<int> pick(20000, 32767);
  int err = 0;
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = pick(rng);
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return make_error(errc::io, "socket() for a free port failed: {}", std::strerror(errno));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    err = errno;
    ::close(fd);
    if (ok) return port;
  }
  return make_error(errc::io, "no free 127.0.0.1 port in 20000..32767 after 200 tries (last: {})", std::strerror(err));
}

Result<std::vector<int>> free_ports(std::size_t count) {
  std::vector<int> ports;
  for (int tries = 0; ports.size() < count && tries < 100; ++tries) {
    auto p = free_port();
    if (!p) return p.error();
    if (std::find(ports.begin(), ports.end(), *p) == ports.end()) ports.push_back(*p);
  }
  if (ports.size() < count) return make_error(errc::unavailable, "expected {} distinct free ports, got {}", count, ports.size());
  return ports;
}

bool is_listening(int port) {
  // Lines: "sl local_address rem_address st ..."; local is HEXIP:HEXPORT, LISTEN is 0A.
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      if (!(fields >> slot >> local >> remote >> state)) continue;
      const auto colon = local.rfind(':');
      if (colon == std::string::npos || state != "0A") continue;
      if (std::strtol(local.c_str() + colon + 1, nullptr, 16) == port) return true;
    }
  }
  return false;
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

Result<GroupRun> run_group(const std::vector<std::vector<std::string>>& argvs, const std::vector<std::string>& env,
                           int timeout_s) {
  std::vector<Child> children;
  for (const auto& argv : argvs) {
    auto c = Child::start(argv, env);
    if (!c) return c.error();
    children.push_back(std::move(*c));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  GroupRun run;
  for (auto& c : children) {
    const ExitInfo exit = c.wait(deadline);
    run.output += exit.output;
    if (!exit.success() && !run.failure) run.failure = fmt::format("{}: {}", exit.describe(), exit.tail(3));
  }
  return run;
}

int cpu_busy_pct(int ms) {
  auto sample = [](long long& total, long long& idle) {
    std::ifstream in("/proc/stat");
    std::string cpu;
    long long v[8] = {};
    if (!(in >> cpu)) return false;
    for (auto& x : v) in >> x;
    total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
    idle = v[3] + v[4];
    return static_cast<bool>(in);
  };
  long long t1 = 0, i1 = 0, t2 = 0, i2 = 0;
  if (!sample(t1, i1)) return -1;
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  if (!sample(t2, i2) || t2 <= t1) return -1;
  return static_cast<int>(100 * ((t2 - t1) - (i2 - i1)) / (t2 - t1));
}

TempDir::TempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/" + prefix + ".XXXXXX";
  if (::mkdtemp(tmpl.data()) != nullptr) path = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path.empty()) std::filesystem::remove_all(path, ec);
}

std::string load_averages() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  if (!(in >> one >> five >> fifteen)) return "unknown (/proc/loadavg unreadable)";
  return fmt::format("{} {} {} (1/5/15 min)", one, five, fifteen);
}

void print_table(const std::string& title, const std::vector<std::vector<std::string>>& lines) {
  std::vector<std::size_t> width(lines.empty() ? 0 : lines.front().size(), 0);
  for (const auto& l : lines)
    for (std::size_t i = 0; i < l.size() && i < width.size(); ++i) width[i] = std::max(width[i], l[i].size());
  fmt::print("\n== {} ==\n", title);
  for (const auto& l : lines) {
    std::string text;
    for (std::size_t i = 0; i < l.size(); ++i) text += fmt::format("{:<{}}  ", l[i], i < width.size() ? width[i] : 0);
    fmt::print("{}\n", text.substr(0, text.find_last_not_of(' ') + 1));
  }
}

}  // namespace apiary::bench
