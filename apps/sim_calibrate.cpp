// `apiary sim calibrate`: measures this machine's costs for the simulator (sim/cost_profile.hpp)
// and writes them as a profile: the transport between two processes over loopback (the
// transport bench's sessions), and the training step's work in this process (the PS
// shard's sum and updates, the logistic-regression gradient, memcpy).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <thread>

#include "apps/commands.hpp"
#include "core/ps/logistic_regression.hpp"
#include "core/ps/shard.hpp"
#include "sim/cost_profile.hpp"
#if APIARY_HAVE_TRANSPORT_BENCH
#include "bench/transport_bench_apiary.hpp"
#endif

namespace apiary::apps {

namespace {

namespace cps = core::ps;
using Clock = std::chrono::steady_clock;

/// The best of `runs` timings of `f`, in seconds.
template <class F>
double best_of(int runs, F f) {
  double best = std::numeric_limits<double>::max();
  for (int i = 0; i < runs; ++i) {
    const auto begin = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - begin).count());
  }
  return best;
}

/// Seconds of one BSP step of a shard of `n` values with `replicas` replicas, from
/// the last push (its sum and update), with `kind`'s optimizer.
double shard_step_seconds(std::size_t n, std::int32_t replicas, cps::OptimizerKind kind, int runs) {
  cps::ShardConfig c;
  c.variable = "w";
  c.layout.shape = {static_cast<std::int64_t>(n)};
  c.optimizer.kind = kind;
  c.optimizer.learning_rate = 0.01F;
  c.replica_hosts.assign(static_cast<std::size_t>(replicas), 0);
  auto shard = cps::Shard::create(c, std::vector<float>(n, 0.5F));
  if (!shard) return 0.0;
  auto gradient = std::make_shared<std::vector<float>>(n, 0.001F);
  const cps::DenseBytes bytes{reinterpret_cast<const char*>(gradient->data()), n};
  std::int64_t step = 0;
  return best_of(runs, [&] {
    for (std::int32_t r = 0; r < replicas; ++r) (void)shard->push_dense(r, step, 1.0, bytes, gradient);
    ++step;
  });
}

}  // namespace

std::function<int()> add_calibrate_command(CLI::App& cmd) {
  auto* sub = cmd.add_subcommand("calibrate",
                                 "Measure this machine's costs (transport between two processes, the training step's "
                                 "work) and write them as a profile for `apiary sim ps --profile`");
  auto out = std::make_shared<std::string>("profile.json");
  auto quick = std::make_shared<bool>(false);
  sub->add_option("--out", *out, "Where the profile goes (JSON)")->capture_default_str();
  sub->add_flag("--quick", *quick, "Fewer iterations (a smoke run)");
  return [=]() {
    if (!sub->parsed()) return -1;
    const int runs = *quick ? 2 : 5;
    sim::CostProfile p;
    char host[256] = {};
    p.machine = ::gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
    p.cores = std::max(1U, std::thread::hardware_concurrency());
    // memcpy, one core.
    const std::size_t big = std::size_t{64} << 20;
    std::vector<char> from(big, 1), to(big, 0);
    p.memcpy_gbps = static_cast<double>(big) / best_of(runs, [&] { std::memcpy(to.data(), from.data(), big); }) / 1e9;
    // The shard's step: n (sgd + R sum); the sum per value per replica from R = 1 and 4.
    const std::size_t n = *quick ? (std::size_t{1} << 20) : (std::size_t{4} << 20);
    const double one = shard_step_seconds(n, 1, cps::OptimizerKind::sgd, runs);
    const double four = shard_step_seconds(n, 4, cps::OptimizerKind::sgd, runs);
    const double adam = shard_step_seconds(n, 1, cps::OptimizerKind::adam, runs);
    p.sum_ns = std::max(0.0, (four - one) / 3.0 / static_cast<double>(n) * 1e9);
    p.sgd_ns = std::max(0.0, one / static_cast<double>(n) * 1e9 - p.sum_ns);
    p.adam_ns = std::max(0.0, adam / static_cast<double>(n) * 1e9 - p.sum_ns);
    // The logistic-regression gradient: per feature once a call (its accumulators) and per
    // sample and feature, from batches of 4 and 32; the loss alone over the data set. A
    // data set larger than the caches, as a training job's is.
    const std::size_t features = *quick ? 65536 : 1048576, samples = 64;
    const auto data = cps::make_logistic_data(samples, features, 1);
    const auto params = cps::logistic_initial(features);
    std::map<std::string, std::vector<float>> grads;
    const auto gradient_seconds = [&](std::size_t batch) {
      const auto indices = cps::logistic_batch(data, 1, 0, 0, batch);
      return best_of(runs, [&] { (void)cps::logistic_loss(data, indices, params, &grads); });
    };
    const double f = static_cast<double>(features), of_4 = gradient_seconds(4), of_32 = gradient_seconds(32);
    p.gradient_ns = std::max(0.0, (of_32 - of_4) / (28.0 * f) * 1e9);
    p.gradient_call_ns = std::max(0.0, of_4 / f * 1e9 - 4.0 * p.gradient_ns);
    p.loss_ns = best_of(runs, [&] { (void)cps::logistic_full_loss(data, params); }) /
                (static_cast<double>(samples) * f) * 1e9;
#if APIARY_HAVE_TRANSPORT_BENCH
    // The transport between two processes over loopback tcp (plaintext, as a trusted
    // cluster runs): 64 B round trips, calls/s with 64 in flight, 16 MiB one way.
    char self[4096];
    const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
    bench::transport_bench::SessionPlan plan;
    plan.exe = len > 0 ? std::string(self, static_cast<std::size_t>(len)) : "apiary";
    plan.rtt_iters = *quick ? 500 : 3000;
    plan.rate_calls = *quick ? 5000 : 20000;
    plan.bw_iters = *quick ? 8 : 24;
    const auto figures = bench::transport_bench::run_session(plan);
    if (!figures.rtt || !figures.calls_per_s || !figures.mib_per_s) {
      const Error e = !figures.rtt ? figures.rtt.error()
                                   : !figures.calls_per_s ? figures.calls_per_s.error() : figures.mib_per_s.error();
      return fail("sim calibrate", make_error(e.code, "the transport could not be measured: {}", e.message));
    }
    // Processor time, user and system, of both processes: a call is a message each way,
    // each handled at both ends; a byte of the bandwidth run is handled at both ends.
    // (Without the server's figures: from the rates, the ends working in parallel.)
    p.message_us = figures.rate_cpu_us_per_call > 0 ? figures.rate_cpu_us_per_call / 4.0
                                                    : 1e6 / (2.0 * *figures.calls_per_s);
    p.byte_ns = figures.bw_cpu_ns_per_byte > 0 ? figures.bw_cpu_ns_per_byte / 2.0
                                               : 1e9 / (*figures.mib_per_s * 1024.0 * 1024.0);
    p.latency_us = std::max(0.0, figures.rtt->median_us / 2.0 - 2.0 * p.message_us);
#else
    return fail("sim calibrate", make_error(errc::unsupported, "this build has no transport bench to measure with"));
#endif
    std::ofstream file(*out);
    file << sim::to_json(p);
    if (!file) return fail("sim calibrate", make_error(errc::io, "cannot write the profile {}", *out));
    std::printf("%s", sim::to_json(p).c_str());
    std::printf("profile written to %s\n", out->c_str());
    return 0;
  };
}

}  // namespace apiary::apps
