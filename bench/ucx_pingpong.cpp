// apiary_ucx_pingpong: a bare-UCX reference for `apiary bench transport`.
//
// Two processes on 127.0.0.1 connected through a UCP sockaddr listener exchange active
// messages: 64 B request / 64 B reply round trips (`kind=rtt`), or a one-way stream of
// large rendezvous messages (`kind=bw`). Only UCX and fmt are used, so the figure is
// what the hardware path costs before any apiary layer is added. See bench/README.md.
//
//   apiary_ucx_pingpong --server [--port 0] [--tls tcp|shm] [--busy]   prints "port N"
//   apiary_ucx_pingpong --port N [--tls ..] [--busy] [--iters N] [--bw 16M]
//   apiary_ucx_pingpong --pair [...]      forks the server itself, prints the client's line
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <ucp/api/ucp.h>

#include "bench/ucx_pingpong_peer.hpp"

namespace {

namespace am = apiary::bench::pingpong::am;
using apiary::bench::pingpong::Clock;
using apiary::bench::pingpong::Options;
using apiary::bench::pingpong::Peer;

constexpr const char* usage_text =
    "usage: apiary_ucx_pingpong (--server | --port N | --pair) [options]\n"
    "  --server        listen on 127.0.0.1:--port (0 = ephemeral), print 'port N', serve one client\n"
    "  --pair          fork a server, run the client against it, print the client's result line\n"
    "  --host H        server address for the client (127.0.0.1)\n"
    "  --port N        server port (client: required unless --pair)\n"
    "  --tls tcp|shm   tcp: UCX TLS=tcp, err mode PEER; shm: TLS=tcp,sm,self, err mode NONE (tcp)\n"
    "  --busy          busy-poll ucp_worker_progress instead of sleeping on the worker event fd\n"
    "  --size B        request/reply payload of the rtt test in bytes (64, at most 4096)\n"
    "  --bw SIZE       one-way bandwidth test with SIZE-byte rendezvous messages (e.g. 16M)\n"
    "  --window N      bandwidth test: sends in flight (4)\n"
    "  --iters N       timed iterations (rtt 20000, bw 64)\n"
    "  --warmup N      untimed iterations first (rtt 1000, bw 4)\n"
    "  --timeout S     give up after S seconds (30)\n"
    "  --cpu N         pin this process to CPU N\n"
    "  --pin           --pair: pin server and client to two different allowed CPUs\n"
    "  --info          print the endpoint's lanes (ucp_ep_print_info) to stderr\n";

/// Parses "65536", "64K", "16M", "16MiB", "1G" into bytes; false when malformed.
bool parse_size(const std::string& text, std::uint64_t& out) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return false;
  std::string unit(end);
  if (unit.size() > 1 && (unit.substr(1) == "iB" || unit.substr(1) == "B")) unit.resize(1);
  std::uint64_t mult = 1;
  if (unit == "K" || unit == "k") mult = 1ULL << 10;
  else if (unit == "M" || unit == "m") mult = 1ULL << 20;
  else if (unit == "G" || unit == "g") mult = 1ULL << 30;
  else if (!unit.empty() && unit != "B") return false;
  out = v * mult;
  return true;
}

/// Reads argv into `o`; prints what was wrong and returns false on a bad argument.
bool parse_args(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= argc) {
        fmt::print(stderr, "error: {} expects a value; see --help\n", a);
        return false;
      }
      out = argv[++i];
      return true;
    };
    auto number = [&](std::uint64_t& out) {
      std::string v;
      if (!value(v)) return false;
      if (!parse_size(v, out)) {
        fmt::print(stderr, "error: {} expects a number such as 64 or 16M, got '{}'\n", a, v);
        return false;
      }
      return true;
    };
    std::uint64_t n = 0;
    bool ok = true;
    if (a == "--server") o.role = Options::server;
    else if (a == "--pair") o.role = Options::pair;
    else if (a == "--busy") o.busy = true;
    else if (a == "--pin") o.pin = true;
    else if (a == "--info") o.info = true;
    else if (a == "--host") ok = value(o.host);
    else if (a == "--tls") ok = value(o.tls);
    else if (a == "--port") { ok = number(n); o.port = static_cast<int>(n); o.port_given = true; }
    else if (a == "--size") { ok = number(n); o.size = n; }
    else if (a == "--bw") { ok = number(n); o.bw_size = n; }
    else if (a == "--window") { ok = number(n); o.window = static_cast<int>(n); }
    else if (a == "--iters") { ok = number(n); o.iters = n; }
    else if (a == "--warmup") { ok = number(n); o.warmup = static_cast<std::int64_t>(n); }
    else if (a == "--timeout") { ok = number(n); o.timeout_s = static_cast<int>(n); }
    else if (a == "--cpu") { ok = number(n); o.cpu = static_cast<int>(n); }
    else if (a == "--help" || a == "-h") { fmt::print("{}", usage_text); std::exit(0); }
    else {
      fmt::print(stderr, "error: unknown argument '{}'\n{}", a, usage_text);
      return false;
    }
    if (!ok) return false;
  }
  if (o.tls != "tcp" && o.tls != "shm") {
    fmt::print(stderr, "error: --tls expects 'tcp' or 'shm', got '{}'\n", o.tls);
    return false;
  }
  if (o.role == Options::client && !o.port_given) {
    fmt::print(stderr, "error: the client needs --port N (the server prints 'port N'), or use --pair\n");
    return false;
  }
  if (o.port < 0 || o.port > 65535 || o.size == 0 || o.size > 4096 || o.window < 1 ||
      o.timeout_s < 1) {
    fmt::print(stderr, "error: expected port 0..65535, --size 1..4096, --window >= 1, --timeout >= 1\n");
    return false;
  }
  if (o.iters == 0) o.iters = o.bw_size != 0 ? 64 : 20000;
  if (o.warmup < 0) o.warmup = o.bw_size != 0 ? 4 : 1000;
  return true;
}

/// Median / p99 / mean of round-trip samples in microseconds, as one result line.
void print_rtt(const Options& o, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  const std::size_t n = us.size();
  const double median = n % 2 == 1 ? us[n / 2] : (us[n / 2 - 1] + us[n / 2]) / 2.0;
  const std::size_t p99_index = std::min(n - 1, static_cast<std::size_t>((n * 99 + 99) / 100) - 1);
  double sum = 0;
  for (double v : us) sum += v;
  fmt::print("result kind=rtt tls={} mode={} size={} iters={} median_us={:.2f} p99_us={:.2f} "
             "mean_us={:.2f}\n",
             o.tls, o.busy ? "busy" : "efd", o.size, n, median, us[p99_index], sum / n);
}

/// Client: 64 B ping, wait for the 64 B pong, repeat; one sample per round trip.
bool run_rtt(Peer& p, const Options& o) {
  std::vector<char> payload(o.size, 'p');
  std::vector<double> samples;
  samples.reserve(o.iters);
  const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  const std::uint64_t total = o.iters + static_cast<std::uint64_t>(o.warmup);
  for (std::uint64_t i = 0; i < total; ++i) {
    if (i == static_cast<std::uint64_t>(o.warmup) && o.info) ucp_ep_print_info(p.ep, stderr);
    const std::uint64_t want = p.pongs + 1;
    const auto t0 = Clock::now();
    if (!p.send(p.ep, am::ping, nullptr, 0, payload.data(), payload.size(), 0)) return false;
    if (!p.drive([&] { return p.pongs >= want; }, deadline, "pong")) return false;
    const auto t1 = Clock::now();
    if (i >= static_cast<std::uint64_t>(o.warmup))
      samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  print_rtt(o, samples);
  return true;
}

/// Client: `count` rendezvous sends of the buffer (at most `window` in flight), then a
/// fin carrying the running total; returns once the server acks having received it all.
bool stream(Peer& p, const Options& o, const std::vector<char>& buf, std::uint64_t count,
            Clock::time_point deadline) {
  for (std::uint64_t i = 0; i < count; ++i) {
    if (!p.drive([&] { return p.inflight < o.window; }, deadline, "send window")) return false;
    if (!p.send(p.ep, am::data, nullptr, 0, buf.data(), buf.size(), UCP_AM_SEND_FLAG_RNDV))
      return false;
    ++p.data_sent;
  }
  p.fin_header = p.data_sent;  // header must stay valid until the send completes
  const std::uint64_t want = p.acks + 1;
  if (!p.send(p.ep, am::fin, &p.fin_header, sizeof p.fin_header, nullptr, 0, 0)) return false;
  return p.drive([&] { return p.acks >= want; }, deadline, "ack");
}

/// Client: one-way bandwidth of SIZE-byte active messages, MiB/s over the timed part.
bool run_bw(Peer& p, const Options& o) {
  std::vector<char> buf(o.bw_size, 'd');  // written once so its pages are resident
  const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  if (!stream(p, o, buf, static_cast<std::uint64_t>(o.warmup), deadline)) return false;
  if (o.info) ucp_ep_print_info(p.ep, stderr);
  const auto t0 = Clock::now();
  if (!stream(p, o, buf, o.iters, deadline)) return false;
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double mib = static_cast<double>(o.bw_size) * static_cast<double>(o.iters) / (1024.0 * 1024.0);
  fmt::print("result kind=bw tls={} mode={} size={} iters={} window={} seconds={:.4f} MiBps={:.1f}\n",
             o.tls, o.busy ? "busy" : "efd", o.bw_size, o.iters, o.window, s, mib / s);
  return true;
}

}  // namespace

int apiary::bench::pingpong::run_client(const Options& o) {
  Peer p;
  if (!p.open(o) || !p.connect(o.host, o.port)) return 1;
  const bool ok = o.bw_size != 0 ? run_bw(p, o) : run_rtt(p, o);
  if (!ok) return p.timed_out ? apiary::bench::pingpong::exit_timed_out : 1;
  std::fflush(stdout);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  if (!p.send(p.ep, am::quit, nullptr, 0, nullptr, 0, 0) ||
      !p.drive([&] { return p.byes > 0; }, deadline, "bye"))
    return 1;
  p.close_ep(deadline);
  return 0;
}

namespace {

/// Server role: listen, print "port N", serve one client until it says quit.
int run_server(const Options& o) {
  Peer p;
  int port = 0;
  if (!p.open(o) || !p.listen(o.port, port)) return 1;
  fmt::print("port {}\n", port);
  std::fflush(stdout);
  const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  if (!p.drive([&] { return p.quit_seen && p.inflight == 0; }, deadline, "quit from the client"))
    return 1;
  // The client closes first (after our bye); closing here too could reset the connection
  // before the bye reaches it. Wait briefly for its disconnect, then tear down.
  if (p.drive([&] { return p.failed; }, Clock::now() + std::chrono::seconds(1), nullptr))
    p.close_ep(Clock::now() + std::chrono::seconds(1));  // force: the client is gone
  if (p.unexpected_am != 0)
    fmt::print(stderr, "warning: dropped {} active messages to unused ids\n", p.unexpected_am);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_args(argc, argv, o)) return 2;
  if (o.cpu >= 0 && !apiary::bench::pingpong::pin_to(o.cpu)) return 1;
  switch (o.role) {
    case Options::server: return run_server(o);
    case Options::client: return apiary::bench::pingpong::run_client(o);
    case Options::pair: return apiary::bench::pingpong::run_pair(o, argv[0]);
  }
  return 2;
}
