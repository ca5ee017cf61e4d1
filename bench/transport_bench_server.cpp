// The server side of `apiary bench transport`, and the handle on it that the client
// side keeps: a child process whose stdin is our pipe, so that closing it (or our exit)
// stops the server.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/role_host.hpp"
#include "actors/rpc.hpp"
#include "bench/transport_bench.hpp"
#include "bench/transport_bench_apiary.hpp"
#include "bench/transport_bench_roles.hpp"

extern char** environ;

namespace apiary::bench {
namespace transport_bench {
namespace {

using Clock = std::chrono::steady_clock;

/// The last few lines a child printed, for error messages.
std::string last_lines(const std::string& out, std::size_t n = 3) {
  std::vector<std::string> lines;
  std::size_t begin = 0;
  while (begin < out.size()) {
    std::size_t end = out.find('\n', begin);
    if (end == std::string::npos) end = out.size();
    if (end > begin) lines.push_back(out.substr(begin, end - begin));
    begin = end + 1;
  }
  std::string joined;
  for (std::size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i)
    joined += (joined.empty() ? "" : " | ") + lines[i];
  return joined.empty() ? "(no output)" : joined;
}

}  // namespace

Result<ServerProcess> ServerProcess::start(const std::string& exe, const std::string& mode, bool busy,
                                           bool direct, bool secure, std::chrono::seconds patience,
                                           const std::string& authority) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return make_error(errc::io, "pipe failed: {}", std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return make_error(errc::io, "pipe failed: {}", std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // its own group, killed as a whole
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> args = {exe, "bench", "transport-server", "--mode", mode};
  if (busy) args.emplace_back("--busy");
  if (direct) args.emplace_back("--direct");
  if (secure) args.emplace_back("--secure");
  if (!authority.empty()) {
    args.emplace_back("--authority");
    args.push_back(authority);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    return make_error(errc::not_found, "could not start the benchmark server '{}': {}; pass the path of the "
                      "`apiary` executable as self_exe", exe, std::strerror(rc));
  }
  ServerProcess p(pid, in[1], out[0]);
  // Wait for "listening HOST:PORT".
  const auto give_up = Clock::now() + patience;
  while (Clock::now() < give_up) {
    const bool open = p.pump(20);
    const auto at = p.output_.find("listening ");
    const auto eol = at == std::string::npos ? at : p.output_.find('\n', at);
    if (eol != std::string::npos) {
      p.address_ = p.output_.substr(at + 10, eol - at - 10);
      return p;
    }
    if (!open) break;
  }
  const bool late = Clock::now() >= give_up;
  return make_error(late ? errc::deadline_exceeded : errc::unavailable,
                    "the benchmark server `{} bench transport-server --mode {}{}{}{}` {}: {}", exe, mode,
                    busy ? " --busy" : "", direct ? " --direct" : "", secure ? " --secure" : "", late ? "did not print 'listening HOST:PORT' in time" : "exited early",
                    last_lines(p.output_));
}

ServerProcess::ServerProcess(ServerProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), in_fd_(std::exchange(other.in_fd_, -1)),
      out_fd_(std::exchange(other.out_fd_, -1)), reaped_(other.reaped_), output_(std::move(other.output_)),
      address_(std::move(other.address_)) {}

ServerProcess::~ServerProcess() { (void)stop(std::chrono::seconds(5)); }

bool ServerProcess::pump(int timeout_ms) {
  while (out_fd_ >= 0) {
    pollfd pfd{out_fd_, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return true;
    char buf[4096];
    const ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(out_fd_);
      out_fd_ = -1;
      return false;
    }
    output_.append(buf, static_cast<std::size_t>(n));
    timeout_ms = 0;  // take what is there, then return
  }
  return false;
}

Status ServerProcess::stop(std::chrono::seconds patience) {
  if (pid_ <= 0 || reaped_) return ok_status();
  if (in_fd_ >= 0) ::close(in_fd_);  // end of its stdin: the server's signal to stop
  in_fd_ = -1;
  int status = 0;
  bool killed = false;
  const auto give_up = Clock::now() + patience;
  while (::waitpid(pid_, &status, WNOHANG) != pid_) {
    if (Clock::now() >= give_up) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      killed = true;
      break;
    }
    if (!pump(10)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  reaped_ = true;
  pump(0);
  if (out_fd_ >= 0) ::close(out_fd_);
  out_fd_ = -1;
  if (killed)
    return make_error(errc::deadline_exceeded, "the benchmark server did not exit within {} s of its stdin "
                      "closing and was killed: {}", patience.count(), last_lines(output_));
  if (WIFSIGNALED(status))
    return make_error(errc::unavailable, "the benchmark server was killed by signal {} ({}): {}",
                      WTERMSIG(status), ::strsignal(WTERMSIG(status)), last_lines(output_));
  if (WEXITSTATUS(status) != 0)
    return make_error(errc::unavailable, "the benchmark server exited with code {}: {}", WEXITSTATUS(status),
                      last_lines(output_));
  return ok_status();
}

}  // namespace transport_bench

int run_transport_bench_server(const std::string& mode, bool busy, bool direct, bool secure,
                               const std::string& authority) {
  namespace tb = transport_bench;
  if (mode != "tcp" && mode != "shm") {
    fmt::print("error: expected --mode tcp or shm, got '{}'\n", mode);
    return 1;
  }
  ::setenv("UCX_NET_DEVICES", "lo", 0);  // loopback only, unless the caller chose otherwise
  caf::actor_system_config cfg;
  tb::apply_caf_config(cfg);
  caf::actor_system sys{cfg};
  actors::GatewayConfig gc;
  gc.transport.mode = mode == "shm" ? transport::Mode::shm : transport::Mode::tcp;
  if (busy) gc.transport.busy_poll = tb::k_busy_poll;
  gc.transport.insecure = !secure;
  auto identity = messages::Ed25519PrivateKey::generate();
  if (!identity) {
    fmt::print("error: the benchmark server could not make its key: {}\n", identity.error().what());
    return 1;
  }
  tb::use_identity(gc, *identity);
  auto gw = actors::Gateway::start(sys, gc);
  if (!gw) {
    fmt::print("error: the benchmark server could not start its gateway: {}\n", gw.error().what());
    std::fflush(stdout);
    return 1;
  }
  if (!authority.empty()) {
    if (auto ok = tb::authorize_gateway(**gw, *identity, authority); !ok) {
      fmt::print("error: --authority {}: {}\n", authority, ok.error().what());
      std::fflush(stdout);
      (*gw)->stop();
      return 1;
    }
  }
  // The echo: an actor's handler, or (--direct) a role on the transport thread.
  actors::RoleHost echo;
  if (direct)
    echo = actors::spawn_role(sys, *gw, tb::make_echo_role(tb::k_echo_handle), core::HostKind::transport_thread);
  else
    actors::serve_unary(sys, *gw, tb::k_echo_handle, [](const actors::Delivery& d) -> Result<Buffer> { return d.data; });
  actors::serve_unary(sys, *gw, tb::k_sink_handle, [](const actors::Delivery& d) -> Result<Buffer> {
    const std::uint64_t size = d.data.size();
    return Buffer::copy_of(&size, sizeof size);  // x86-64 and aarch64 are little endian
  });
  actors::serve_unary(sys, *gw, tb::k_stats_handle, [](const actors::Delivery&) -> Result<Buffer> {
    const auto c = tb::process_counters();
    Buffer b = Buffer::allocate(32);
    std::memcpy(b.data(), &c.voluntary, 8);
    std::memcpy(b.data() + 8, &c.involuntary, 8);
    std::memcpy(b.data() + 16, &c.minor_faults, 8);
    std::memcpy(b.data() + 24, &c.cpu_us, 8);
    return b;
  });
  fmt::print("listening {}\n", (*gw)->address());
  std::fflush(stdout);
  char buf[256];
  for (;;) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n > 0 || (n < 0 && errno == EINTR)) continue;
    break;
  }
  if (echo) actors::stop_role(**gw, echo, {tb::k_echo_handle});
  (*gw)->stop();
  return 0;
}

}  // namespace apiary::bench
