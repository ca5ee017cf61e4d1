#pragma once
/// The figures one DHT benchmark child reports and the line format it prints them in.
/// Shared by both children of `apiary bench dht` (apiary's and the OpenDHT peer, which
/// links nothing of apiary), so this header uses the standard library only.
///
/// Every result is one line, "dht_result" followed by space-separated key=value pairs:
///   dht_result phase=bootstrap system=S nodes=N ms=... ready=R threads=T rss_kb= fds=
///   dht_result phase=put system=S nodes=N conc=C n=P mean_ms= p50_ms= p99_ms= max_ms=
///              success= wall_s= ops_per_s= complete=0|1
///   dht_result phase=get ... (as put) first_p50_ms= first_p99_ms=
///   dht_result phase=proc system=S nodes=N vmhwm_kb= threads= fds= total_s=
#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace apiary::bench::dht_report {

/// The benchmark's clock.
using Clock = std::chrono::steady_clock;

/// Milliseconds from `a` to `b`.
inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

/// Latency summary of one phase, milliseconds; p50 = sorted[n/2], p99 = sorted[0.99 n]
/// (the shared OpenDHT harness's definitions, so both systems are ranked alike).
struct LatencyStats {
  double mean = 0, p50 = 0, p99 = 0, max = 0;
  std::size_t n = 0;
};

/// Summarizes `samples` (milliseconds); all zero when empty.
inline LatencyStats summarize(std::vector<double> samples) {
  LatencyStats s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  double sum = 0;
  for (const double x : samples) sum += x;
  s.n = samples.size();
  s.mean = sum / static_cast<double>(s.n);
  s.p50 = samples[s.n / 2];
  s.p99 = samples[std::min(s.n - 1, static_cast<std::size_t>(static_cast<double>(s.n) * 0.99))];
  s.max = samples.back();
  return s;
}

/// The numeric part of a /proc/self/status field ("VmHWM", "Threads"); -1 if absent.
inline long proc_status_number(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.compare(0, prefix.size(), prefix) == 0) return std::stol(line.substr(prefix.size()));
  return -1;
}

/// CPU time (user + system) this process has used so far, milliseconds.
inline double cpu_ms() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return (static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

/// Open file descriptors of this process.
inline int open_fds() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n - 3;  // ".", ".." and the directory's own descriptor
}

/// What a child runs; both children take the same flags:
/// --nodes N --ops P --conc C1,C2,... --value-bytes B --seed S --timeout-s T [--latest]
/// [--mode tcp|shm] [--per-gateway K]
struct ChildArgs {
  std::size_t nodes = 32;                 ///< DHT nodes hosted in the process
  std::size_t ops = 1000;                 ///< puts, then as many gets, per concurrency
  std::vector<std::size_t> concs{1, 16};  ///< operations in flight; one put+get round each
  std::size_t value_bytes = 64;           ///< bytes per stored value
  std::uint64_t seed = 1;                 ///< seeds keys, values and node picks
  int timeout_s = 90;                     ///< per phase: give up waiting after this many seconds
  bool latest = false;                    ///< apiary only: get(key, latest=true)
  bool authorized = false;                ///< apiary only: every call authorized (a swarm authority of the child's)
  std::string mode = "tcp";               ///< apiary only: UCX lanes, "tcp" or "shm"
  std::size_t per_gateway = 64;           ///< apiary only: nodes sharing one gateway (transport)
  std::string host = "transport";         ///< apiary only: the nodes' role host, "actor" or "transport"
};

/// Parses the child flags; on a bad flag returns false with `error` saying which.
inline bool parse_child_args(int argc, char** argv, ChildArgs& out, std::string& error) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--latest") {
      out.latest = true;
      continue;
    }
    if (flag == "--authorized") {
      out.authorized = true;
      continue;
    }
    if (i + 1 >= argc) {
      error = "expected a value after " + flag + ", got the end of the arguments";
      return false;
    }
    const std::string v = argv[++i];
    char* end = nullptr;
    // A flag that takes one of two words.
    bool bad = false;
    const auto one_of = [&](const char* name, const char* a, const char* b, std::string& to) {
      if (flag != name) return false;
      bad = v != a && v != b;
      if (bad) error = flag + ": expected " + a + " or " + b + ", got '" + v + "'";
      else to = v;
      return true;
    };
    if (one_of("--mode", "tcp", "shm", out.mode) || one_of("--host", "actor", "transport", out.host)) {
      if (bad) return false;
      continue;
    }
    if (flag == "--conc") {
      out.concs.clear();
      for (std::size_t at = 0; at <= v.size();) {
        const std::size_t comma = std::min(v.find(',', at), v.size());
        const unsigned long c = std::strtoul(v.substr(at, comma - at).c_str(), &end, 10);
        if (c == 0 || *end != 0) {
          error = "--conc: expected positive integers separated by commas, got '" + v + "'";
          return false;
        }
        out.concs.push_back(c);
        at = comma + 1;
      }
      continue;
    }
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end != 0 || n == 0) {
      error = flag + ": expected a positive integer, got '" + v + "'";
      return false;
    }
    if (flag == "--nodes") out.nodes = n;
    else if (flag == "--ops") out.ops = n;
    else if (flag == "--value-bytes") out.value_bytes = n;
    else if (flag == "--seed") out.seed = n;
    else if (flag == "--timeout-s") out.timeout_s = static_cast<int>(n);
    else if (flag == "--per-gateway") out.per_gateway = n;
    else {
      error = "unknown flag '" + flag +
              "'; expected --nodes --ops --conc --value-bytes --seed --timeout-s --latest --authorized --mode --per-gateway "
              "--host";
      return false;
    }
  }
  if (out.nodes < 2) {
    error = "--nodes: expected at least 2 (a get runs on a node other than the storer)";
    return false;
  }
  return true;
}

/// One round's operations, the same for both systems: op i puts value[i] under key[i]
/// from node putter[i], then gets key[i] from node getter[i] != putter[i].
struct Workload {
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::vector<std::size_t> putter, getter;
};

/// The workload of round `round` (distinct keys per round and seed).
inline Workload make_workload(const ChildArgs& a, std::size_t round) {
  std::mt19937_64 rng(a.seed * 1000003u + round);
  std::uniform_int_distribution<std::size_t> pick(0, a.nodes - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  Workload w;
  for (std::size_t i = 0; i < a.ops; ++i) {
    w.keys.push_back("apiary-bench-key-" + std::to_string(a.seed) + "-" + std::to_string(round) + "-" +
                     std::to_string(i));
    std::string v(a.value_bytes, '\0');
    for (auto& c : v) c = static_cast<char>(byte(rng));
    w.values.push_back(std::move(v));
    w.putter.push_back(pick(rng));
    std::size_t g = pick(rng);
    while (g == w.putter.back()) g = pick(rng);
    w.getter.push_back(g);
  }
  return w;
}

/// Prints the result line of a put or get phase. `cpu_ms`: process CPU time the phase
/// used. `first` (gets only): latency until the correct value first arrived, when the
/// system reports it earlier than completion. `extra`: more " key=value" text.
inline void print_op_line(const char* phase, const char* system, std::size_t nodes, std::size_t conc,
                          std::size_t ops, const LatencyStats& s, double success, double wall_s, bool complete,
                          double cpu_ms, const LatencyStats* first = nullptr, const std::string& extra = {}) {
  std::printf("dht_result phase=%s system=%s nodes=%zu conc=%zu n=%zu mean_ms=%.3f p50_ms=%.3f p99_ms=%.3f "
              "max_ms=%.3f success=%.4f wall_s=%.3f ops_per_s=%.0f complete=%d",
              phase, system, nodes, conc, ops, s.mean, s.p50, s.p99, s.max, success, wall_s,
              wall_s > 0 ? static_cast<double>(ops) / wall_s : 0.0, complete ? 1 : 0);
  std::printf(" cpu_ms_per_op=%.3f", ops > 0 ? cpu_ms / static_cast<double>(ops) : 0.0);
  if (first) std::printf(" first_p50_ms=%.3f first_p99_ms=%.3f", first->p50, first->p99);
  std::printf("%s\n", extra.c_str());
  std::fflush(stdout);
}

/// Prints the bootstrap line: `ms` until every node was bootstrapped, `ready` nodes that were.
inline void print_bootstrap_line(const char* system, std::size_t nodes, double ms, std::size_t ready,
                                 const std::string& extra = {}) {
  std::printf("dht_result phase=bootstrap system=%s nodes=%zu ms=%.1f ready=%zu threads=%ld rss_kb=%ld fds=%d%s%s\n",
              system, nodes, ms, ready, proc_status_number("Threads"), proc_status_number("VmRSS"), open_fds(),
              extra.empty() ? "" : " ", extra.c_str());
  std::fflush(stdout);
}

/// Prints the process line: peak RSS, threads and descriptors now, seconds since `start`.
inline void print_proc_line(const char* system, std::size_t nodes, Clock::time_point start) {
  std::printf("dht_result phase=proc system=%s nodes=%zu vmhwm_kb=%ld threads=%ld fds=%d total_s=%.2f\n", system,
              nodes, proc_status_number("VmHWM"), proc_status_number("Threads"), open_fds(),
              ms_between(start, Clock::now()) / 1000.0);
  std::fflush(stdout);
}

}  // namespace apiary::bench::dht_report
