// `apiary bench dht`, parent side: runs one child per system and node count, parses
// their "dht_result" lines and prints apiary beside OpenDHT with ratios.
#include "bench/dht_bench.hpp"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "bench/child_process.hpp"

namespace apiary::bench {
namespace {

/// One child run flattened: "bootstrap.ms", "proc.vmhwm_kb", "put.<round>.p99_ms", ... -> value
/// (round: index into DhtBenchOptions::concs).
using Figures = std::map<std::string, double>;

/// What one child run gave: its figures (possibly partial) and, if it failed, why.
struct ChildRun {
  Figures figures;
  std::optional<std::string> error;
};

/// Runs one child for `system` with `nodes` nodes and returns its figures.
ChildRun run_child(const std::string& system, std::size_t nodes, std::size_t rep, const DhtBenchOptions& o,
                   const std::string& exe) {
  std::vector<std::string> argv = {exe};
  if (system == "apiary") argv.insert(argv.end(), {"bench", "dht-child"});
  argv.insert(argv.end(), {"--nodes", std::to_string(nodes), "--ops", std::to_string(o.ops), "--conc", joined(o.concs),
                           "--value-bytes", std::to_string(o.value_bytes), "--seed", std::to_string(o.seed + rep),
                           "--timeout-s", std::to_string(o.op_timeout_s)});
  if (o.latest && system == "apiary") argv.emplace_back("--latest");
  if (o.authorized && system == "apiary") argv.emplace_back("--authorized");
  if (system == "apiary") argv.insert(argv.end(), {"--mode", o.mode, "--per-gateway", std::to_string(o.per_gateway),
                                                       "--host", o.host});
  // The apiary child talks UCX over loopback only; the caller's choice wins when set.
  std::vector<std::string> env;
  if (std::getenv("UCX_NET_DEVICES") == nullptr) env.emplace_back("UCX_NET_DEVICES=lo");
  ChildRun run;
  auto child = Child::start(argv, env);
  if (!child) {
    run.error = child.error().message;
    return run;
  }
  // Bootstrap (<= 30 s in the OpenDHT child) plus two phases per round, plus teardown.
  const auto limit = std::chrono::seconds(60 + 2 * o.op_timeout_s * static_cast<int>(o.concs.size()));
  const ExitInfo exit = child->wait(Clock::now() + limit);
  std::map<std::string, std::size_t> rounds;  // put/get lines seen so far: the round index
  for (const auto& line : parse_dht_results(exit.output)) {
    std::string prefix = line.phase + ".";
    if (line.phase == "put" || line.phase == "get") prefix += std::to_string(rounds[line.phase]++) + ".";
    for (const auto& [key, text] : line.fields) {
      const double v = line.number(key, -1e300);
      if (v > -1e300) run.figures[prefix + key] = v;
    }
  }
  if (!exit.success() || run.figures.count("proc.vmhwm_kb") == 0)
    run.error = fmt::format("expected the {} child (N={}) to exit 0 after its proc line, got {}: {}", system, nodes,
                            exit.describe(), exit.tail(3));
  return run;
}

/// Per key, the median over the runs that have it.
Figures median_of(const std::vector<Figures>& runs) {
  std::map<std::string, std::vector<double>> all;
  for (const auto& r : runs)
    for (const auto& [k, v] : r) all[k].push_back(v);
  Figures out;
  for (auto& [k, v] : all) {
    std::sort(v.begin(), v.end());
    out[k] = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  }
  return out;
}

/// The figure under `key`, if the run produced it.
std::optional<double> figure(const Figures& f, const std::string& key) {
  const auto it = f.find(key);
  return it == f.end() ? std::nullopt : std::optional<double>(it->second);
}

std::string num(std::optional<double> v, int digits) {
  return v ? fmt::format("{:.{}f}", *v, digits) : std::string("n/a");
}

std::string ratio(std::optional<double> a, std::optional<double> b) {
  return a && b && *b > 0 ? fmt::format("{:.2f}", *a / *b) : std::string("-");
}

/// The cells of one system's row for round `round` at `conc` in flight (or ratios when
/// `peer` is given).
std::vector<std::string> row_cells(const std::string& name, std::size_t round, std::size_t conc, const Figures& f,
                                   std::size_t nodes, const Figures* peer) {
  const std::string c = std::to_string(round) + ".";
  auto three = [&](const std::string& op) {
    std::string s;
    for (const char* k : {"mean_ms", "p50_ms", "p99_ms"}) {
      const auto v = figure(f, op + "." + c + k);
      s += (s.empty() ? "" : " / ") + (peer ? ratio(v, figure(*peer, op + "." + c + k)) : num(v, 2));
    }
    return s;
  };
  auto pair = [&](const std::string& key, double scale, int digits) {
    std::string s;
    for (const char* op : {"put", "get"}) {
      auto v = figure(f, std::string(op) + "." + c + key);
      if (v) *v *= scale;
      auto p = peer ? figure(*peer, std::string(op) + "." + c + key) : std::nullopt;
      if (p) *p *= scale;
      s += (s.empty() ? "" : " / ") + (peer ? ratio(v, p) : num(v, digits));
    }
    return s;
  };
  auto one = [&](const std::string& key, double scale, int digits) {
    auto v = figure(f, key);
    if (v) *v *= scale;
    if (!peer) return num(v, digits);
    auto p = figure(*peer, key);
    if (p) *p *= scale;
    return ratio(v, p);
  };
  const double per_node = 1.0 / static_cast<double>(nodes);
  return {name, std::to_string(conc), three("put"), three("get"), pair("success", 100, 1), pair("ops_per_s", 1, 0),
          one("bootstrap.ms", 1e-3, 2), one("proc.threads", 1, 0), one("proc.vmhwm_kb", 1.0 / 1024, 1),
          one("proc.vmhwm_kb", per_node, 0)};
}

}  // namespace

double DhtResultLine::number(const std::string& key, double fallback) const {
  const auto it = fields.find(key);
  if (it == fields.end()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  return end == it->second.c_str() ? fallback : v;
}

std::vector<DhtResultLine> parse_dht_results(std::string_view output) {
  std::vector<DhtResultLine> out;
  std::istringstream in{std::string(output)};
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("dht_result ", 0) != 0) continue;
    DhtResultLine r;
    std::istringstream words(line.substr(11));
    for (std::string w; words >> w;) {
      const auto eq = w.find('=');
      if (eq == std::string::npos) continue;
      r.fields[w.substr(0, eq)] = w.substr(eq + 1);
    }
    r.phase = r.fields.count("phase") ? r.fields["phase"] : "";
    out.push_back(std::move(r));
  }
  return out;
}

int run_dht_bench(const DhtBenchOptions& o) {
  if (o.nodes.empty() || o.concs.empty() || o.ops == 0 || o.reps == 0 || o.value_bytes == 0) {
    fmt::print("error: expected node counts, concurrency levels, --ops, --reps and the value size all non-empty and "
               "> 0\n");
    return 1;
  }
  for (const auto n : o.nodes)
    if (n < 2) {
      fmt::print("error: expected every node count >= 2 (gets run on a node other than the storer), got {}\n", n);
      return 1;
    }
  const std::string exe = o.self_exe.empty() ? executable_path() : o.self_exe;
  const std::string dir = self_dir();
  const auto peer = find_executable("apiary_dht_opendht_peer", o.opendht_path, "APIARY_DHT_OPENDHT_PEER",
                                    {dir, dir + "/../bench"});
  fmt::print("apiary bench dht: N nodes in one process per system, 127.0.0.1, {} puts then {} gets of {} B values "
             "per concurrency level ({}), {} rep(s), apiary gets with latest={}, apiary UCX mode {}, "
             "{} apiary nodes per gateway, on its {} host{}\n",
             o.ops, o.ops, o.value_bytes, joined(o.concs), o.reps, o.latest, o.mode, o.per_gateway,
             o.host == "actor" ? "actor" : "transport-thread",
             o.authorized ? ", every apiary call authorized (tokens and signatures; OpenDHT has none)" : "");
  fmt::print("OpenDHT peer: {}\n", peer ? *peer : "n/a (" + peer.error().message + ")");
  fmt::print("load before: {}\n", load_averages());
  std::fflush(stdout);

  bool ok = true;
  for (const auto n : o.nodes) {
    std::map<std::string, Figures> by_system;
    std::vector<std::string> failures;
    for (const auto& system : o.systems) {
      if (system == "opendht" && !peer) {
        failures.push_back("OpenDHT: " + peer.error().message);
        by_system[system] = {};
        continue;
      }
      std::vector<Figures> runs;
      for (std::size_t rep = 0; rep < o.reps; ++rep) {
        fmt::print("running {} N={} rep {} (CPU busy before: {}%) ...\n", system, n, rep + 1, cpu_busy_pct(500));
        std::fflush(stdout);
        auto r = run_child(system, n, rep, o, system == "apiary" ? exe : *peer);
        if (r.error) failures.push_back(system + ": " + *r.error);
        if (r.error && system == "apiary") ok = false;
        runs.push_back(std::move(r.figures));  // partial figures of a failed run still show
      }
      by_system[system] = median_of(runs);
    }
    std::vector<std::vector<std::string>> lines = {{"system", "conc", "put mean/p50/p99 ms", "get mean/p50/p99 ms",
                                                    "ok put/get %", "ops/s put/get", "boot s", "threads",
                                                    "peak RSS MB", "KB/node"}};
    const Figures none;
    const auto a = by_system.count("apiary") ? by_system["apiary"] : none;
    const auto d = by_system.count("opendht") ? by_system["opendht"] : none;
    const bool both = by_system.size() == 2;
    for (std::size_t k = 0; k < o.concs.size(); ++k) {
      const std::size_t c = o.concs[k];
      if (by_system.count("apiary")) lines.push_back(row_cells("apiary", k, c, a, n, nullptr));
      if (by_system.count("opendht")) lines.push_back(row_cells("OpenDHT", k, c, d, n, nullptr));
      if (both) lines.push_back(row_cells("ratio a/o", k, c, a, n, &d));
    }
    print_table(fmt::format("N = {} nodes in one process ({} rep(s), medians)", n, o.reps), lines);
    for (std::size_t r = 0; r < o.concs.size(); ++r) {
      const std::string k = "get." + std::to_string(r) + ".";
      if (figure(d, k + "first_p50_ms"))
        fmt::print("OpenDHT conc {}: get until the value first arrived p50 {} / p99 {} ms (the table times the whole "
                   "lookup)\n", o.concs[r], num(figure(d, k + "first_p50_ms"), 2), num(figure(d, k + "first_p99_ms"), 2));
    }
    for (std::size_t r = 0; r < o.concs.size(); ++r) {
      const std::size_t c = o.concs[r];
      const std::string put = "put." + std::to_string(r) + ".", gt = "get." + std::to_string(r) + ".";
      fmt::print("conc {}: process CPU ms per op put / get: apiary {} / {}, OpenDHT {} / {}; apiary calls per op "
                 "put / get: {} / {}\n", c, num(figure(a, put + "cpu_ms_per_op"), 2), num(figure(a, gt + "cpu_ms_per_op"), 2),
                 num(figure(d, put + "cpu_ms_per_op"), 2), num(figure(d, gt + "cpu_ms_per_op"), 2),
                 num(figure(a, put + "calls_per_op"), 1), num(figure(a, gt + "calls_per_op"), 1));
    }
    const auto mb = [](std::optional<double> kb) { return num(kb ? std::optional<double>(*kb / 1024) : kb, 1); };
    fmt::print("after bootstrap: apiary RSS {} MB, {} fds; OpenDHT RSS {} MB, {} fds\n", mb(figure(a, "bootstrap.rss_kb")),
               num(figure(a, "bootstrap.fds"), 0), mb(figure(d, "bootstrap.rss_kb")), num(figure(d, "bootstrap.fds"), 0));
    if (figure(a, "bootstrap.mean_routing_table"))
      fmt::print("apiary: mean routing-table size after bootstrap {}; threads right after bootstrap {}\n",
                 num(figure(a, "bootstrap.mean_routing_table"), 1), num(figure(a, "bootstrap.threads"), 0));
    if (figure(d, "bootstrap.mean_good_nodes"))
      fmt::print("OpenDHT: mean good nodes after bootstrap {}\n", num(figure(d, "bootstrap.mean_good_nodes"), 1));
    for (const auto& f : failures) fmt::print("n/a: {}\n", f);
    std::fflush(stdout);
  }
  fmt::print("\nboot s: apiary = until every node's Dht::start returned (bootstrap done); OpenDHT = until every node "
             "has >= min(N-1, 8) good nodes (the shared harness's rule). Ratios are apiary / OpenDHT.\n");
  fmt::print("load after: {}\n", load_averages());
  return ok ? 0 : 1;
}

}  // namespace apiary::bench
