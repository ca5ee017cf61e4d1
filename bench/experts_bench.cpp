// `apiary bench experts`, parent side: per preset, apiary's server and clients as child
// processes, then hivemind's (bench/python/bench_experts.py), then both bounds; prints
// the figures side by side, the batch-1 overhead and the goals.
#include "bench/experts_bench.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/child_process.hpp"

namespace apiary::bench {
namespace {

/// key=value words of the first output line that starts with `tag`.
std::optional<std::map<std::string, double>> tagged(const std::string& output, const std::string& tag) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(tag + " ", 0) != 0) continue;
    std::map<std::string, double> out;
    std::istringstream words(line.substr(tag.size()));
    for (std::string w; words >> w;)
      if (const auto eq = w.find('='); eq != std::string::npos)
        out[w.substr(0, eq)] = std::strtod(w.c_str() + eq + 1, nullptr);
    return out;
  }
  return std::nullopt;
}

/// Pumps `child` until its output holds a line starting with `prefix` (returned) or `deadline`.
Result<std::string> await_line(Child& child, const std::string& prefix, Clock::time_point deadline) {
  while (Clock::now() < deadline) {
    child.pump(20);
    const auto& out = child.output();
    const auto at = out.rfind(prefix, 0) == 0 ? 0 : out.find("\n" + prefix);
    if (at != std::string::npos) {
      const auto begin = at == 0 ? 0 : at + 1, end = out.find('\n', begin);
      if (end != std::string::npos) return out.substr(begin, end - begin);
    }
    if (child.exited()) break;
  }
  child.pump(0);
  return make_error(errc::unavailable, "expected '{}...' from a child, got: {}", prefix, child.output().substr(0, 2000));
}

std::vector<std::string> loopback_env() {
  if (std::getenv("UCX_NET_DEVICES") != nullptr) return {};
  return {"UCX_NET_DEVICES=lo"};
}

/// The apiary server child of `p` (ffn, or nop for the latency), and its multiaddr.
Result<std::pair<Child, std::string>> start_server(const std::string& exe, const ExpertsPreset& p, const char* cls,
                                                   std::uint64_t seed) {
  auto server = Child::start({exe, "bench", "experts-server", "--experts", std::to_string(p.experts), "--hidden",
                              std::to_string(p.hidden), "--max-batch-size", std::to_string(p.server_batch_limit()),
                              "--cls", cls, "--seed", std::to_string(seed)},
                             loopback_env());
  if (!server) return server.error();
  auto line = await_line(*server, "serving ", Clock::now() + std::chrono::seconds(60));
  if (!line) return line.error();
  return std::make_pair(std::move(*server), line->substr(8));
}

/// apiary's samples/s on `p`: the server, C clients, the go file once all are ready.
Result<double> run_apiary(const std::string& exe, const ExpertsPreset& p, std::uint64_t seed) {
  TempDir dir("apiary_experts_bench");
  auto server = start_server(exe, p, "ffn", seed);
  if (!server) return server.error();
  const std::string go = dir.path + "/go";
  std::vector<Child> clients;
  for (std::size_t c = 0; c < p.clients; ++c) {
    std::vector<std::string> argv = {exe, "bench", "experts-client", "--server", server->second, "--experts",
                                     std::to_string(p.experts), "--hidden", std::to_string(p.hidden), "--batch-size",
                                     std::to_string(p.batch_size), "--batches", std::to_string(p.batches), "--client",
                                     std::to_string(c), "--seed", std::to_string(seed), "--go", go};
    if (!p.backward) argv.emplace_back("--forward-only");
    auto child = Child::start(argv, loopback_env());
    if (!child) return child.error();
    clients.push_back(std::move(*child));
  }
  for (auto& c : clients)
    if (auto ready = await_line(c, "ready", Clock::now() + std::chrono::seconds(120)); !ready) return ready.error();
  std::ofstream{go}.put('\n');
  const double go_ns = std::chrono::duration<double, std::nano>(Clock::now().time_since_epoch()).count();
  double end_ns = 0;
  for (auto& c : clients) {
    const ExitInfo exit = c.wait(Clock::now() + std::chrono::seconds(900));
    const auto result = tagged(exit.output, "experts_result");
    if (!exit.success() || !result)
      return make_error(errc::unavailable, "an apiary client {}: {}", exit.describe(), exit.tail(3));
    end_ns = std::max(end_ns, result->at("end_ns"));
  }
  ::kill(server->first.pid(), SIGTERM);
  const ExitInfo served = server->first.wait(Clock::now() + std::chrono::seconds(20));
  if (const auto counters = tagged(served.output, "experts_server"))
    fmt::print("  apiary server: {:.0f} batches, {:.0f} rows, {:.0f} failed\n", counters->at("batches"),
               counters->at("rows"), counters->at("failed"));
  return static_cast<double>(p.total_rows()) / ((end_ns - go_ns) * 1e-9);
}

/// Ends what is left of the process group `pgid` (hivemind's p2pd daemons outlive their
/// Python process by seconds, spinning, and would load the next measurement): SIGTERM,
/// then SIGKILL if any is still there after 5 s.
void end_group(pid_t pgid) {
  ::kill(-pgid, SIGTERM);
  const auto give_up = Clock::now() + std::chrono::seconds(5);
  while (::kill(-pgid, 0) == 0 && Clock::now() < give_up) ::usleep(20000);
  ::kill(-pgid, SIGKILL);
}

/// hivemind's figure of `p` (`mode` throughput or bound) from bench_experts.py.
Result<double> run_hivemind(const std::string& python, const std::string& script, const ExpertsPreset& p,
                            const char* mode, std::uint64_t seed) {
  std::vector<std::string> argv = {python, script, "--mode", mode, "--experts", std::to_string(p.experts),
                                   "--hidden", std::to_string(p.hidden), "--clients", std::to_string(p.clients),
                                   "--batches", std::to_string(p.batches), "--batch-size", std::to_string(p.batch_size),
                                   "--max-batch-size", std::to_string(p.server_batch_limit()), "--handlers",
                                   std::to_string(p.handler_count()), "--seed", std::to_string(seed)};
  if (!p.backward) argv.emplace_back("--forward-only");
  auto child = Child::start(argv, {});
  if (!child) return child.error();
  const ExitInfo exit = child->wait(Clock::now() + std::chrono::seconds(900));
  end_group(child->pid());
  const auto result = tagged(exit.output, "experts_peer");
  if (!exit.success() || !result || result->count("samples_per_s") == 0)
    return make_error(errc::unavailable, "bench_experts.py --mode {} {}: {}", mode, exit.describe(), exit.tail(3));
  return result->at("samples_per_s");
}

std::string cell(const Result<double>& v, int digits = 1) {
  return v ? fmt::format("{:.{}f}", *v, digits) : "n/a";
}

std::string share(const Result<double>& a, const Result<double>& b) {
  return a && b && *b > 0 ? fmt::format("{:.0f}%", 100 * *a / *b) : "-";
}

/// One preset's figures.
struct PresetFigures {
  Result<double> apiary = make_error(errc::unavailable, "not run");
  Result<double> hivemind = make_error(errc::unavailable, "not run");
  Result<double> apiary_bound = make_error(errc::unavailable, "not run");
  Result<double> hivemind_bound = make_error(errc::unavailable, "not run");
};

/// The interpreter and script of the hivemind peer, or why there is none.
Result<std::pair<std::string, std::string>> find_peer(const ExpertsBenchOptions& o) {
  const std::string source = APIARY_SOURCE_DIR;
  const std::string script = o.script.empty() ? source + "/bench/python/bench_experts.py" : o.script;
  // An interpreter named by the caller is the only one tried; else the build's venv.
  const char* from_env = std::getenv("APIARY_HIVEMIND_PYTHON");
  std::vector<std::string> pythons = {self_dir() + "/../hivemind-venv/bin/python", source + "/build/hivemind-venv/bin/python"};
  if (!o.python.empty() || from_env != nullptr) pythons = {o.python.empty() ? std::string(from_env) : o.python};
  if (::access(script.c_str(), R_OK) != 0)
    return make_error(errc::not_found, "expected the hivemind side at {}; pass its path as ExpertsBenchOptions::script", script);
  for (const auto& py : pythons)
    if (::access(py.c_str(), X_OK) == 0) return std::make_pair(py, script);
  return make_error(errc::not_found, "no hivemind interpreter at {}; install one with "
                    "`bench/python/setup_hivemind.sh build/hivemind-venv` (hivemind 1.1.12 from PyPI) or name it with "
                    "--hivemind-python or $APIARY_HIVEMIND_PYTHON", fmt::join(pythons, " or "));
}

std::string describe(const ExpertsPreset& p) {
  return fmt::format("{} experts, h {}, {} client(s) x {} batch(es) x {} rows, {}, server batches <= {} rows", p.experts,
                     p.hidden, p.clients, p.batches, p.batch_size, p.backward ? "forward+backward" : "forward only",
                     p.server_batch_limit());
}

PresetFigures run_preset(const ExpertsBenchOptions& o, const ExpertsPreset& p, const std::string& exe,
                         const Result<std::pair<std::string, std::string>>& peer) {
  PresetFigures f;
  auto wants = [&](const char* s) { return std::find(o.systems.begin(), o.systems.end(), s) != o.systems.end(); };
  fmt::print("\n== {}: {} ==\n", p.name, describe(p));
  std::fflush(stdout);
  if (wants("apiary")) f.apiary = run_apiary(exe, p, o.seed);
  auto hivemind = [&](const char* mode) -> Result<double> {
    return peer ? run_hivemind(peer->first, peer->second, p, mode, o.seed) : Result<double>(peer.error());
  };
  if (wants("hivemind")) f.hivemind = hivemind("throughput");
  if (o.bound && wants("apiary")) {
    const double bound = experts_bound_samples_per_s(p, o.seed);
    f.apiary_bound = bound > 0 ? Result<double>(bound) : make_error(errc::unavailable, "the bound failed");
  }
  if (o.bound && wants("hivemind")) f.hivemind_bound = hivemind("bound");
  print_table("samples/s (" + p.name + ")",
              {{"system", "over RPC", "bound (in process)", "of bound"},
               {"apiary", cell(f.apiary), cell(f.apiary_bound), share(f.apiary, f.apiary_bound)},
               {"hivemind", cell(f.hivemind), cell(f.hivemind_bound), share(f.hivemind, f.hivemind_bound)},
               {"ratio a/h", f.apiary && f.hivemind ? fmt::format("{:.2f}x", *f.apiary / *f.hivemind) : "-",
                f.apiary_bound && f.hivemind_bound ? fmt::format("{:.2f}x", *f.apiary_bound / *f.hivemind_bound) : "-", ""}});
  std::set<std::string> why;  // each reason once (a missing peer fails both its columns)
  for (const auto* r : {&f.apiary, &f.hivemind, &f.apiary_bound, &f.hivemind_bound})
    if (!*r && r->error().message != "not run" && why.insert(r->error().message).second)
      fmt::print("n/a: {}\n", r->error().message);
  std::fflush(stdout);
  return f;
}

/// RemoteExpert::forward at batch 1 (nop, 16 floats) against a plain round trip.
Result<std::map<std::string, double>> run_latency(const ExpertsBenchOptions& o, const std::string& exe) {
  ExpertsPreset nop;
  nop.experts = 1;
  nop.hidden = 16;
  nop.batch_size = 1;
  auto server = start_server(exe, nop, "nop", o.seed);
  if (!server) return server.error();
  auto client = Child::start({exe, "bench", "experts-client", "--server", server->second, "--latency", "--hidden", "16",
                              "--calls", std::to_string(o.latency_calls)}, loopback_env());
  if (!client) return client.error();
  const ExitInfo exit = client->wait(Clock::now() + std::chrono::seconds(300));
  auto figures = tagged(exit.output, "experts_latency");
  if (!exit.success() || !figures)
    return make_error(errc::unavailable, "the latency client {}: {}", exit.describe(), exit.tail(3));
  return *figures;
}

/// One goal line: "goal: <what>: met|NOT met|n/a (<details>)"; met when every figure is
/// at least `limit` (or, with `at_most`, at most).
void print_goal(const std::string& what, const std::vector<std::pair<std::string, double>>& got, double limit,
                bool at_most = false) {
  bool met = !got.empty();
  std::string details;
  for (const auto& [name, v] : got) {
    met = met && (at_most ? v <= limit : v >= limit);
    details += fmt::format("{}{} {:.2f}", details.empty() ? "" : ", ", name, v);
  }
  fmt::print("goal: {}: {} ({})\n", what, got.empty() ? "n/a" : met ? "met" : "NOT met",
             details.empty() ? "no figure" : details);
}

void print_goals(const std::vector<std::pair<ExpertsPreset, PresetFigures>>& all,
                 const Result<std::map<std::string, double>>& latency) {
  std::vector<std::pair<std::string, double>> ahead, big, small;
  for (const auto& [p, f] : all) {
    if (f.apiary && f.hivemind) ahead.emplace_back(p.name, *f.apiary / *f.hivemind);
    if (f.apiary && f.apiary_bound && p.batch_size >= 2048) big.emplace_back(p.name, *f.apiary / *f.apiary_bound);
    if (f.apiary && f.apiary_bound && p.batch_size == 32) small.emplace_back(p.name, *f.apiary / *f.apiary_bound);
  }
  fmt::print("\n");
  print_goal("apiary ahead of hivemind on every preset (samples/s ratio a/h >= 1)", ahead, 1.0);
  print_goal("apiary >= 80% of its bound at batch 2048", big, 0.8);
  print_goal("apiary >= 50% of its bound at batch 32", small, 0.5);
  std::vector<std::pair<std::string, double>> overhead;
  if (latency)
    overhead.emplace_back("forward / round trip", latency->at("forward_median_us") / latency->at("echo_median_us"));
  print_goal("RemoteExpert forward at batch 1 <= 2x the plain round trip (medians)", overhead, 2.0, true);
}

}  // namespace

std::vector<ExpertsPreset> experts_presets(const std::vector<std::string>& names) {
  // Upstream's shapes; its batch counts (16 per client, 128 clients) would take hours on
  // 2 cores, where one ffn row of h 1024 costs ~67 MFLOP forward+backward.
  const std::map<std::string, ExpertsPreset> all = {
      {"minimalistic", {"minimalistic", 1, 1024, 1, 1, 2048, 0, true, 1}},
      {"ffn_small_batch", {"ffn_small_batch", 4, 1024, 8, 8, 32, 8192, false, 0}},
      {"default", {"default", 16, 1024, 4, 2, 128, 0, true, 0}},
      {"tiny", {"tiny", 2, 64, 2, 4, 16, 0, true, 0}},
  };
  std::vector<ExpertsPreset> out;
  for (const auto& n : names) {
    const auto it = all.find(n);
    if (it == all.end()) return {};
    out.push_back(it->second);
  }
  return out;
}

int run_experts_bench(const ExpertsBenchOptions& o) {
  const auto presets = experts_presets(o.presets);
  if (presets.empty()) {
    fmt::print("error: expected presets among minimalistic, ffn_small_batch, default, tiny\n");
    return 1;
  }
  const std::string exe = o.self_exe.empty() ? executable_path() : o.self_exe;
  const auto peer = find_peer(o);
  fmt::print("apiary bench experts: benchmark_throughput.py's workload, 127.0.0.1, UCX_NET_DEVICES=lo; seed {}\n", o.seed);
  fmt::print("hivemind peer: {}\n", peer ? peer->first + " " + peer->second : "missing: " + peer.error().message);
  fmt::print("load before: {}\n", load_averages());
  // The batch-1 round trips first, before the presets' processes load the machine (on 2
  // cores any other work moves them several-fold; both round trips alike).
  Result<std::map<std::string, double>> latency = make_error(errc::unavailable, "not run");
  if (o.latency) latency = run_latency(o, exe);
  if (latency)
    fmt::print("\nbatch 1 (nop expert, 16 floats): RemoteExpert forward median {:.1f} us (p99 {:.1f}), plain unary round "
               "trip of the same bytes {:.1f} us (p99 {:.1f}): {:.2f}x\n", latency->at("forward_median_us"),
               latency->at("forward_p99_us"), latency->at("echo_median_us"), latency->at("echo_p99_us"),
               latency->at("forward_median_us") / latency->at("echo_median_us"));
  else if (o.latency)
    fmt::print("\nbatch 1: n/a: {}\n", latency.error().message);
  bool ok = true;
  std::vector<std::pair<ExpertsPreset, PresetFigures>> all;
  for (const auto& p : presets) {
    all.emplace_back(p, run_preset(o, p, exe, peer));
    ok = ok && (all.back().second.apiary.ok() || std::find(o.systems.begin(), o.systems.end(), "apiary") == o.systems.end());
  }
  print_goals(all, latency);
  fmt::print("load after: {}\n", load_averages());
  return ok ? 0 : 1;
}

}  // namespace apiary::bench
