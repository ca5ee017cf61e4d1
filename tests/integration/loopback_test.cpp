// Test traffic stays on 127.0.0.0/8. After calls between this process and a server
// process (tcp and shm modes, small and rendezvous-sized payloads), two independent
// witnesses must agree: UCX's own description of the connection names no network
// device but lo, and every TCP socket either process owns has loopback addresses on
// both ends. UCX_NET_DEVICES is cleared first, so what is checked is apiary's own
// pinning of devices to the listen address's interface, not the test environment's.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <cctype>
#include <optional>
#include <utility>
#include <set>
#include <sstream>

#include "actors/rpc.hpp"
#include "test.pb.h"
#include "tests/support/process.hpp"
#include "tests/support/test_messages.hpp"
#include "tests/support/test_system.hpp"

using namespace apiary;
using namespace std::chrono_literals;

namespace {

/// One TCP socket from /proc/net/tcp{,6}.
struct TcpSocket {
  std::string local, remote;  ///< printable "addr:port"
  bool local_loopback = false, remote_loopback = false;
  bool listening = false;     ///< state LISTEN: the remote end is unset by nature
};

/// Inodes of the sockets among `pid`'s open file descriptors.
std::set<unsigned long> socket_inodes(pid_t pid) {
  std::set<unsigned long> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(dir.c_str());
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d)) {
    char target[256];
    const ssize_t n = readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    unsigned long inode = 0;
    if (std::sscanf(target, "socket:[%lu]", &inode) == 1) out.insert(inode);
  }
  closedir(d);
  return out;
}

/// "0100007F:1F90" (IPv4) or 32 hex digits and a port (IPv6), as the kernel prints
/// them: each 32-bit word in host byte order. Sets `loopback` for 127.0.0.0/8, ::1
/// and ::ffff:127.0.0.0/104.
std::string decode(const std::string& hex, bool& loopback) {
  const auto colon = hex.find(':');
  const std::string addr = hex.substr(0, colon);
  const unsigned port = std::stoul(hex.substr(colon + 1), nullptr, 16);
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.size() == 8) {
    in_addr a{};
    a.s_addr = static_cast<std::uint32_t>(std::stoul(addr, nullptr, 16));
    inet_ntop(AF_INET, &a, text, sizeof text);
    loopback = reinterpret_cast<const unsigned char*>(&a.s_addr)[0] == 127;
  } else {
    in6_addr a{};
    for (int w = 0; w < 4; ++w) {
      const auto word = static_cast<std::uint32_t>(std::stoul(addr.substr(8 * w, 8), nullptr, 16));
      std::memcpy(a.s6_addr + 4 * w, &word, 4);
    }
    inet_ntop(AF_INET6, &a, text, sizeof text);
    loopback = IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return std::string(text) + ":" + std::to_string(port);
}

/// The TCP sockets `pid` owns.
std::vector<TcpSocket> tcp_sockets_of(pid_t pid) {
  const auto inodes = socket_inodes(pid);
  std::vector<TcpSocket> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // column titles
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout;
      unsigned long inode = 0;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (!fields || inodes.count(inode) == 0) continue;
      TcpSocket s;
      s.local = decode(local, s.local_loopback);
      s.remote = decode(remote, s.remote_loopback);
      s.listening = state == "0A";
      out.push_back(s);
    }
  }
  return out;
}

/// Checks every TCP socket of `pid` stays on loopback; requires at least one connected one.
void check_sockets(pid_t pid, const std::string& who) {
  const auto sockets = tcp_sockets_of(pid);
  int connected = 0;
  for (const auto& s : sockets) {
    INFO(who << " socket " << s.local << " -> " << s.remote << (s.listening ? " (listening)" : ""));
    std::printf("%s tcp socket %s -> %s%s\n", who.c_str(), s.local.c_str(), s.remote.c_str(),
                s.listening ? " (listening)" : "");
    CHECK(s.local_loopback);
    if (!s.listening) {
      CHECK(s.remote_loopback);
      ++connected;
    }
  }
  INFO(who << " (pid " << pid << ") has " << sockets.size() << " tcp sockets");
  CHECK(connected > 0);  // or the check above proved nothing
}

/// Names of this host's network interfaces other than lo.
std::set<std::string> other_interfaces() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  REQUIRE(getifaddrs(&list) == 0);
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (std::string(it->ifa_name) != "lo") out.insert(it->ifa_name);
  }
  freeifaddrs(list);
  return out;
}

/// Checks UCX's description of a connection: lanes named, tcp lanes on lo only.
/// A lane line reads e.g. "lane[0]:  1:tcp/lo.0 md[0]  -> md[0]/tcp/sysdev[255] am".
/// The transport and device of a lane line ("tcp" and "lo" above), if `line` is one.
std::optional<std::pair<std::string, std::string>> lane_of(const std::string& line) {
  const auto npos = std::string::npos;
  std::size_t p = line.find("lane[");
  if (p == npos) return std::nullopt;
  p += 5;
  auto skip = [&](auto&& in_class) {
    const std::size_t from = p;
    while (p < line.size() && in_class(static_cast<unsigned char>(line[p]))) ++p;
    return p > from;
  };
  auto digit = [](unsigned char c) { return std::isdigit(c) != 0; };
  auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  auto name = [](unsigned char c) { return std::isalnum(c) != 0 || c == '_'; };
  if (!skip(digit) || line.compare(p, 2, "]:") != 0) return std::nullopt;
  p += 2;
  if (!skip(space) || !skip(digit) || p >= line.size() || line[p] != ':') return std::nullopt;
  const std::size_t tl = ++p;
  if (!skip(name) || p >= line.size() || line[p] != '/') return std::nullopt;
  const std::string transport = line.substr(tl, p - tl);
  const std::size_t dev = ++p;
  const std::size_t end = line.find_first_of(" \t", p);  // "lo.0" ends before whitespace
  if (end == npos) return std::nullopt;
  const std::size_t dot = line.rfind('.', end);
  if (dot == npos || dot <= dev || dot + 1 == end) return std::nullopt;
  for (std::size_t i = dot + 1; i < end; ++i) {
    if (!digit(static_cast<unsigned char>(line[i]))) return std::nullopt;
  }
  return std::make_pair(transport, line.substr(dev, dot - dev));
}

void check_lanes(const std::string& text, const std::string& mode) {
  const auto others = other_interfaces();
  int lanes = 0, tcp_lanes = 0;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto lane = lane_of(line);
    if (!lane) continue;
    INFO("lane: " << line);
    ++lanes;
    if (lane->first == "tcp") {
      ++tcp_lanes;
      CHECK(lane->second == "lo");
    }
    for (const auto& name : others) CHECK(line.find("/" + name + ".") == std::string::npos);
  }
  INFO(text);
  CHECK(lanes > 0);
  if (mode == "tcp") CHECK(tcp_lanes > 0);
}

}  // namespace

TEST_CASE("test traffic stays on 127.0.0.0/8", "[integration]") {
  const std::string mode = GENERATE(as<std::string>{}, "tcp", "shm");
  INFO("mode " << mode);
  // The server process inherits this environment.
  unsetenv("UCX_NET_DEVICES");
  testing::TestSystem t;
  auto& sys = t.sys;
  auto [server, peer] = testing::start_test_server({"--mode", mode});
  actors::GatewayConfig gc;
  gc.transport.mode = mode == "shm" ? transport::Mode::shm : transport::Mode::tcp;
  auto started = actors::Gateway::start(sys, gc);
  REQUIRE(started.ok());
  std::shared_ptr<actors::Gateway> gw = *started;
  struct Stop {
    std::shared_ptr<actors::Gateway> gw;
    ~Stop() { gw->stop(); }
  } stop{gw};
  caf::scoped_actor self{sys};

  // Small calls (eager) and large ones both ways (rendezvous lanes).
  for (int i = 0; i < 3; ++i) REQUIRE(actors::call_unary(self, *gw, peer, "test.rpc_square", testing::test_request(i), 20s).ok());
  Buffer big = Buffer::allocate(std::size_t{4} << 20);
  std::memset(big.data(), 7, big.size());
  REQUIRE(actors::call_unary(self, *gw, peer, "test.rpc_hash", big, 20s).ok());
  Buffer make = Buffer::allocate(16);
  const std::uint64_t size = std::uint64_t{4} << 20, seed = 3;
  std::memcpy(make.data(), &size, 8);
  std::memcpy(make.data() + 8, &seed, 8);
  auto made = actors::call_unary(self, *gw, peer, "test.rpc_make", make, 20s);
  REQUIRE(made.ok());
  CHECK(made->size() == size);

  auto described = gw->describe(peer);
  REQUIRE(described.wait_for(20s) == std::future_status::ready);
  const std::string text = described.get();
  std::printf("mode %s, connection to %s as UCX describes it:\n%s\n", mode.c_str(), peer.c_str(), text.c_str());
  check_lanes(text, mode);

  check_sockets(getpid(), "test process");
  check_sockets(server->pid(), "server process");
}
