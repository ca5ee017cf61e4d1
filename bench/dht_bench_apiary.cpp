// `apiary bench dht-child`: apiary's side of `apiary bench dht`. N apiary::Dht nodes in
// this process on one shared actor system, `--per-gateway` of them sharing each gateway on
// 127.0.0.1:ephemeral (1: a gateway per node), all bootstrapped to node 0; then per concurrency level the
// workload's puts and gets (bench/dht_bench_report.hpp), `conc` operations in flight.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <caf/all.hpp>

#include "actors/gateway.hpp"
#include "api/dht.hpp"
#include "bench/dht_bench.hpp"
#include "bench/dht_bench_report.hpp"
#include "core/dht/msgpack_value.hpp"
#include "messages/identity/ed25519.hpp"
#include "messages/identity/key_file.hpp"
#include "messages/identity/peer_id.hpp"

namespace apiary::bench {
namespace {

namespace r = dht_report;

/// Value lifetime of every put, seconds (the workload's expiration = now + 600).
constexpr double k_value_ttl_s = 600;
/// Threads starting nodes at once: node starts block on their bootstrap round trips, so
/// a few in parallel keep the CPUs busy without crowding node 0 (a count, not a tuning knob
/// for the figures: the bootstrap time is reported as measured).
constexpr std::size_t k_start_threads = 8;

/// Share of the open-files limit at which the child gives up (UCX floods its log and
/// aborts once descriptors run out; a clear error is more useful than that).
constexpr double k_fd_guard_share = 0.9;

/// Watches this process's descriptors every 20 ms; once the lowest free one passes
/// k_fd_guard_share of the soft RLIMIT_NOFILE it prints an error line (with the current
/// phase) and exits.
class FdGuard {
 public:
  FdGuard() {
    rlimit l{};
    ::getrlimit(RLIMIT_NOFILE, &l);
    limit_ = l.rlim_cur == RLIM_INFINITY ? 0 : static_cast<long>(l.rlim_cur);
    if (limit_ > 0) thread_ = std::thread([this] { watch(); });
  }
  ~FdGuard() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  /// Names what runs now, for the error line.
  void phase(const char* name) { phase_ = name; }

 private:
  void watch() {
    while (!stop_) {
      // The lowest free descriptor (what open returns) bounds the open count from below
      // and is cheap; listing /proc/self/fd would cost milliseconds at 10^4 descriptors.
      const int probe = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (probe >= 0) ::close(probe);
      if (probe > static_cast<double>(limit_) * k_fd_guard_share) {
        const int fds = r::open_fds();
        std::printf("error: apiary bench dht-child: expected to stay under the open-files limit %ld, got %d open "
                    "descriptors (%ld threads) during %s; every connection between two nodes holds UCX sockets "
                    "on both sides: run fewer nodes or raise `ulimit -n`\n",
                    limit_, fds, r::proc_status_number("Threads"), phase_.load());
        std::fflush(stdout);
        std::_Exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  long limit_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<const char*> phase_{"start"};
  std::thread thread_;
};

/// Latencies of one phase: ms[i] < 0 when operation i did not finish in time.
struct Phase {
  std::vector<double> ms;
  std::vector<char> ok;
  bool complete = true;
  double wall_s = 0;
  double cpu_ms = 0;  ///< process CPU time the phase used
};

/// Runs `n` blocking operations `op(i, deadline) -> std::optional<bool>` (nullopt: not
/// finished by the deadline) on `conc` threads, so that `conc` are in flight at a time.
template <class Op>
Phase closed_loop(std::size_t n, std::size_t conc, int timeout_s, Op op) {
  Phase p;
  p.ms.assign(n, -1);
  p.ok.assign(n, 0);
  std::atomic<std::size_t> next{0};
  std::atomic<bool> late{false};
  const auto t0 = r::Clock::now();
  const auto deadline = t0 + std::chrono::seconds(timeout_s);
  const double cpu0 = r::cpu_ms();
  std::vector<std::thread> workers;
  for (std::size_t w = 0; w < conc; ++w)
    workers.emplace_back([&] {
      for (std::size_t i = next++; i < n && !late; i = next++) {
        const auto ts = r::Clock::now();
        const std::optional<bool> ok = op(i, deadline);
        if (!ok) {
          late = true;
          return;
        }
        p.ms[i] = r::ms_between(ts, r::Clock::now());
        p.ok[i] = *ok;
      }
    });
  for (auto& t : workers) t.join();
  p.wall_s = r::ms_between(t0, r::Clock::now()) / 1000.0;
  p.cpu_ms = r::cpu_ms() - cpu0;
  p.complete = !late;
  return p;
}

/// The future's value, or nullopt when it is not ready by `deadline`.
template <class T>
std::optional<T> wait_until(std::future<T>& f, r::Clock::time_point deadline) {
  if (f.wait_until(deadline) != std::future_status::ready) return std::nullopt;
  return f.get();
}

/// Calls issued and requests served by all nodes so far (each node's actor is asked).
std::pair<double, double> call_counts(std::vector<std::unique_ptr<Dht>>& nodes) {
  double calls = 0, served = 0;
  for (auto& n : nodes)
    if (auto s = n->stats()) {
      calls += static_cast<double>(s->node.calls);
      served += static_cast<double>(s->node.requests_served);
    }
  return {calls, served};
}

/// Prints the phase's line; `calls`: calls all nodes issued during it (per op in the line).
void print_phase(const char* name, std::size_t nodes, std::size_t conc, const Phase& p, double calls) {
  std::vector<double> done;
  std::size_t ok = 0;
  for (std::size_t i = 0; i < p.ms.size(); ++i)
    if (p.ms[i] >= 0) {
      done.push_back(p.ms[i]);
      ok += p.ok[i] ? 1 : 0;
    }
  r::print_op_line(name, "apiary", nodes, conc, p.ms.size(), r::summarize(done),
                   static_cast<double>(ok) / static_cast<double>(p.ms.size()), p.wall_s, p.complete, p.cpu_ms,
                   nullptr, " calls_per_op=" + std::to_string(calls / static_cast<double>(p.ms.size())));
}

/// Starts node 0, then the others bootstrapping from it; fills `nodes`. Error: the first failure.
Status start_nodes(caf::actor_system& system, const r::ChildArgs& a, std::vector<std::unique_ptr<Dht>>& nodes,
                   std::vector<std::shared_ptr<actors::Gateway>>& gateways, const std::string& authority) {
  const std::size_t count = a.nodes;
  DhtOptions base;
  base.authorization.authority_file = authority;  // "": no authorization
  base.mode = a.mode == "shm" ? transport::Mode::shm : transport::Mode::tcp;
  base.insecure = true;  // as the gateways below: plaintext, like OpenDHT
  base.listen = "/ip4/127.0.0.1/tcp/0";
  base.system = &system;
  base.host = a.host == "actor" ? core::HostKind::actor : core::HostKind::transport_thread;
  // Node i runs on gateway i / per_gateway (a gateway of its own when per_gateway is 1).
  if (a.per_gateway > 1) {
    for (std::size_t g = 0; g * a.per_gateway < count; ++g) {
      actors::GatewayConfig gc;
      gc.transport.mode = base.mode;
      // Plaintext, as the peers it is measured beside run (`apiary bench transport --secure`
      // measures what encryption costs).
      gc.transport.insecure = true;
      auto key = messages::Ed25519PrivateKey::generate();
      if (!key) return key.error();
      gc.transport.peer_id = messages::PeerId::from_public_key(key->public_key()).bytes();
      auto gw = actors::Gateway::start(system, gc);
      if (!gw) return gw.error();
      gateways.push_back(*gw);
    }
  }
  auto gateway_of = [&](std::size_t i) {
    return gateways.empty() ? std::shared_ptr<actors::Gateway>{} : gateways[i / a.per_gateway];
  };
  nodes.resize(count);
  base.gateway = gateway_of(0);
  auto first = Dht::start(base);
  if (!first) return first.error();
  nodes[0] = std::move(*first);
  const auto addrs = nodes[0]->visible_addrs();
  if (addrs.empty()) return make_error(errc::internal, "expected node 0 to have a visible address, got none");
  base.initial_peers = {addrs.front()};
  std::atomic<std::size_t> next{1};
  std::vector<Error> errors(count);
  std::vector<char> failed(count, 0);
  std::vector<std::thread> starters;
  for (std::size_t t = 0; t < std::min(k_start_threads, count - 1); ++t)
    starters.emplace_back([&] {
      for (std::size_t i = next++; i < count; i = next++) {
        DhtOptions o = base;
        o.node.seed = i + 1;
        o.gateway = gateway_of(i);
        auto node = Dht::start(o);
        if (node) nodes[i] = std::move(*node);
        else {
          errors[i] = node.error();
          failed[i] = 1;
        }
      }
    });
  for (auto& t : starters) t.join();
  for (std::size_t i = 0; i < count; ++i)
    if (failed[i])
      return make_error(errors[i].code, "node {} of {} failed to start: {}", i, count, errors[i].message);
  return ok_status();
}

}  // namespace

int run_dht_bench_apiary_child(int argc, char** argv) {
  r::ChildArgs a;
  std::string error;
  if (!r::parse_child_args(argc, argv, a, error)) {
    std::printf("error: apiary bench dht-child: %s\n", error.c_str());
    return 2;
  }
  ::setenv("UCX_NET_DEVICES", "lo", 0);  // loopback only, unless the caller chose
  caf::actor_system_config config;
  // CAF's idle workers otherwise poll with 50 µs sleeps, adding 50-100 µs per hop (as api/node.cpp).
  config.set("work-stealing.moderate-poll-attempts", 0);
  caf::actor_system system{config};

  FdGuard guard;
  guard.phase("bootstrap");
  const auto start = r::Clock::now();
  std::vector<std::unique_ptr<Dht>> nodes;
  std::vector<std::shared_ptr<actors::Gateway>> gateways;
  // --authorized: the nodes are members of a swarm authority made for this run.
  std::string authority_dir, authority;
  if (a.authorized) {
    std::string pattern = (std::filesystem::temp_directory_path() / "apiary-dht-bench-XXXXXX").string();
    auto key = messages::Ed25519PrivateKey::generate();
    if (::mkdtemp(pattern.data()) == nullptr || !key ||
        !messages::save_key_file(pattern + "/authority.key", *key)) {
      std::printf("error: apiary bench dht-child: could not write a temporary authority key\n");
      return 1;
    }
    authority_dir = pattern;
    authority = pattern + "/authority.key";
  }
  struct RemoveDir {
    std::string dir;
    ~RemoveDir() {
      std::error_code ignored;
      if (!dir.empty()) std::filesystem::remove_all(dir, ignored);
    }
  } remove_authority{authority_dir};
  if (auto st = start_nodes(system, a, nodes, gateways, authority); !st) {
    std::printf("error: apiary bench dht-child: %s\n", st.error().message.c_str());
    std::fflush(stdout);
    std::_Exit(1);  // nodes and futures may still be busy; the figures are lost anyway
  }
  const double boot_ms = r::ms_between(start, r::Clock::now());
  double table = 0;
  for (auto& n : nodes)
    if (auto s = n->stats()) table += static_cast<double>(s->routing_table);
  r::print_bootstrap_line("apiary", a.nodes, boot_ms, a.nodes,
                          "mean_routing_table=" + std::to_string(table / static_cast<double>(a.nodes)));

  bool complete = true;
  for (std::size_t round = 0; round < a.concs.size() && complete; ++round) {
    const r::Workload w = r::make_workload(a, round);
    const std::size_t conc = a.concs[round];
    guard.phase(conc == 1 ? "puts, 1 in flight" : "puts, several in flight");
    const double calls0 = call_counts(nodes).first;
    const Phase put = closed_loop(w.keys.size(), conc, a.timeout_s, [&](std::size_t i, r::Clock::time_point dl) {
      auto f = nodes[w.putter[i]]->store(DhtKey::str(w.keys[i]), core::dht::pack_bin(w.values[i]),
                                         Dht::now() + k_value_ttl_s);
      const auto res = wait_until(f, dl);
      return res ? std::optional<bool>(*res && **res) : std::nullopt;
    });
    const double calls1 = call_counts(nodes).first;
    print_phase("put", a.nodes, conc, put, calls1 - calls0);
    guard.phase(conc == 1 ? "gets, 1 in flight" : "gets, several in flight");
    const Phase get = closed_loop(w.keys.size(), conc, a.timeout_s, [&](std::size_t i, r::Clock::time_point dl) {
      auto f = nodes[w.getter[i]]->get(DhtKey::str(w.keys[i]), a.latest);
      const auto res = wait_until(f, dl);
      if (!res) return std::optional<bool>();
      const std::string expected = core::dht::pack_bin(w.values[i]);
      const auto* found = *res && **res ? std::get_if<std::string>(&(***res).value) : nullptr;
      return std::optional<bool>(found != nullptr && *found == expected);
    });
    print_phase("get", a.nodes, conc, get, call_counts(nodes).first - calls1);
    complete = put.complete && get.complete;
  }
  r::print_proc_line("apiary", a.nodes, start);
  guard.phase("teardown");
  if (!complete) std::_Exit(1);  // operations still in flight would outlive their phase
  const auto t_stop = r::Clock::now();
  for (auto& n : nodes) n->stop();
  nodes.clear();
  for (auto& g : gateways) g->stop();
  std::printf("dht_result phase=teardown system=apiary nodes=%zu s=%.2f\n", a.nodes,
              r::ms_between(t_stop, r::Clock::now()) / 1000.0);
  std::fflush(stdout);
  return 0;
}

}  // namespace apiary::bench
