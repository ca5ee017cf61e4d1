// `apiary bench allreduce`, parent side: runs each system's ranks as child processes,
// folds their allreduce_result lines and prints apiary beside Gloo and Open MPI.
#include "bench/allreduce_bench.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "bench/child_process.hpp"

namespace apiary::bench {
namespace {

using Figures = std::map<std::size_t, AllReduceFigure>;

std::string size_name(std::size_t bytes) {
  if (bytes >= (std::size_t{1} << 20) && bytes % (std::size_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

std::string time_name(double us) {
  if (us >= 1e4) return fmt::format("{:.1f} ms", us / 1e3);
  if (us >= 1e3) return fmt::format("{:.2f} ms", us / 1e3);
  return fmt::format("{:.1f} us", us);
}

/// Starts every argv as a child, waits for all of them, and folds their result lines.
Result<Figures> run_children(const std::string& system, const std::vector<std::vector<std::string>>& argvs,
                             const std::vector<std::string>& env, int timeout_s) {
  auto run = run_group(argvs, env, timeout_s);
  if (!run) return run.error();
  const std::string& output = run->output;
  const std::optional<std::string>& failure = run->failure;
  auto figures = parse_allreduce_results(output);
  if (failure && figures.empty())
    return make_error(errc::unavailable, "expected {} to exit 0, got {}", system, *failure);
  if (failure) {
    // Figures came, but a process failed (a check, a crash on the way out): say which.
    fmt::print(stderr, "{} with {} processes: expected every process to exit 0, got {}; its figures are marked FAIL\n",
               system, argvs.size(), *failure);
    for (auto& [bytes, f] : figures) f.ok = false;
  }
  return figures;
}

/// apiary-shm-poll's spin: each transport thread polls this long after its last event
/// before it sleeps on the event fd (transport::Config::busy_poll).
constexpr int k_poll_variant_us = 20;

/// How an apiary system differs from its plain mode.
enum class Variant { plain, device, poll };

Result<Figures> run_apiary(const std::string& mode, std::size_t n, const AllReduceBenchOptions& o,
                           Variant variant = Variant::plain) {
  const bool device_reductions = variant == Variant::device;
  const int busy_poll_us = variant == Variant::poll && o.busy_poll_us == 0 ? k_poll_variant_us : o.busy_poll_us;
  const std::string exe = o.self_exe.empty() ? self_dir() + "/apiary" : o.self_exe;
  auto ports = free_ports(n);
  if (!ports) return ports.error();
  TempDir barrier("apiary_allreduce");
  if (barrier.path.empty()) return make_error(errc::io, "cannot create a temporary directory; is $TMPDIR writable?");
  std::string port_list;
  for (const int p : *ports) port_list += (port_list.empty() ? "" : ",") + std::to_string(p);
  std::vector<std::vector<std::string>> argvs;
  for (std::size_t r = 0; r < n; ++r) {
    std::vector<std::string> argv = {exe, "bench", "allreduce-rank", "--rank", std::to_string(r), "--ports", port_list,
                                     "--mode", mode, "--sizes", joined(o.sizes), "--part-size",
                                     std::to_string(o.part_size_bytes), "--barrier", barrier.path, "--timeout-s",
                                     std::to_string(o.timeout_s)};
    if (o.quick) argv.emplace_back("--quick");
    if (!o.timers) argv.emplace_back("--no-timers");
    if (o.one_timer) argv.emplace_back("--one-timer");
    if (device_reductions) argv.emplace_back("--device-reductions");
    if (busy_poll_us > 0) argv.insert(argv.end(), {"--busy-poll-us", std::to_string(busy_poll_us)});
    argvs.push_back(std::move(argv));
  }
  std::vector<std::string> env;
  if (std::getenv("UCX_NET_DEVICES") == nullptr) env.emplace_back("UCX_NET_DEVICES=lo");  // loopback only
  if (o.keep_heap)
    env.emplace_back("GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295");
  const char* suffix = variant == Variant::device ? "-dev" : variant == Variant::poll ? "-poll" : "";
  return run_children("apiary-" + mode + suffix, argvs, env, o.timeout_s + 30);
}

Result<Figures> run_gloo(std::size_t n, const AllReduceBenchOptions& o) {
  auto exe = find_executable("apiary_allreduce_gloo_peer", o.gloo_path, "APIARY_ALLREDUCE_GLOO_PEER",
                             {self_dir(), self_dir() + "/../bench"});
  if (!exe) return exe.error();
  TempDir store("apiary_allreduce");
  if (store.path.empty()) return make_error(errc::io, "cannot create a temporary directory; is $TMPDIR writable?");
  std::vector<std::vector<std::string>> argvs;
  for (std::size_t r = 0; r < n; ++r) {
    std::vector<std::string> argv = {*exe, "--rank", std::to_string(r), "--ranks", std::to_string(n), "--store",
                                     store.path, "--sizes", joined(o.sizes)};
    if (o.quick) argv.emplace_back("--quick");
    argvs.push_back(std::move(argv));
  }
  return run_children("gloo", argvs, {}, o.timeout_s);
}

Result<Figures> run_mpi(const std::string& variant, std::size_t n, const AllReduceBenchOptions& o) {
  auto exe = find_executable("apiary_allreduce_mpi_peer", o.mpi_path, "APIARY_ALLREDUCE_MPI_PEER",
                             {self_dir(), self_dir() + "/../bench"});
  if (!exe) return exe.error();
  auto mpirun = find_executable("mpirun", "", "APIARY_MPIRUN", {});
  if (!mpirun) return mpirun.error();
  // Loopback only, also for mpirun's own out-of-band channel; root is allowed (CI runs as root).
  std::vector<std::string> argv = {*mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np",
                                   std::to_string(n), "--mca", "oob_tcp_if_include", "lo", "--mca", "pml", "ob1"};
  if (variant == "shm") {
    argv.insert(argv.end(), {"--mca", "btl", "vader,self"});
  } else {
    argv.insert(argv.end(), {"--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"});
  }
  argv.insert(argv.end(), {*exe, "--label", variant, "--sizes", joined(o.sizes)});
  if (o.quick) argv.emplace_back("--quick");
  return run_children("mpi-" + variant, {argv}, {}, o.timeout_s);
}

Result<Figures> run_system(const std::string& system, std::size_t n, const AllReduceBenchOptions& o) {
  if (system == "apiary-tcp") return run_apiary("tcp", n, o);
  if (system == "apiary-shm") return run_apiary("shm", n, o);
  if (system == "apiary-shm-dev") return run_apiary("shm", n, o, Variant::device);
  if (system == "apiary-shm-poll") return run_apiary("shm", n, o, Variant::poll);
  if (system == "gloo") return run_gloo(n, o);
  if (system == "mpi-shm") return run_mpi("shm", n, o);
  if (system == "mpi-tcp") return run_mpi("tcp", n, o);
  return make_error(errc::invalid_argument, "unknown system '{}'; expected apiary-tcp, apiary-shm, apiary-shm-dev, apiary-shm-poll, gloo, mpi-shm or mpi-tcp",
                    system);
}

bool is_apiary(const std::string& system) { return system.rfind("apiary", 0) == 0; }

}  // namespace

std::map<std::size_t, AllReduceFigure> parse_allreduce_results(std::string_view output) {
  Figures out;
  std::istringstream in{std::string(output)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("allreduce_result ", 0) != 0) continue;
    std::map<std::string, std::string> kv;
    std::istringstream words(line.substr(17));
    std::string word;
    while (words >> word) {
      const auto eq = word.find('=');
      if (eq != std::string::npos) kv[word.substr(0, eq)] = word.substr(eq + 1);
    }
    const auto num = [&](const char* key) { return std::strtod(kv[key].c_str(), nullptr); };
    const auto bytes = static_cast<std::size_t>(num("bytes"));
    AllReduceFigure& f = out[bytes];
    f.bytes = bytes;
    f.ranks = static_cast<std::size_t>(num("ranks"));
    f.iters = static_cast<std::size_t>(num("iters"));
    f.us_per_op = std::max(f.us_per_op, num("us_per_op"));
    f.vcsw_per_op += num("vcsw_per_op");
    f.nivcsw_per_op += num("nivcsw_per_op");
    f.cpu_us_per_op += num("cpu_us_per_op");
    f.ok = f.ok && kv["check"] == "ok";
    ++f.reports;
  }
  for (auto& [bytes, f] : out) f.ok = f.ok && f.reports == f.ranks;  // a silent rank fails the figure
  return out;
}

namespace {

/// Results of one group size: per system, its figures or why there are none.
using Table = std::map<std::string, Result<Figures>>;

/// The best peer's busbw at `bytes` and its name; {0, ""} when no peer measured it.
std::pair<double, std::string> best_peer(const Table& t, std::size_t bytes) {
  std::pair<double, std::string> best{0.0, ""};
  for (const auto& [system, r] : t) {
    if (is_apiary(system) || !r) continue;
    auto it = r->find(bytes);
    if (it != r->end() && it->second.ok && it->second.busbw() > best.first) best = {it->second.busbw(), system};
  }
  return best;
}

void print_table(std::size_t n, const std::vector<std::string>& systems, const Table& t, const AllReduceBenchOptions& o) {
  fmt::print("\n== {} ranks ==\n", n);
  fmt::print("{:<8} {:<15} {:>10} {:>8} {:>8} {:>9} {:>10} {:>10} {:>6}\n", "size", "system", "time/op", "algbw", "busbw",
             "vs best", "switches", "CPU", "check");
  fmt::print("{:<8} {:<15} {:>10} {:>8} {:>8} {:>9} {:>10} {:>10} {:>6}\n", "", "", "", "GB/s", "GB/s", "peer", "/op, all", "/op, all", "");
  for (const std::size_t bytes : o.sizes) {
    const auto best = best_peer(t, bytes);
    for (const auto& system : systems) {
      const auto& r = t.at(system);
      if (!r) {
        fmt::print("{:<8} {:<15} n/a ({})\n", size_name(bytes), system, r.error().message);
        continue;
      }
      auto it = r->find(bytes);
      if (it == r->end()) {
        fmt::print("{:<8} {:<15} n/a (no result line for this size)\n", size_name(bytes), system);
        continue;
      }
      const AllReduceFigure& f = it->second;
      const std::string ratio = is_apiary(system) && best.first > 0 ? fmt::format("{:.2f}x", f.busbw() / best.first) : "";
      fmt::print("{:<8} {:<15} {:>10} {:>8.3f} {:>8.3f} {:>9} {:>10.1f} {:>10} {:>6}\n", size_name(bytes), system,
                 time_name(f.us_per_op), f.algbw(), f.busbw(), ratio, f.vcsw_per_op, time_name(f.cpu_us_per_op),
                 f.ok ? "ok" : "FAIL");
    }
  }
}

/// The figure of `system` at `bytes`, if measured and checked.
const AllReduceFigure* figure_of(const Table& t, const std::string& system, std::size_t bytes) {
  auto it = t.find(system);
  if (it == t.end() || !it->second) return nullptr;
  auto f = it->second->find(bytes);
  return f != it->second->end() && f->second.ok ? &f->second : nullptr;
}

/// apiary's best mode at `bytes` (highest busbw).
const AllReduceFigure* best_apiary(const Table& t, std::size_t bytes, std::string& which) {
  const AllReduceFigure* best = nullptr;
  for (const char* s : {"apiary-tcp", "apiary-shm", "apiary-shm-dev", "apiary-shm-poll"}) {
    const auto* f = figure_of(t, s, bytes);
    if (f && (!best || f->busbw() > best->busbw())) best = f, which = s;
  }
  return best;
}

void print_goals(std::size_t n, const Table& t, const AllReduceBenchOptions& o) {
  fmt::print("goals, {} ranks (apiary = its better mode):\n", n);
  for (const std::size_t bytes : o.sizes) {
    std::string mode;
    const auto* a = best_apiary(t, bytes, mode);
    const auto* gloo = figure_of(t, "gloo", bytes);
    const auto best = best_peer(t, bytes);
    if (!a) continue;
    if (bytes >= (std::size_t{16} << 20) && best.first > 0)
      fmt::print("  {:<7} busbw >= best peer ({}): {:.3f} vs {:.3f} GB/s ({}): {}\n", size_name(bytes), best.second,
                 a->busbw(), best.first, mode, a->busbw() >= best.first ? "met" : "NOT met");
    if (bytes >= (std::size_t{1} << 20) && gloo)
      fmt::print("  {:<7} busbw >= 2x Gloo: {:.3f} vs 2 x {:.3f} GB/s ({}): {}\n", size_name(bytes), a->busbw(),
                 gloo->busbw(), mode, a->busbw() >= 2 * gloo->busbw() ? "met" : "NOT met");
    if (bytes < (std::size_t{1} << 20) && gloo) {
      const auto* fastest = a;
      for (const char* s : {"apiary-tcp", "apiary-shm", "apiary-shm-dev", "apiary-shm-poll"})
        if (const auto* f = figure_of(t, s, bytes); f && f->us_per_op < fastest->us_per_op) fastest = f;
      fmt::print("  {:<7} faster than Gloo: {} vs {}: {}\n", size_name(bytes), time_name(fastest->us_per_op),
                 time_name(gloo->us_per_op), fastest->us_per_op < gloo->us_per_op ? "met" : "NOT met");
    }
  }
}

}  // namespace

int run_allreduce_bench(const AllReduceBenchOptions& o) {
  for (const std::size_t bytes : o.sizes) {
    if (bytes == 0 || bytes % sizeof(float) != 0) {
      fmt::print(stderr, "apiary bench allreduce: expected sizes that are positive multiples of 4 bytes (float32), got {}\n",
                 bytes);
      return 1;
    }
    if (std::count(o.sizes.begin(), o.sizes.end(), bytes) > 1) {
      fmt::print(stderr, "apiary bench allreduce: size {} is given twice; expected each size once (figures are keyed by size)\n",
                 bytes);
      return 1;
    }
  }
  for (const std::size_t n : o.ranks) {
    if (std::count(o.ranks.begin(), o.ranks.end(), n) > 1) {
      fmt::print(stderr, "apiary bench allreduce: group size {} is given twice; expected each once\n", n);
      return 1;
    }
  }
  fmt::print("apiary bench allreduce: float32 sum/mean, sizes {}, ranks {}, {}apiary part size {} B{}{}{}, loopback only\n",
             joined(o.sizes), joined(o.ranks), o.quick ? "quick (about a tenth of the iterations), " : "",
             o.part_size_bytes, o.keep_heap ? ", heap kept" : "",
             !o.timers ? ", no fault timers" : o.one_timer ? ", one timer per actor" : "",
             
                 (o.busy_poll_us > 0 ? fmt::format(", busy-poll {} us", o.busy_poll_us) : ""));
  fmt::print("time/op: slowest rank's mean; busbw = algbw * 2(n-1)/n; switches: voluntary context switches per op, "
             "all ranks summed (thread hand-offs); CPU: CPU time per op, all ranks summed\n");
  bool ok = true;
  for (const std::size_t n : o.ranks) {
    Table table;
    for (const auto& system : o.systems) {
      // Other work on the 2 cores moves every figure: wait a while for a quiet moment.
      int busy = cpu_busy_pct(300);
      for (const auto until = Clock::now() + std::chrono::seconds(o.quiet_wait_s); busy >= 25 && Clock::now() < until;)
        busy = cpu_busy_pct(500);
      fmt::print("running {} with {} ranks (CPUs {}% busy before)...\n", system, n, busy);
      std::fflush(stdout);
      auto r = run_system(system, n, o);
      if (is_apiary(system)) {
        if (!r) {
          ok = false;
        } else {
          for (const auto& [bytes, f] : *r) ok = ok && f.ok;
          ok = ok && r->size() == o.sizes.size();
        }
      }
      table.emplace(system, std::move(r));
    }
    print_table(n, o.systems, table, o);
    print_goals(n, table, o);
  }
  fmt::print("\nCompare figures of one run only; with 4 ranks the 2 cores are oversubscribed 2x.\n");
  return ok ? 0 : 1;
}

}  // namespace apiary::bench
