// apiary_delay_line: a wide-area link between two network namespaces, for kernels
// without tc netem. It opens two TAP devices (one L2 segment), which the caller moves
// into the namespaces and addresses, and forwards every frame from one to the other
// after the link's serialization (bytes / rate, first in first out) and its one-way
// delay. A direction's queue holds at most --queue-bytes; a frame beyond it is dropped,
// as a router's tail drop.
//
//   apiary_delay_line --taps A B --rate-mbit 100 --delay-ms 50 [--queue-bytes N]
//
// It prints "ready" once both devices exist, and runs until SIGTERM or SIGINT, then
// prints per direction the frames and bytes forwarded and dropped.
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};

int open_tap(const std::string& name) {
  const int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  ifreq ifr{};
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (::ioctl(fd, TUNSETIFF, &ifr) < 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

struct Frame {
  Clock::time_point due;
  std::vector<char> bytes;
};

/// One direction: frames in flight, the time the link is free again, counters.
struct Direction {
  std::deque<Frame> queue;
  Clock::time_point free_at{};
  std::size_t queued_bytes = 0;
  std::size_t frames = 0, bytes = 0, dropped = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A link of a given rate and delay between two TAP devices"};
  std::vector<std::string> taps;
  double rate_mbit = 100;
  double delay_ms = 50;
  std::size_t queue_bytes = std::size_t{16} << 20;
  app.add_option("--taps", taps, "The two TAP devices to make")->expected(2)->required();
  app.add_option("--rate-mbit", rate_mbit, "Megabits per second of each direction")->check(CLI::PositiveNumber);
  app.add_option("--delay-ms", delay_ms, "One-way delay of each direction")->check(CLI::NonNegativeNumber);
  app.add_option("--queue-bytes", queue_bytes, "Bytes a direction holds before it drops frames");
  CLI11_PARSE(app, argc, argv);
  std::array<int, 2> fd{open_tap(taps[0]), open_tap(taps[1])};
  if (fd[0] < 0 || fd[1] < 0) {
    std::fprintf(stderr, "apiary_delay_line: could not make TAP devices %s and %s: %s (needs root and /dev/net/tun)\n",
                 taps[0].c_str(), taps[1].c_str(), std::strerror(errno));
    return 1;
  }
  std::signal(SIGTERM, [](int) { g_stop = true; });
  std::signal(SIGINT, [](int) { g_stop = true; });
  std::printf("ready\n");
  std::fflush(stdout);
  const auto delay = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(delay_ms));
  const double ns_per_byte = 8e9 / (rate_mbit * 1e6);
  std::array<Direction, 2> dir;  // dir[i]: frames read from tap i, written to tap 1 - i
  std::vector<char> buffer(65536);
  while (!g_stop) {
    auto now = Clock::now();
    for (int i = 0; i < 2; ++i) {  // deliver what is due
      Direction& d = dir[i];
      while (!d.queue.empty() && d.queue.front().due <= now) {
        Frame& f = d.queue.front();
        (void)::write(fd[1 - i], f.bytes.data(), f.bytes.size());  // a full device drops, as a wire would
        d.queued_bytes -= f.bytes.size();
        d.queue.pop_front();
      }
    }
    int timeout_ms = 100;
    for (const Direction& d : dir) {
      if (d.queue.empty()) continue;
      const auto wait = std::chrono::duration_cast<std::chrono::microseconds>(d.queue.front().due - now).count();
      timeout_ms = std::min(timeout_ms, static_cast<int>(std::max<long long>(0, (wait + 999) / 1000)));
    }
    std::array<pollfd, 2> polls{pollfd{fd[0], POLLIN, 0}, pollfd{fd[1], POLLIN, 0}};
    if (::poll(polls.data(), polls.size(), timeout_ms) <= 0) continue;
    now = Clock::now();
    for (int i = 0; i < 2; ++i) {
      if ((polls[i].revents & POLLIN) == 0) continue;
      for (;;) {
        const ssize_t n = ::read(fd[i], buffer.data(), buffer.size());
        if (n <= 0) break;
        Direction& d = dir[i];
        if (d.queued_bytes + static_cast<std::size_t>(n) > queue_bytes) {
          ++d.dropped;
          continue;
        }
        const auto start = std::max(now, d.free_at);
        d.free_at = start + std::chrono::nanoseconds(static_cast<long long>(static_cast<double>(n) * ns_per_byte));
        d.queue.push_back(Frame{d.free_at + delay, std::vector<char>(buffer.data(), buffer.data() + n)});
        d.queued_bytes += static_cast<std::size_t>(n);
        ++d.frames;
        d.bytes += static_cast<std::size_t>(n);
      }
    }
  }
  for (int i = 0; i < 2; ++i) {
    std::printf("%s -> %s: %zu frames, %zu bytes, %zu dropped\n", taps[i].c_str(), taps[1 - i].c_str(), dir[i].frames,
                dir[i].bytes, dir[i].dropped);
  }
  return 0;
}
