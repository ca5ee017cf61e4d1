// `apiary bench experts`, apiary's side: the server child (ExpertServer and a plain echo
// on one runtime), the client child (RemoteExpert calls, or the batch-1 latencies) and
// the bound (FfnExpert in this process).
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "actors/gateway.hpp"
#include "actors/rpc.hpp"
#include "api/expert_server.hpp"
#include "api/remote_expert.hpp"
#include "api/runtime.hpp"
#include "bench/experts_bench.hpp"
#include "core/moe/expert_backend.hpp"

namespace apiary::bench {
namespace {

using Clock = std::chrono::steady_clock;

/// The plain unary handle the server child answers with the request itself.
constexpr const char* k_echo_handle = "bench.experts.echo";
/// How long one call may take: a client's batch can queue behind every other client's.
constexpr auto k_call_timeout = std::chrono::seconds(600);

/// "--name value" pairs of a child's command line (argv[0] skipped); empty on a bad shape.
std::map<std::string, std::string> flags_of(int argc, char** argv) {
  std::map<std::string, std::string> out;
  for (int i = 1; i < argc; ++i) {
    const std::string name = argv[i];
    if (name.rfind("--", 0) != 0) return {};
    const bool has_value = i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0;
    out[name.substr(2)] = has_value ? argv[++i] : "1";
  }
  return out;
}

std::size_t number(const std::map<std::string, std::string>& f, const std::string& key, std::size_t fallback) {
  const auto it = f.find(key);
  return it == f.end() ? fallback : static_cast<std::size_t>(std::strtoull(it->second.c_str(), nullptr, 10));
}

std::string text(const std::map<std::string, std::string>& f, const std::string& key) {
  const auto it = f.find(key);
  return it == f.end() ? std::string() : it->second;
}

/// Prints "error: <why>" and returns `code`.
int failed(int code, const std::string& why) {
  fmt::print("error: {}\n", why);
  return code;
}

std::string uid_of(std::size_t i) { return "expert." + std::to_string(i); }

/// Client `client`'s batch: [rows, h] standard normal values (one per client, sent every
/// time, as upstream's dummy_batch), and the gradient of out.sum(): ones.
ExpertTensor batch_of(std::uint64_t seed, std::size_t client, std::size_t rows, std::uint32_t h, bool ones) {
  ExpertTensor t;
  t.shape = {static_cast<std::uint32_t>(rows), h};
  t.values.resize(rows * h, 1.0f);
  if (ones) return t;
  std::mt19937_64 gen(seed * 1000003u + client);
  std::normal_distribution<float> normal;
  for (float& v : t.values) v = normal(gen);
  return t;
}

messages::Tensor as_tensor(const ExpertTensor& t) {
  return *messages::Tensor::copy_of(messages::dtype::float32, t.shape, t.values.data(), t.values.size() * sizeof(float));
}

double since_ns(Clock::time_point t) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5))];
}

/// Waits until `path` exists (the parent's start signal), at most `patience`.
bool wait_for_file(const std::string& path, std::chrono::seconds patience) {
  const auto give_up = Clock::now() + patience;
  struct stat st {};
  while (::stat(path.c_str(), &st) != 0) {
    if (Clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

/// The batch-1 overhead: RemoteExpert::forward of one row to expert.0 against a plain
/// echo of the tensor's bytes, interleaved call by call. Prints "experts_latency ...".
int run_latency(Runtime& runtime, const core::PeerAddr& server, std::uint32_t h, std::size_t calls) {
  RemoteExpert expert(runtime, uid_of(0), server, std::chrono::seconds(10));
  const ExpertTensor x = batch_of(1, 0, 1, h, false);
  const Buffer bytes = Buffer::copy_of(x.values.data(), x.values.size() * sizeof(float));
  std::vector<double> forward_us, echo_us;
  for (std::size_t i = 0; i < calls + 200; ++i) {
    const auto t0 = Clock::now();
    auto out = expert.forward({x});
    const auto t1 = Clock::now();
    auto echo = actors::unary_call(*runtime.gateway(), server.key(), k_echo_handle,
                                   Buffer::copy_of(bytes.data(), bytes.size()), std::chrono::seconds(10));
    auto answer = echo.answer.get();
    const auto t2 = Clock::now();
    if (!out || !answer) {
      fmt::print("error: {}\n", !out ? out.error().what() : answer.error().what());
      return 1;
    }
    if (i < 200) continue;  // warm-up: connection, schema, pools
    forward_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    echo_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  fmt::print("experts_latency calls={} bytes={} forward_median_us={:.1f} forward_p99_us={:.1f} echo_median_us={:.1f} "
             "echo_p99_us={:.1f}\n", calls, bytes.size(), percentile(forward_us, 0.5), percentile(forward_us, 0.99),
             percentile(echo_us, 0.5), percentile(echo_us, 0.99));
  return 0;
}

/// The client's share of a preset: info of every expert, "ready", the go file, batches.
int run_batches(Runtime& runtime, const core::PeerAddr& server, const std::map<std::string, std::string>& f) {
  const std::size_t experts = number(f, "experts", 1), client = number(f, "client", 0);
  const std::size_t batches = number(f, "batches", 1), rows = number(f, "batch-size", 1);
  const auto h = static_cast<std::uint32_t>(number(f, "hidden", 1024));
  const std::uint64_t seed = number(f, "seed", 1);
  const bool backward = f.count("forward-only") == 0;
  std::vector<std::unique_ptr<RemoteExpert>> remote;
  for (std::size_t i = 0; i < experts; ++i) {
    remote.push_back(std::make_unique<RemoteExpert>(runtime, uid_of(i), server, k_call_timeout));
    if (auto info = remote.back()->info(); !info) {
      fmt::print("error: {}\n", info.error().what());
      return 1;
    }
  }
  const ExpertTensor x = batch_of(seed, client, rows, h, false), ones = batch_of(seed, client, rows, h, true);
  fmt::print("ready\n");
  std::fflush(stdout);
  if (!wait_for_file(text(f, "go"), std::chrono::seconds(600))) {
    fmt::print("error: expected the start file {} within 600 s\n", text(f, "go"));
    return 1;
  }
  const auto start = Clock::now();
  for (std::size_t b = 0; b < batches; ++b) {
    RemoteExpert& e = *remote[expert_of_batch(seed, client, b, experts)];
    auto out = e.forward({x});
    if (out && backward) out = e.backward({x}, {ones});
    if (!out) {
      fmt::print("error: batch {}: {}\n", b, out.error().what());
      return 1;
    }
  }
  fmt::print("experts_result client={} rows={} start_ns={:.0f} end_ns={:.0f}\n", client, batches * rows,
             since_ns(start), since_ns(Clock::now()));
  return 0;
}

}  // namespace

std::size_t expert_of_batch(std::uint64_t seed, std::size_t client, std::size_t batch, std::size_t experts) {
  // splitmix64 of one value (bench_experts.py: the same arithmetic mod 2^64).
  std::uint64_t z = seed * 1000003u + client * 1009u + batch + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<std::size_t>((z ^ (z >> 31)) % experts);
}

double experts_bound_samples_per_s(const ExpertsPreset& p, std::uint64_t seed) {
  if (p.experts == 0 || p.hidden == 0 || p.total_rows() == 0) return -1;
  std::vector<std::unique_ptr<core::moe::FfnExpert>> experts;
  for (std::size_t i = 0; i < p.experts; ++i) {
    core::moe::FfnConfig config;
    config.hidden_dim = p.hidden;
    config.seed = seed + i;
    experts.push_back(std::make_unique<core::moe::FfnExpert>(config));
  }
  std::vector<messages::Tensor> inputs;
  for (std::size_t c = 0; c < p.clients; ++c)
    inputs.push_back(as_tensor(batch_of(seed, c, p.batch_size, p.hidden, false)));
  const messages::Tensor ones = as_tensor(batch_of(seed, 0, p.batch_size, p.hidden, true));
  const auto start = Clock::now();
  for (std::size_t c = 0; c < p.clients; ++c) {
    for (std::size_t b = 0; b < p.batches; ++b) {
      auto& e = *experts[expert_of_batch(seed, c, b, p.experts)];
      auto out = e.forward({inputs[c]});
      if (out && p.backward) out = e.backward({inputs[c]}, {ones});
      if (!out) return -1;
    }
  }
  return static_cast<double>(p.total_rows()) / std::chrono::duration<double>(Clock::now() - start).count();
}

int run_experts_bench_server(int argc, char** argv) {
  const auto f = flags_of(argc, argv);
  if (f.empty()) {
    fmt::print("error: expected --experts N --hidden H [--max-batch-size M] [--cls ffn|nop] [--seed S]\n");
    return 2;
  }
  ::setenv("UCX_NET_DEVICES", "lo", 0);  // loopback only, unless the caller chose otherwise
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before any thread starts: taken by sigwait below
  auto runtime = Runtime::start(RuntimeOptions{});
  if (!runtime) return failed(1, fmt::format("{}", runtime.error().what()));
  ExpertServerOptions o;
  o.expert_cls = f.count("cls") ? text(f, "cls") : "ffn";
  o.hidden_dim = static_cast<std::uint32_t>(number(f, "hidden", 1024));
  for (std::size_t i = 0; i < number(f, "experts", 1); ++i) o.expert_uids.push_back(uid_of(i));
  o.max_batch_size = number(f, "max-batch-size", 4096);
  o.seed = number(f, "seed", 1);
  auto server = ExpertServer::start(**runtime, o);
  if (!server) return failed(1, fmt::format("{}", server.error().what()));
  actors::serve_unary((*runtime)->system(), (*runtime)->gateway(), k_echo_handle,
                      [](const actors::Delivery& d) -> Result<Buffer> { return d.data; });
  fmt::print("serving {}\n", (*server)->address());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop, &signal);
  const auto c = (*server)->counters().server;
  fmt::print("experts_server batches={} rows={} failed={} refused={}\n", c.batches, c.rows, c.failed_batches, c.refused);
  (*server)->stop();
  (*runtime)->stop();
  return 0;
}

int run_experts_bench_client(int argc, char** argv) {
  const auto f = flags_of(argc, argv);
  if (f.empty() || f.count("server") == 0 || (f.count("latency") == 0 && f.count("go") == 0)) {
    fmt::print("error: expected --server MULTIADDR and --go FILE (or --latency), with --experts --hidden "
               "--batch-size --batches --client --seed [--forward-only]\n");
    return 2;
  }
  ::setenv("UCX_NET_DEVICES", "lo", 0);
  auto server = core::PeerAddr::parse(text(f, "server"));
  if (!server) return failed(2, fmt::format("--server: {}", server.error().what()));
  auto runtime = Runtime::start(RuntimeOptions{});
  if (!runtime) return failed(1, fmt::format("{}", runtime.error().what()));
  const int rc = f.count("latency")
                     ? run_latency(**runtime, *server, static_cast<std::uint32_t>(number(f, "hidden", 16)),
                                   number(f, "calls", 2000))
                     : run_batches(**runtime, *server, f);
  std::fflush(stdout);
  (*runtime)->stop();
  return rc;
}

}  // namespace apiary::bench
