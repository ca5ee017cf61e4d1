// `apiary bench transport`, client side: measures apiary's figures per mode, the peers'
// figures in the same run, and prints them side by side with ratios and targets.
#include "bench/transport_bench.hpp"

#include <unistd.h>


#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "bench/child_process.hpp"
#include "bench/peers.hpp"
#include "bench/transport_bench_apiary.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/identity/key_file.hpp"

namespace apiary::bench {
namespace {

namespace tb = transport_bench;

/// A swarm authority key in a file of its own, for the authorized session; removed after.
class TempAuthority {
 public:
  TempAuthority() {
    std::string pattern = (std::filesystem::temp_directory_path() / "apiary-bench-authority-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) return;
    dir_ = pattern;
    auto key = messages::Ed25519PrivateKey::generate();
    if (key && messages::save_key_file(dir_ + "/authority.key", *key)) path_ = dir_ + "/authority.key";
  }
  ~TempAuthority() {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  TempAuthority(const TempAuthority&) = delete;
  TempAuthority& operator=(const TempAuthority&) = delete;
  /// The key file, or "" when it could not be written.
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
};

/// Iteration counts after --quick.
struct Counts {
  std::size_t rtt, rate, in_flight, bw_size, bw, perftest_lat;
};

Counts counts_of(const TransportBenchOptions& o) {
  Counts c{o.rtt_iters, o.rate_calls, o.rate_in_flight, o.bw_size, o.bw_iters, 4 * o.rtt_iters};
  if (o.quick) {
    c.rtt = std::min<std::size_t>(c.rtt, 500);
    c.rate = std::min<std::size_t>(c.rate, 4000);
    c.bw = std::min<std::size_t>(c.bw, 8);
    c.perftest_lat = std::min<std::size_t>(c.perftest_lat, 5000);
  }
  return c;
}

/// One table row: a figure of apiary, the peer's, their ratio against a target.
struct Row {
  std::string figure;
  std::string apiary, peer;
  std::optional<double> ratio;   ///< apiary / peer, when both were measured
  std::string target;            ///< "<= 2.00x", ">= 0.90x", or "reference"
  std::optional<bool> met;
};

/// Collects rows and failure notes, then prints the table.
class Table {
 public:
  /// A cell's text: the figure, or "n/a (code) [k]" with the full reason noted as [k].
  template <class T, class Format>
  std::string cell(const Result<T>& r, Format format) {
    if (r) return format(*r);
    const std::string why = r.error().what();
    auto at = std::find(notes_.begin(), notes_.end(), why);
    if (at == notes_.end()) at = notes_.insert(notes_.end(), why);
    return fmt::format("n/a ({}) [{}]", to_string(r.error().code), at - notes_.begin() + 1);
  }
  /// Adds a row; `limit` > 0 with `at_most` true: ratio must be ≤ limit, else ≥ limit.
  void add(std::string figure, std::string apiary, std::string peer, std::optional<double> ratio, double limit,
           bool at_most) {
    Row row{std::move(figure), std::move(apiary), std::move(peer), ratio, "reference", std::nullopt};
    if (limit > 0) {
      row.target = fmt::format("{} {:.2f}x", at_most ? "<=" : ">=", limit);
      if (ratio) row.met = at_most ? *ratio <= limit : *ratio >= limit;
    }
    rows_.push_back(std::move(row));
  }
  void print(const std::string& title) const {
    std::vector<std::vector<std::string>> lines = {{"figure", "apiary", "peer", "ratio", "target", "verdict"}};
    for (const auto& r : rows_)
      lines.push_back({r.figure, r.apiary, r.peer, r.ratio ? fmt::format("{:.2f}x", *r.ratio) : "-", r.target,
                       r.met ? (*r.met ? "ok" : "MISSED") : "-"});
    print_table(title, lines);
    for (std::size_t i = 0; i < notes_.size(); ++i) fmt::print("[{}] {}\n", i + 1, notes_[i]);
  }

 private:
  std::vector<Row> rows_;
  std::vector<std::string> notes_;
};

/// "16 MiB", "64 KiB", "100 B".
std::string size_text(std::size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

std::string rtt_text(double median, double p99, double mean) {
  return fmt::format("{:.1f} us (p99 {:.1f}, mean {:.1f})", median, p99, mean);
}

template <class A, class B>
std::optional<double> ratio_of(const Result<A>& a, const Result<B>& b, double (*va)(const A&),
                               double (*vb)(const B&)) {
  if (!a || !b || vb(*b) <= 0) return std::nullopt;
  return va(*a) / vb(*b);
}

double rtt_median(const tb::RttFigure& f) { return f.median_us; }
double pingpong_median(const PingpongFigure& f) { return f.median_us; }
double pingpong_rate(const PingpongFigure& f) { return f.median_us > 0 ? 1e6 / f.median_us : 0; }
double pingpong_bw(const PingpongFigure& f) { return f.mib_per_s; }
double perftest_rtt(const PerftestFigure& f) { return f.rtt_us; }
double perftest_bw(const PerftestFigure& f) { return f.mib_per_s; }
double plain(const double& v) { return v; }

std::string switches_text(const Result<tb::RttFigure>& r) {
  if (!r) return "n/a";
  return fmt::format("client {:.2f}, server {}", r->client_switches_per_call,
                     r->server_switches_per_call < 0 ? std::string("n/a")
                                                     : fmt::format("{:.2f}", r->server_switches_per_call));
}

/// Measures one mode and prints its table; false when an apiary figure is missing.
bool bench_mode(const std::string& mode, const TransportBenchOptions& o, const Counts& n, const std::string& exe,
                const std::vector<int>& cpus) {
  fmt::print("measuring {} ...\n", mode);
  std::fflush(stdout);
  PeerConfig peer_cfg;
  peer_cfg.timeout = std::chrono::seconds(o.quick ? 30 : 60);
  const std::optional<std::pair<int, int>> two_cpus =
      cpus.size() >= 2 ? std::optional<std::pair<int, int>>({cpus[0], cpus[1]}) : std::nullopt;

  tb::SessionPlan plan;
  plan.exe = exe;
  plan.mode = mode;
  plan.rtt_iters = n.rtt;
  plan.rate_calls = n.rate;
  plan.rate_in_flight = n.in_flight;
  plan.bw_size = n.bw_size;
  plan.bw_iters = n.bw;
  plan.idle = std::chrono::milliseconds(o.quick ? 300 : 1000);
  const tb::SessionFigures efd = tb::run_session(plan);
  plan.idle = std::chrono::milliseconds(0);
  tb::SessionPlan direct_plan = plan;  // the same round trip, roles on the transport-thread host
  direct_plan.direct = true;
  direct_plan.rate_calls = direct_plan.bw_iters = 0;
  const tb::SessionFigures efd_direct = tb::run_session(direct_plan);
  std::optional<tb::SessionFigures> sealed, authorized;
  if (o.secure) {
    tb::SessionPlan secure_plan = plan;  // the same session, encrypted
    secure_plan.secure = true;
    secure_plan.rate_calls = 0;
    sealed = tb::run_session(secure_plan);
    const TempAuthority authority;  // and encrypted with every call authorized
    if (!authority.path().empty()) {
      secure_plan.authority = authority.path();
      authorized = tb::run_session(secure_plan);
    } else {
      authorized.emplace();
      authorized->fail(make_error(errc::io, "could not write a temporary authority key file"));
    }
  }
  const auto bare_efd = run_bare_pingpong(mode, false, n.rtt, peer_cfg);
  const auto perf_lat = run_perftest("tag_lat", mode, 64, n.perftest_lat, peer_cfg);
  const auto perf_bw = run_perftest("ucp_am_bw", mode, n.bw_size, n.bw, peer_cfg);
  const auto bare_bw = run_bare_bw(mode, n.bw_size, n.bw, peer_cfg);
  std::optional<tb::SessionFigures> busy, busy_direct;
  std::optional<Result<PingpongFigure>> bare_busy;
  if (o.busy_poll) {
    // Busy-polling processes must not share a CPU: one spinner would starve the other.
    plan.busy = true;
    plan.cpus = two_cpus;
    plan.rate_calls = plan.bw_iters = 0;  // only the round trip
    busy = tb::run_session(plan);
    plan.direct = true;
    busy_direct = tb::run_session(plan);
    bare_busy = run_bare_pingpong(mode, true, n.rtt, peer_cfg);
  }

  Table t;
  const auto rtt_fmt = [](const tb::RttFigure& f) { return rtt_text(f.median_us, f.p99_us, f.mean_us); };
  const auto ping_fmt = [](const PingpongFigure& f) { return rtt_text(f.median_us, f.p99_us, f.mean_us); };
  const auto bw_fmt = [](double v) { return fmt::format("{:.0f} MiB/s", v); };
  t.add("RTT 64 B (efd) vs bare event-fd pingpong", t.cell(efd.rtt, rtt_fmt), t.cell(bare_efd, ping_fmt),
        ratio_of(efd.rtt, bare_efd, rtt_median, pingpong_median), 2.0, true);
  t.add("RTT 64 B (efd), transport-thread host, vs bare event-fd pingpong", t.cell(efd_direct.rtt, rtt_fmt),
        t.cell(bare_efd, ping_fmt), ratio_of(efd_direct.rtt, bare_efd, rtt_median, pingpong_median), 1.2, true);
  if (busy) {
    t.add("RTT 64 B (busy) vs ucx_perftest tag_lat RTT", t.cell(busy->rtt, rtt_fmt),
          t.cell(perf_lat, [](const PerftestFigure& f) { return fmt::format("{:.2f} us", f.rtt_us); }),
          ratio_of(busy->rtt, perf_lat, rtt_median, perftest_rtt), 3.0, true);
    t.add("RTT 64 B (busy) vs bare busy-poll pingpong", t.cell(busy->rtt, rtt_fmt), t.cell(*bare_busy, ping_fmt),
          ratio_of(busy->rtt, *bare_busy, rtt_median, pingpong_median), 0, true);
    t.add("RTT 64 B (busy), transport-thread host, vs bare busy-poll pingpong", t.cell(busy_direct->rtt, rtt_fmt),
          t.cell(*bare_busy, ping_fmt), ratio_of(busy_direct->rtt, *bare_busy, rtt_median, pingpong_median), 10.0,
          true);
  } else {
    t.add("RTT 64 B (efd) vs ucx_perftest tag_lat RTT (floor)", t.cell(efd.rtt, rtt_fmt),
          t.cell(perf_lat, [](const PerftestFigure& f) { return fmt::format("{:.2f} us", f.rtt_us); }),
          ratio_of(efd.rtt, perf_lat, rtt_median, perftest_rtt), 0, true);
  }
  t.add(fmt::format("bandwidth {} vs ucp_am_bw", size_text(n.bw_size)), t.cell(efd.mib_per_s, bw_fmt),
        t.cell(perf_bw, [&](const PerftestFigure& f) { return bw_fmt(f.mib_per_s); }),
        ratio_of(efd.mib_per_s, perf_bw, plain, perftest_bw), 0.9, false);
  t.add(fmt::format("bandwidth {} vs bare UCX AM (efd, 4 in flight)", size_text(n.bw_size)),
        t.cell(efd.mib_per_s, bw_fmt), t.cell(bare_bw, [&](const PingpongFigure& f) { return bw_fmt(f.mib_per_s); }),
        ratio_of(efd.mib_per_s, bare_bw, plain, pingpong_bw), 0, false);
  t.add(fmt::format("calls/s, {} in flight (peer: 1/RTT of bare efd pingpong)", n.in_flight),
        t.cell(efd.calls_per_s,
               [&](double v) {
                 return fmt::format("{:.0f} (call p99 {:.2f} ms, max {:.2f})", v, efd.rate_call_p99_us / 1e3,
                                    efd.rate_call_max_us / 1e3);
               }),
        t.cell(bare_efd, [](const PingpongFigure& f) { return fmt::format("{:.0f}", pingpong_rate(f)); }),
        ratio_of(efd.calls_per_s, bare_efd, plain, pingpong_rate), 0, false);
  if (sealed) {
    // Encrypted beside plaintext, both apiary's (the peers run plaintext).
    t.add("RTT 64 B (efd), encrypted vs plaintext apiary", t.cell(sealed->rtt, rtt_fmt), t.cell(efd.rtt, rtt_fmt),
          ratio_of(sealed->rtt, efd.rtt, rtt_median, rtt_median), 0, true);
    t.add(fmt::format("bandwidth {}, encrypted vs plaintext apiary", size_text(n.bw_size)),
          t.cell(sealed->mib_per_s, bw_fmt), t.cell(efd.mib_per_s, bw_fmt),
          ratio_of(sealed->mib_per_s, efd.mib_per_s, plain, plain), 0.7, false);
  }
  if (authorized) {
    // Every call signed and checked (core/rpc/auth.hpp) beside encryption alone.
    t.add("RTT 64 B (efd), encrypted + authorized vs encrypted apiary", t.cell(authorized->rtt, rtt_fmt),
          t.cell(sealed->rtt, rtt_fmt), ratio_of(authorized->rtt, sealed->rtt, rtt_median, rtt_median), 0, true);
    t.add(fmt::format("bandwidth {}, encrypted + authorized vs encrypted apiary", size_text(n.bw_size)),
          t.cell(authorized->mib_per_s, bw_fmt), t.cell(sealed->mib_per_s, bw_fmt),
          ratio_of(authorized->mib_per_s, sealed->mib_per_s, plain, plain), 0, false);
  }
  t.print(fmt::format("{} (UCX tls {}): {} round trips, {} calls, {} x {}", mode,
                      mode == "tcp" ? "tcp, err mode PEER" : "tcp,sm,self, err mode NONE", n.rtt, n.rate, n.bw,
                      size_text(n.bw_size)));
  fmt::print("thread hand-offs per call (voluntary context switches per 64 B round trip{}): efd: {}",
             efd.caf_workers > 0 ? fmt::format(", {} CAF threads per process", efd.caf_workers) : "",
             switches_text(efd.rtt));
  fmt::print("; efd, transport-thread host: {}", switches_text(efd_direct.rtt));
  if (busy) fmt::print("; busy: {}; busy, transport-thread host: {}", switches_text(busy->rtt),
                       switches_text(busy_direct->rtt));
  fmt::print("\n");
  const auto cpu_text = [](const Result<tb::RttFigure>& r) {
    return r && r->cpu_us_per_call >= 0 ? fmt::format("{:.1f} us", r->cpu_us_per_call) : std::string("n/a");
  };
  fmt::print("processor time, user and system, of both processes: per 64 B round trip (one call at a time) efd {}, "
             "transport-thread host {}; per call with {} in flight {}; an idle process {} a second\n",
             cpu_text(efd.rtt), cpu_text(efd_direct.rtt), n.in_flight,
             efd.rate_cpu_us_per_call >= 0 ? fmt::format("{:.1f} us", efd.rate_cpu_us_per_call) : std::string("n/a"),
             efd.idle_cpu_us_per_s >= 0 ? fmt::format("{:.1f} ms", efd.idle_cpu_us_per_s / 1e3) : std::string("n/a"));
  if (sealed && sealed->rtt && efd.rtt)
    fmt::print("encryption adds {:.1f} us to the median 64 B round trip (target: at most 10 us)\n",
               sealed->rtt->median_us - efd.rtt->median_us);
  if (authorized && authorized->rtt && sealed->rtt)
    fmt::print("authorization adds {:.1f} us to the median encrypted 64 B round trip (a token and a signature "
               "checked and made on each side)\n",
               authorized->rtt->median_us - sealed->rtt->median_us);
  if (efd.mib_per_s)
    fmt::print("minor page faults per {} payload (bandwidth run; {} = every page touched fresh): client {:.0f}, "
               "server {}\n", size_text(n.bw_size), n.bw_size / 4096, efd.client_faults_per_payload,
               efd.server_faults_per_payload < 0 ? std::string("n/a")
                                                 : fmt::format("{:.0f}", efd.server_faults_per_payload));
  if (mode == "shm")
    fmt::print("note: on shm lanes the bare event-fd pingpong seldom sleeps (a few us median, under one "
               "context switch per round trip for both processes), so the efd ratio here mostly counts apiary's thread wake-ups\n");
  std::fflush(stdout);
  return efd.rtt && efd_direct.rtt && efd.calls_per_s && efd.mib_per_s && (!busy || (busy->rtt && busy_direct->rtt)) &&
         (!sealed || (sealed->rtt && sealed->mib_per_s)) && (!authorized || (authorized->rtt && authorized->mib_per_s));
}

}  // namespace

int run_transport_bench(const TransportBenchOptions& o) {
  if (o.modes.empty()) {
    fmt::print("error: expected at least one mode (tcp, shm), got none\n");
    return 1;
  }
  for (const auto& m : o.modes)
    if (m != "tcp" && m != "shm") {
      fmt::print("error: expected mode tcp or shm, got '{}'\n", m);
      return 1;
    }
  if (o.rtt_iters == 0 || o.rate_calls == 0 || o.rate_in_flight == 0 || o.bw_size == 0 || o.bw_iters == 0) {
    fmt::print("error: expected every count and size > 0 (rtt {}, rate {}, in flight {}, bw size {}, bw iters {})\n",
               o.rtt_iters, o.rate_calls, o.rate_in_flight, o.bw_size, o.bw_iters);
    return 1;
  }
  ::setenv("UCX_NET_DEVICES", "lo", 0);  // loopback only, for us and every child
  const std::string exe = o.self_exe.empty() ? executable_path() : o.self_exe;
  const Counts n = counts_of(o);
  const std::vector<int> cpus = allowed_cpus();
  const char* devices = std::getenv("UCX_NET_DEVICES");

  fmt::print("apiary bench transport: two processes on 127.0.0.1, UCX_NET_DEVICES={}{}\n", devices, o.quick ? ", quick (rough figures)" : "");
  fmt::print("CAF: {}\n", tb::caf_config_line());
  fmt::print("CPUs allowed: {}; event-fd runs unpinned, busy runs pinned (server CPU {}, client CPU {}); "
             "peers pinned to two CPUs\n",
             cpus.size(), cpus.empty() ? -1 : cpus[0], cpus.size() > 1 ? cpus[1] : -1);
  fmt::print("load before: {}\n", load_averages());
  std::fflush(stdout);
  bool ok = true;
  for (const auto& mode : o.modes) ok = bench_mode(mode, o, n, exe, cpus) && ok;
  fmt::print("\nload after: {}\n", load_averages());
  return ok ? 0 : 1;
}

}  // namespace apiary::bench
