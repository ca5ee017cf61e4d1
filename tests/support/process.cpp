#include "tests/support/process.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <limits.h>
#include <random>
#include <stdexcept>
#include <thread>

namespace apiary::testing {

Process::Process(const std::vector<std::string>& argv) {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) throw std::runtime_error("pipe failed");
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  in_fd_ = in[1];
  out_fd_ = out[0];
}

Process::~Process() {
  if (in_fd_ >= 0) close(in_fd_);
  if (!exited_ && wait(std::chrono::milliseconds(3000)) < 0) {
    kill(SIGKILL);
    wait(std::chrono::milliseconds(3000));
  }
  if (out_fd_ >= 0) close(out_fd_);
}

std::optional<std::string> Process::read_line(std::chrono::milliseconds timeout) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto nl = buffered_.find('\n'); nl != std::string::npos) {
      std::string line = buffered_.substr(0, nl);
      buffered_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n <= 0) return std::nullopt;
    buffered_.append(buf, static_cast<std::size_t>(n));
  }
}

void Process::kill(int sig) {
  if (!exited_ && pid_ > 0) ::kill(pid_, sig);
}

int Process::wait(std::chrono::milliseconds timeout) {
  if (exited_) return status_;
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < give_up) {
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      exited_ = true;
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return status_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1;
}

std::string sibling_executable(const std::string& name) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return name;
  std::string path(self, static_cast<std::size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + name;
}

std::pair<std::unique_ptr<Process>, std::string> start_test_server(const std::vector<std::string>& args) {
  std::vector<std::string> argv{sibling_executable("rpc_test_server")};
  argv.insert(argv.end(), args.begin(), args.end());
  auto p = std::make_unique<Process>(argv);
  auto line = p->read_line(std::chrono::seconds(20));
  if (!line || line->rfind("listening ", 0) != 0) {
    throw std::runtime_error("rpc_test_server did not start: " + line.value_or("<no output>"));
  }
  return {std::move(p), line->substr(10)};
}

bool loopback_port_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return bound;
}

int free_loopback_port() {
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  std::uniform_int_distribution<int> pick(20000, 32767);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = pick(rng);
    if (loopback_port_free(port)) return port;
  }
  throw std::runtime_error("no free 127.0.0.1 port in 20000..32767 after 200 tries");
}

}  // namespace apiary::testing
