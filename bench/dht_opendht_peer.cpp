// apiary_dht_opendht_peer: the OpenDHT side of `apiary bench dht`, with the settings of
// the shared OpenDHT harness (shared/bench/dht/dht_bench.cpp, BASELINES.md §3): N
// dht::DhtRunner nodes in this process, each bound to 127.0.0.1:0 (IPv4 only, no bind6),
// network id 4242, no crypto identity, rate limits off, all bootstrapped to node 0. Per
// concurrency level: the workload's puts from their putters, then the gets from other
// nodes, with at most `conc` operations in flight. Prints "dht_result" lines
// (bench/dht_bench_report.hpp). Flags: see ChildArgs. Exit 0 ok, 1 failure, 2 bad flags.
#include <opendht.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "bench/dht_bench_report.hpp"

namespace {

namespace r = apiary::bench::dht_report;

/// Keeps at most `limit` operations in flight: the issuer acquires, the completion releases.
class Window {
 public:
  explicit Window(std::size_t limit) : limit_(limit) {}
  void acquire() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return in_flight_ < limit_; });
    ++in_flight_;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    --in_flight_;
    ++done_;
    changed_.notify_all();
  }
  /// Waits until `total` operations completed or `timeout` passed; true when all did.
  bool wait_done(std::size_t total, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return done_ >= total; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t limit_, in_flight_ = 0, done_ = 0;
};

std::vector<std::uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

/// How a phase's operations went: whether all completed in time, and the phase's wall
/// time (s) and this process's CPU time (ms) until then.
struct PhaseRun {
  bool complete = false;
  double wall_s = 0;
  double cpu_ms = 0;
};

/// Runs operations 0..n-1 with at most `conc` in flight, waiting at most `timeout_s` for
/// the last: start(i, ts, window) begins operation i at `ts`, and its completion callback
/// calls window.release() (keep a pointer to the window: the reference dies with start).
template <class Start>
PhaseRun run_phase(std::size_t n, std::size_t conc, int timeout_s, Start&& start) {
  Window window(conc);
  const double cpu0 = r::cpu_ms();
  const auto t0 = r::Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    window.acquire();
    start(i, r::Clock::now(), window);
  }
  PhaseRun run;
  run.complete = window.wait_done(n, std::chrono::seconds(timeout_s));
  run.wall_s = r::ms_between(t0, r::Clock::now()) / 1000.0;
  run.cpu_ms = r::cpu_ms() - cpu0;
  return run;
}

/// Puts every key of `w` from its putter; prints the put line. False when some put did
/// not complete in time (its callback may still come, so the caller must exit at once).
bool put_phase(std::vector<std::unique_ptr<dht::DhtRunner>>& nodes, const r::ChildArgs& a, std::size_t conc,
               const r::Workload& w) {
  const std::size_t n = w.keys.size();
  std::vector<double> ms(n, -1);
  std::vector<char> ok(n, 0);
  const PhaseRun run = run_phase(n, conc, a.timeout_s, [&](std::size_t i, r::Clock::time_point ts, Window& window) {
    nodes[w.putter[i]]->put(dht::InfoHash::get(w.keys[i]), std::make_shared<dht::Value>(bytes_of(w.values[i])),
                            [&, i, ts, win = &window](bool success) {
                              ms[i] = r::ms_between(ts, r::Clock::now());
                              ok[i] = success;
                              win->release();
                            });
  });
  std::vector<double> done;
  std::size_t succeeded = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (ms[i] >= 0) {
      done.push_back(ms[i]);
      succeeded += ok[i] ? 1 : 0;
    }
  r::print_op_line("put", "opendht", nodes.size(), conc, n, r::summarize(done),
                   static_cast<double>(succeeded) / static_cast<double>(n), run.wall_s, run.complete, run.cpu_ms);
  return run.complete;
}

/// Gets every key of `w` from its getter, timing the full lookup to its completion
/// callback and, separately, the arrival of the correct value; prints the get line.
/// False as put_phase.
bool get_phase(std::vector<std::unique_ptr<dht::DhtRunner>>& nodes, const r::ChildArgs& a, std::size_t conc,
               const r::Workload& w) {
  const std::size_t n = w.keys.size();
  std::vector<double> ms(n, -1), first_ms(n, -1);
  std::vector<std::atomic<bool>> found(n);
  for (auto& f : found) f = false;
  const PhaseRun run = run_phase(n, conc, a.timeout_s, [&](std::size_t i, r::Clock::time_point ts, Window& window) {
    const auto expected = bytes_of(w.values[i]);
    nodes[w.getter[i]]->get(
        dht::InfoHash::get(w.keys[i]),
        [&, i, ts, expected](const std::vector<std::shared_ptr<dht::Value>>& values) {
          for (const auto& v : values)
            if (v->data == expected && !found[i].exchange(true)) first_ms[i] = r::ms_between(ts, r::Clock::now());
          return true;  // keep going: the lookup is timed to completion, as in the harness
        },
        [&, i, ts, win = &window](bool) {
          ms[i] = r::ms_between(ts, r::Clock::now());
          win->release();
        });
  });
  std::vector<double> done, first;
  std::size_t succeeded = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (ms[i] >= 0) done.push_back(ms[i]);
    if (found[i]) {
      ++succeeded;
      first.push_back(first_ms[i]);
    }
  }
  const auto first_stats = r::summarize(first);
  r::print_op_line("get", "opendht", nodes.size(), conc, n, r::summarize(done),
                   static_cast<double>(succeeded) / static_cast<double>(n), run.wall_s, run.complete,
                   run.cpu_ms, &first_stats);
  return run.complete;
}

}  // namespace

int main(int argc, char** argv) {
  r::ChildArgs a;
  std::string error;
  if (!r::parse_child_args(argc, argv, a, error)) {
    std::fprintf(stderr, "apiary_dht_opendht_peer: %s\n", error.c_str());
    return 2;
  }
  dht::DhtRunner::Config config;
  config.threaded = true;
  config.dht_config.node_config.network = 4242;  // a private network id, never the public one
  // Every node shares 127.0.0.1; the per-address rate limiter is turned off as in the harness.
  config.dht_config.node_config.max_req_per_sec = -1;
  config.dht_config.node_config.max_peer_req_per_sec = -1;
  config.bind4 = dht::SockAddr::resolve("127.0.0.1", "0").front();  // no bind6: no IPv6 socket

  const auto start = r::Clock::now();
  std::vector<std::unique_ptr<dht::DhtRunner>> nodes;
  for (std::size_t i = 0; i < a.nodes; ++i) {
    nodes.push_back(std::make_unique<dht::DhtRunner>());
    nodes.back()->run(config, dht::DhtRunner::Context{});
  }
  const std::string port0 = std::to_string(nodes[0]->getBoundPort(AF_INET));
  for (std::size_t i = 1; i < a.nodes; ++i) nodes[i]->bootstrap("127.0.0.1", port0);

  // Bootstrapped: every node knows at least min(N-1, 8) good nodes (the harness's rule).
  const unsigned want = static_cast<unsigned>(std::min<std::size_t>(a.nodes - 1, 8));
  std::size_t ready = 0;
  const auto deadline = r::Clock::now() + std::chrono::seconds(30);
  while (r::Clock::now() < deadline) {
    ready = 0;
    for (auto& node : nodes) ready += node->getNodesStats(AF_INET).good_nodes >= want ? 1 : 0;
    if (ready == a.nodes) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double boot_ms = r::ms_between(start, r::Clock::now());
  double good = 0;
  for (auto& node : nodes) good += node->getNodesStats(AF_INET).good_nodes;
  r::print_bootstrap_line("opendht", a.nodes, boot_ms, ready,
                          "mean_good_nodes=" + std::to_string(good / static_cast<double>(a.nodes)));

  for (std::size_t round = 0; round < a.concs.size(); ++round) {
    const r::Workload w = r::make_workload(a, round);
    if (!put_phase(nodes, a, a.concs[round], w) || !get_phase(nodes, a, a.concs[round], w)) {
      // Late callbacks would touch the finished phase's state: leave without unwinding.
      r::print_proc_line("opendht", a.nodes, start);
      std::_Exit(1);
    }
  }
  r::print_proc_line("opendht", a.nodes, start);
  for (auto& node : nodes) node->shutdown({}, true);
  for (auto& node : nodes) node->join();
  return 0;
}
