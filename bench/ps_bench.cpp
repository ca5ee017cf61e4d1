// `apiary bench ps`, parent side: measures the UCX bandwidth, runs each PS configuration
// and both all-reduces as child processes, and prints one table with the bound.
#include "bench/ps_bench.hpp"

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "bench/allreduce_bench.hpp"
#include "bench/allreduce_workload.hpp"
#include "bench/child_process.hpp"
#include "bench/ps_bench_process.hpp"
#include "bench/transport_bench_apiary.hpp"

namespace apiary::bench {
namespace {

/// One row of the table: a step (PS) or one averaging op (all-reduce) of the model.
struct Row {
  std::string name;
  Result<double> median_us = make_error(errc::unavailable, "not run");
  double p90_us = 0;         ///< 0: not known (all-reduce peers report a mean)
  double moved_bytes = 0;    ///< bytes each replica sends plus receives per step
  double bound_us = 0;       ///< 0: no bound for this row
  double cpu_us = 0;         ///< CPU time per step, every process of the row summed
  bool ok = false;
};

std::string ms(double us) { return fmt::format("{:.1f} ms", us / 1e3); }

/// Starts every argv as a child with `env` and waits for all: their output, or an error
/// naming the first that did not exit 0.
Result<std::string> run_all(const std::vector<std::vector<std::string>>& argvs, const std::vector<std::string>& env,
                            int timeout_s) {
  auto run = run_group(argvs, env, timeout_s);
  if (!run) return run.error();
  const std::optional<std::string>& failure = run->failure;
  std::string output = std::move(run->output);
  if (failure) return make_error(errc::unavailable, "expected every process to exit 0, got {}", *failure);
  return output;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size()))) - (q > 0 ? 1 : 0);
  return v[std::min(i, v.size() - 1)];
}

/// K shard processes and N replicas; per timed step, the slowest replica's time.
Row run_ps(std::size_t k, std::size_t model_bytes, const PsBenchOptions& o, const std::string& exe, double bound_us) {
  Row row;
  row.name = fmt::format("ps, {} shard{}", k, k == 1 ? "" : "s");
  row.moved_bytes = 2.0 * static_cast<double>(model_bytes);
  row.bound_us = bound_us;
  auto ports = free_ports(k);
  TempDir barrier("apiary_ps_bench");
  if (!ports || barrier.path.empty()) {
    row.median_us = ports ? make_error(errc::io, "cannot create a temporary directory; is $TMPDIR writable?") : ports.error();
    return row;
  }
  const std::size_t steps = o.quick ? 4 : 12, warmup = o.quick ? 1 : 2;
  std::vector<std::vector<std::string>> argvs;
  const auto add = [&](const char* role, std::size_t index) {
    argvs.push_back({exe, "bench", "ps-process", "--role", role, "--index", std::to_string(index), "--shards",
                     std::to_string(k), "--replicas", std::to_string(o.replicas), "--model-bytes",
                     std::to_string(model_bytes), "--ports", joined(*ports), "--barrier", barrier.path, "--steps",
                     std::to_string(steps), "--warmup", std::to_string(warmup), "--timeout-s",
                     std::to_string(o.timeout_s), "--mode", o.mode});
  };
  for (std::size_t i = 0; i < k; ++i) add("ps", i);
  for (std::size_t r = 0; r < o.replicas; ++r) add("replica", r);
  auto out = run_all(argvs, {}, o.timeout_s + 30);
  if (!out) {
    row.median_us = out.error();
    return row;
  }
  // Per step index, the slowest replica (BSP: the step is over when its last replica is).
  std::vector<double> slowest;
  std::size_t reports = 0;
  bool ok = true;
  std::istringstream in(*out);
  const auto field = [](const std::string& line, const char* key) {
    const auto at = line.find(key);
    return at == std::string::npos ? 0.0 : std::strtod(line.c_str() + at + std::strlen(key), nullptr);
  };
  for (std::string line; std::getline(in, line);) {
    // A shard's CPU covers every step it served: warm-up, timed and the final pull.
    if (line.rfind("ps_cpu ", 0) == 0) row.cpu_us += field(line, "cpu_us=") / static_cast<double>(warmup + steps + 1);
    if (line.rfind("ps_result ", 0) != 0) continue;
    row.cpu_us += field(line, "cpu_us=");
    ++reports;
    ok = ok && line.find("check=ok") != std::string::npos;
    const auto at = line.find("step_us=");
    std::istringstream times(line.substr(at + 8, line.find(' ', at) - at - 8));
    std::size_t i = 0;
    for (std::string t; std::getline(times, t, ','); ++i) {
      if (slowest.size() <= i) slowest.resize(i + 1, 0);
      slowest[i] = std::max(slowest[i], std::strtod(t.c_str(), nullptr));
    }
  }
  if (reports != o.replicas || slowest.empty()) {
    row.median_us = make_error(errc::internal, "expected {} ps_result lines, got {}", o.replicas, reports);
    return row;
  }
  row.median_us = percentile(slowest, 0.5);
  row.p90_us = percentile(slowest, 0.9);
  row.ok = ok;
  return row;
}

/// The all-reduce of `model_bytes` among N processes: apiary's ranks or Gloo's peers.
Row run_allreduce(bool gloo, std::size_t model_bytes, const PsBenchOptions& o, const std::string& exe) {
  const std::size_t n = o.replicas;
  Row row;
  row.name = gloo ? "gloo ring all-reduce" : "apiary all-reduce (" + o.mode + ")";
  // Butterfly and ring alike: each rank sends and receives 2(n-1)/n of the buffer.
  row.moved_bytes = 4.0 * static_cast<double>(n - 1) / static_cast<double>(n) * static_cast<double>(model_bytes);
  TempDir dir("apiary_ps_bench");
  auto ports = free_ports(n);
  if (!ports || dir.path.empty()) {
    row.median_us = ports ? make_error(errc::io, "cannot create a temporary directory; is $TMPDIR writable?") : ports.error();
    return row;
  }
  std::string path = exe;
  if (gloo) {
    auto found = find_executable("apiary_allreduce_gloo_peer", o.gloo_path, "APIARY_ALLREDUCE_GLOO_PEER",
                                 {self_dir(), self_dir() + "/../bench"});
    if (!found) {
      row.median_us = found.error();
      return row;
    }
    path = *found;
  }
  std::vector<std::vector<std::string>> argvs;
  for (std::size_t r = 0; r < n; ++r) {
    std::vector<std::string> argv =
        gloo ? std::vector<std::string>{path, "--rank", std::to_string(r), "--ranks", std::to_string(n), "--store", dir.path}
             : std::vector<std::string>{path, "bench", "allreduce-rank", "--rank", std::to_string(r), "--ports",
                                        joined(*ports), "--mode", o.mode, "--barrier", dir.path, "--timeout-s",
                                        std::to_string(o.timeout_s)};
    argv.insert(argv.end(), {"--sizes", std::to_string(model_bytes)});
    if (o.quick) argv.emplace_back("--quick");
    argvs.push_back(std::move(argv));
  }
  auto out = run_all(argvs, {}, o.timeout_s + 30);
  if (!out) {
    row.median_us = out.error();
    return row;
  }
  const auto figures = parse_allreduce_results(*out);
  auto it = figures.find(model_bytes);
  if (it == figures.end()) {
    row.median_us = make_error(errc::internal, "expected an allreduce_result line for {} bytes, got none", model_bytes);
    return row;
  }
  row.median_us = it->second.us_per_op;  // the slowest rank's mean
  row.cpu_us = it->second.cpu_us_per_op;
  row.ok = it->second.ok;
  return row;
}

void print_row(const Row& r, double model_bytes) {
  if (!r.median_us) {
    fmt::print("{:<24} n/a ({})\n", r.name, r.median_us.error().message);
    return;
  }
  const double t = *r.median_us;
  fmt::print("{:<24} {:>10} {:>10} {:>9.3f} {:>9.3f} {:>10} {:>10} {:>6} {:>6}\n", r.name, ms(t),
             r.p90_us > 0 ? ms(r.p90_us) : "-", model_bytes / t / 1e3, r.moved_bytes / t / 1e3, ms(r.cpu_us),
             r.bound_us > 0 ? ms(r.bound_us) : "-", r.bound_us > 0 ? fmt::format("{:.2f}", t / r.bound_us) : "-",
             r.ok ? "ok" : "FAIL");
}

/// The machine's all-core copy rate, bytes/s: every core copies its own 256 MiB buffer
/// (out of cache, pages mapped beforehand) at once; the median of the rounds' aggregate.
double all_core_copy_rate(int rounds) {
  constexpr std::size_t k_bytes = std::size_t{256} << 20;
  const unsigned threads = std::max(1U, std::thread::hardware_concurrency());
  std::vector<std::vector<char>> from(threads, std::vector<char>(k_bytes, 1)), to(threads, std::vector<char>(k_bytes, 0));
  std::vector<double> rates;
  for (int round = 0; round <= rounds; ++round) {  // round 0 warms up
    std::atomic<unsigned> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        ++ready;
        while (!go.load()) std::this_thread::yield();
        std::memcpy(to[t].data(), from[t].data(), k_bytes);
      });
    }
    while (ready.load() < threads) std::this_thread::yield();
    const auto t0 = std::chrono::steady_clock::now();
    go = true;
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (round > 0) rates.push_back(static_cast<double>(threads * k_bytes) / s);
  }
  return percentile(rates, 0.5);
}

}  // namespace

int run_ps_bench(const PsBenchOptions& o) {
  ::setenv("UCX_NET_DEVICES", "lo", 0);  // loopback only, for this process and its children
  const std::string exe = o.self_exe.empty() ? self_dir() + "/apiary" : o.self_exe;
  const auto model = ps_bench_model(o.model_mb << 20);
  const std::size_t m = model.bytes();
  const auto [largest, smallest] = model.extremes();
  fmt::print("apiary bench ps: {} replicas, model {} MiB in {} float32 variables ({:.1f} MiB .. {} KiB), BSP, "
             "plain SGD, UCX {} on loopback{}\n",
             o.replicas, o.model_mb, model.variables.size(), static_cast<double>(largest * 4) / 1048576.0,
             smallest * 4 / 1024, o.mode, o.quick ? ", quick (fewer steps)" : "");
  for (const auto k : o.shards) {
    auto plan = ps_bench_plan(model, k, o.replicas);
    if (!plan) continue;
    std::string split;
    for (const auto& d : plan->servers)
      split += fmt::format("{}{:.1f}", split.empty() ? "" : " / ", static_cast<double>(ps_bench_bytes_on(*plan, d)) / 1048576.0);
    fmt::print("  {} shard{}: MiB per shard {}\n", k, k == 1 ? "" : "s", split);
  }
  // B: apiary's one-way stream of 16 MiB payloads to a sink process (bench transport's figure).
  fmt::print("measuring UCX bandwidth (16 MiB payloads, 4 in flight, one way)...\n");
  std::fflush(stdout);
  transport_bench::SessionPlan bw;
  bw.exe = exe;
  bw.mode = o.mode;
  bw.rtt_iters = 100;
  bw.rate_calls = 0;
  bw.bw_iters = o.quick ? 16 : 64;
  const auto figures = transport_bench::run_session(bw);
  const double b = figures.mib_per_s ? *figures.mib_per_s * 1048576.0 : 0;  // bytes/s
  if (b > 0) fmt::print("  B = {:.0f} MiB/s ({:.3f} GB/s)\n", *figures.mib_per_s, b / 1e9);
  else fmt::print("  B = n/a ({}); no bound\n", figures.mib_per_s.error().message);

  // The memory floor of a step, in memcpys of N*M bytes at the all-core rate C. shm: the
  // shards must at least read the N*M pushed bytes (a memcpy's traffic is read + write, so
  // that is half a memcpy) and the replicas' parameters must be written from the shards'
  // (one memcpy), even with no copy anywhere else: 1.5. tcp: the kernel copies every byte
  // into the socket and out of it, pushes and pulls alike (4), and the shards then read
  // the pushes to sum them (0.5): 4.5.
  const double copy_rate = all_core_copy_rate(o.quick ? 3 : 7);
  const double memcpys = o.mode == "tcp" ? 4.5 : 1.5;
  const double floor_us = memcpys * static_cast<double>(o.replicas) * static_cast<double>(m) / copy_rate * 1e6;
  fmt::print("  all-core memcpy C = {:.2f} GB/s ({} cores); memory floor of a PS step = {} x N*M / C = {}\n",
             copy_rate / 1e9, std::max(1U, std::thread::hardware_concurrency()), memcpys, ms(floor_us));

  std::vector<Row> rows;
  bool ok = true;
  for (const auto k : o.shards) {
    const double bound_us = b > 0 ? std::max(1.0, static_cast<double>(o.replicas) / static_cast<double>(k)) *
                                        static_cast<double>(m) / b * 1e6
                                  : 0;
    fmt::print("running PS with {} shard(s), {} replicas...\n", k, o.replicas);
    std::fflush(stdout);
    rows.push_back(run_ps(k, m, o, exe, bound_us));
    ok = ok && rows.back().ok;
  }
  for (const bool gloo : {false, true}) {
    fmt::print("running {} all-reduce, {} ranks...\n", gloo ? "Gloo" : "apiary", o.replicas);
    std::fflush(stdout);
    rows.push_back(run_allreduce(gloo, m, o, exe));
  }

  fmt::print("\n== {} replicas, {} MiB model, one step = pull all + push all (PS) or one averaging op ==\n",
             o.replicas, o.model_mb);
  fmt::print("{:<24} {:>10} {:>10} {:>9} {:>9} {:>10} {:>10} {:>6} {:>6}\n", "system", "step", "step p90", "model",
             "moved", "CPU/step", "bound", "ratio", "check");
  fmt::print("{:<24} {:>10} {:>10} {:>9} {:>9} {:>10} {:>10} {:>6} {:>6}\n", "", "median", "", "GB/s", "GB/s/rep",
             "all procs", "", "", "");
  for (const auto& r : rows) print_row(r, static_cast<double>(m));
  fmt::print("step: PS = slowest replica's pull + push per step (median, p90 over steps); all-reduce = slowest rank's "
             "mean per op. model GB/s = M / step; moved = bytes each replica sends + receives per step / step.\n"
             "CPU/step: CPU time of every process of the row per step, summed.\n"
             "bound = max(M/B, N*M/(K*B)) with B the one-way bandwidth above.\n"
             "memory floor: the least memory traffic of a step (shm: the shards read N*M pushed bytes, the replicas' "
             "parameters are written from the shards'; tcp: every byte copied into and out of a socket, and the "
             "pushes read to sum them), at the all-core memcpy rate C above.\n");
  for (const auto& r : rows) {
    if (r.bound_us <= 0 || !r.median_us || r.name != "ps, 2 shards") continue;
    fmt::print("goal: 2-shard PS step <= 1.2 x bound: {} vs 1.2 x {} = {}: {}\n", ms(*r.median_us), ms(r.bound_us),
               ms(1.2 * r.bound_us), *r.median_us <= 1.2 * r.bound_us ? "met" : "NOT met");
    fmt::print("memory floor {} = {:.2f} x (1.2 x bound){}\n", ms(floor_us), floor_us / (1.2 * r.bound_us),
               floor_us > 1.2 * r.bound_us ? ": out of reach on this machine over " + o.mode +
                                                 " (its cores cannot move a step's bytes through memory that fast)"
                                           : "");
  }
  fmt::print("Compare figures of one run only; {} replicas and the shards share the CPUs here.\n", o.replicas);
  return ok ? 0 : 1;
}

}  // namespace apiary::bench
