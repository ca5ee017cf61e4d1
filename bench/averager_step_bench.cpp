// apiary_averager_step_bench: the C++ figure beside bench/python's `step` workload. The
// same swarm as bench_averaging.py --workload step, through api::Averager instead of
// apiary's Python module: --peers DHT nodes on one runtime (as Python's DHTs of a
// process share one), each with an Averager over its own float32 tensor of --mib MiB,
// averaged in place through the CPU device actor (as Python's), one group of all peers.
// Prints one RESULT line (JSON) with the time per step after a warm-up step, the success
// rate, the transport's bytes per step and how much the steps grew the process's peak
// resident memory beyond the tensors (a copy of them would show there).
#include <sys/resource.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "api/averager.hpp"
#include "api/dht.hpp"
#include "api/runtime.hpp"

namespace {

using apiary::Averager;
using apiary::Dht;

/// All threads wait until the last arrives (C++17 has no std::barrier).
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const int generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      all_.notify_all();
      return;
    }
    all_.wait(lock, [&] { return generation != generation_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable all_;
  int count_;
  int arrived_ = 0;
  int generation_ = 0;
};

long peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"api::Averager.step on one float32 tensor per peer, all peers in one group"};
  int peers = 2;
  double mib = 16;
  int rounds = 3;
  app.add_option("--peers", peers, "Averagers (one group)")->check(CLI::Range(2, 64));
  app.add_option("--mib", mib, "MiB of each peer's tensor")->check(CLI::Range(0.001, 4096.0));
  app.add_option("--rounds", rounds, "Measured steps (after one warm-up step)")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  apiary::RuntimeOptions runtime_options;
  auto runtime = apiary::Runtime::start(runtime_options);
  if (!runtime) {
    std::fprintf(stderr, "averager_step_bench: %s\n", runtime.error().what().c_str());
    return 1;
  }
  auto dht_on = [&](const std::vector<std::string>& initial) {
    apiary::DhtOptions options;
    options.system = &(*runtime)->system();
    options.gateway = (*runtime)->gateway();
    options.initial_peers = initial;
    return Dht::start(options);
  };
  auto root = dht_on({});
  if (!root) {
    std::fprintf(stderr, "averager_step_bench: %s\n", root.error().what().c_str());
    return 1;
  }
  const std::vector<std::string> boot = (*root)->visible_addrs();
  const std::size_t elements = static_cast<std::size_t>(mib * (1 << 20)) / sizeof(float);
  std::vector<std::unique_ptr<Dht>> nodes;
  std::vector<std::vector<float>> tensors(static_cast<std::size_t>(peers));
  std::vector<std::unique_ptr<Averager>> averagers;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (int i = 0; i < peers; ++i) {
    auto node = dht_on(boot);
    if (!node) {
      std::fprintf(stderr, "averager_step_bench: %s\n", node.error().what().c_str());
      return 1;
    }
    auto& tensor = tensors[static_cast<std::size_t>(i)];
    tensor.resize(elements);
    for (float& v : tensor) v = normal(rng);
    apiary::AveragerOptions options;
    options.prefix = "bench";
    options.target_group_size = static_cast<std::size_t>(peers);
    options.min_group_size = static_cast<std::size_t>(peers);
    options.min_matchmaking_time = 1.0;
    options.request_timeout = 1.0;
    options.device_tensors = {apiary::DeviceTensor{tensor.data(), tensor.size()}};
    options.reduce_on = apiary::ReduceOn::cpu;
    auto averager = Averager::start(**node, std::move(options));
    if (!averager) {
      std::fprintf(stderr, "averager_step_bench: %s\n", averager.error().what().c_str());
      return 1;
    }
    averagers.push_back(std::move(*averager));
    nodes.push_back(std::move(*node));
  }

  const int total = rounds + 1;  // the first step warms up
  std::vector<std::vector<std::optional<double>>> times(static_cast<std::size_t>(total),
                                                        std::vector<std::optional<double>>(static_cast<std::size_t>(peers)));
  Barrier sync(peers);
  const long rss_before = peak_rss_kib();
  std::pair<std::uint64_t, std::uint64_t> bytes_after_warmup{};
  std::vector<std::thread> threads;
  for (int i = 0; i < peers; ++i) {
    threads.emplace_back([&, i] {
      for (int r = 0; r < total; ++r) {
        sync.arrive_and_wait();
        if (i == 0 && r == 1) bytes_after_warmup = averagers.front()->transport_bytes();
        const auto t0 = std::chrono::steady_clock::now();
        apiary::AveragerStepOptions step;
        step.timeout = 60.0;
        auto report = averagers[static_cast<std::size_t>(i)]->step(step).get();
        if (report && report->peers.size() >= 2) {
          times[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto bytes_end = averagers.front()->transport_bytes();

  std::vector<double> done;
  for (int r = 1; r < total; ++r) {
    for (const auto& t : times[static_cast<std::size_t>(r)]) {
      if (t) done.push_back(*t);
    }
  }
  double mean = 0;
  double worst = 0;
  for (double t : done) {
    mean += t;
    worst = std::max(worst, t);
  }
  mean = done.empty() ? 0 : mean / static_cast<double>(done.size());
  const double per_step = static_cast<double>((bytes_end.first - bytes_after_warmup.first) +
                                              (bytes_end.second - bytes_after_warmup.second)) /
                          rounds;
  std::printf("RESULT %s\n",
              fmt::format(R"({{"bench": "averaging", "workload": "step", "peers": {}, "group": {}, "success": {}, )"
                          R"("round_mean_s": {}, "round_max_s": {}, "mib": {}, "transport_bytes_per_step": {}, )"
                          R"("step_rss_growth_mib": {}}})",
                          peers, peers, static_cast<double>(done.size()) / (rounds * peers), mean, worst, mib, per_step,
                          static_cast<double>(peak_rss_kib() - rss_before) / 1024.0)
                  .c_str());
  std::fflush(stdout);
  averagers.clear();
  for (auto& n : nodes) n->stop();
  (*root)->stop();
  (*runtime)->stop();
  return done.empty() ? 1 : 0;
}
