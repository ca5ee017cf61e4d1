#pragma once
/// The workload every process of `apiary bench allreduce` runs, and the line it reports
/// in: apiary's ranks, the Gloo peer and the MPI peer all include this header, so the
/// peers (which link nothing of apiary) use the standard library only.
///
/// Per buffer size: one checked operation on known inputs, `warmup` untimed operations,
/// then `iters` timed ones. Every rank prints one line per size:
///   allreduce_result system=S rank=R ranks=N bytes=B iters=I us_per_op=T vcsw_per_op=V
///                    nivcsw_per_op=W cpu_us_per_op=C check=ok|FAIL
/// us_per_op is this rank's mean over the timed operations; the parent takes the
/// slowest rank (as the shared Gloo / MPI harness does). vcsw_per_op counts voluntary
/// context switches of this whole process per operation: every thread hand-off that
/// put a thread to sleep.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace apiary::bench::allreduce_workload {

/// Timed operations for a buffer of `bytes`: 2000, 200, 50 and 20 for 4 KiB, 1 MiB, 16 MiB,
/// 64 MiB (the shared harness's counts, but for 20 and 8 at the two large sizes, where so few
/// ops made one run's figures swing by a third), or about a tenth of them for a smoke run.
inline std::size_t iters_for(std::size_t bytes, bool quick) {
  if (bytes <= (std::size_t{64} << 10)) return quick ? 200 : 2000;
  if (bytes <= (std::size_t{1} << 20)) return quick ? 20 : 200;
  if (bytes <= (std::size_t{16} << 20)) return quick ? 4 : 50;
  return quick ? 2 : 20;
}

/// Untimed operations before the timed ones: a tenth of them, at least one.
inline std::size_t warmup_for(std::size_t iters) { return std::max<std::size_t>(1, iters / 10); }

/// Input element j of rank `rank`: small integers, so every sum and mean is exact in
/// float32 and a wrong part, offset or weight shows as a wrong value.
inline float input_value(std::size_t rank, std::size_t j) { return static_cast<float>(rank + (j % 8)); }

/// The exact sum over `ranks` ranks of input_value(r, j).
inline float expected_sum(std::size_t ranks, std::size_t j) {
  return static_cast<float>(ranks * (ranks - 1) / 2 + ranks * (j % 8));
}

/// The exact mean over `ranks` ranks of input_value(r, j) (exact for 1, 2 and 4 ranks).
inline float expected_mean(std::size_t ranks, std::size_t j) {
  return static_cast<float>(static_cast<double>(ranks - 1) / 2.0 + static_cast<double>(j % 8));
}

/// Fills `buf` with rank `rank`'s inputs.
inline void fill_inputs(std::vector<float>& buf, std::size_t rank) {
  for (std::size_t j = 0; j < buf.size(); ++j) buf[j] = input_value(rank, j);
}

/// Index of the first element of `buf` that is not `expect(j)`; buf.size() when all are.
template <class Expect>
std::size_t first_mismatch(const std::vector<float>& buf, Expect expect) {
  for (std::size_t j = 0; j < buf.size(); ++j)
    if (buf[j] != expect(j)) return j;
  return buf.size();
}

/// Counters of this process so far (every thread): context switches and CPU time.
struct Switches {
  std::uint64_t voluntary = 0;    ///< a thread went to sleep (a hand-off)
  std::uint64_t involuntary = 0;  ///< a thread was preempted
  double cpu_us = 0;              ///< user + system CPU time, microseconds
};
inline Switches switches_now() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
                     static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  return {static_cast<std::uint64_t>(ru.ru_nvcsw), static_cast<std::uint64_t>(ru.ru_nivcsw), cpu};
}

/// One rank's figure for one size.
struct RankFigure {
  std::string system;
  std::size_t rank = 0;
  std::size_t ranks = 0;
  std::size_t bytes = 0;
  std::size_t iters = 0;
  double us_per_op = 0;
  double vcsw_per_op = 0;
  double nivcsw_per_op = 0;
  double cpu_us_per_op = 0;  ///< CPU time of this process per op (every thread), µs
  bool ok = false;

  /// Fills the per-op counters from the counters before and after `iters` ops.
  void set_counters(const Switches& before, const Switches& after) {
    const double n = static_cast<double>(iters > 0 ? iters : 1);
    vcsw_per_op = static_cast<double>(after.voluntary - before.voluntary) / n;
    nivcsw_per_op = static_cast<double>(after.involuntary - before.involuntary) / n;
    cpu_us_per_op = (after.cpu_us - before.cpu_us) / n;
  }
};

/// Prints `f` as one allreduce_result line on stdout and flushes.
inline void print_figure(const RankFigure& f) {
  std::printf("allreduce_result system=%s rank=%zu ranks=%zu bytes=%zu iters=%zu us_per_op=%.3f "
              "vcsw_per_op=%.3f nivcsw_per_op=%.3f cpu_us_per_op=%.1f check=%s\n",
              f.system.c_str(), f.rank, f.ranks, f.bytes, f.iters, f.us_per_op, f.vcsw_per_op,
              f.nivcsw_per_op, f.cpu_us_per_op, f.ok ? "ok" : "FAIL");
  std::fflush(stdout);
}

/// "4096,1048576" -> {4096, 1048576}; entries that are not positive numbers are skipped.
inline std::vector<std::size_t> parse_sizes(const std::string& text) {
  std::vector<std::size_t> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const unsigned long long v = std::strtoull(text.substr(pos, comma - pos).c_str(), nullptr, 10);
    if (v > 0) out.push_back(static_cast<std::size_t>(v));
    pos = comma + 1;
  }
  return out;
}

/// The value after flag `name` ("--sizes") in argv, or `fallback`.
inline std::string flag_value(int argc, char** argv, const std::string& name, const std::string& fallback = {}) {
  for (int i = 1; i + 1 < argc; ++i)
    if (name == argv[i]) return argv[i + 1];
  return fallback;
}

/// Whether flag `name` ("--quick") appears in argv.
inline bool has_flag(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i)
    if (name == argv[i]) return true;
  return false;
}

}  // namespace apiary::bench::allreduce_workload
