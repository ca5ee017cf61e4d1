#include "bench/peers.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/child_process.hpp"

namespace apiary::bench {
namespace {

/// Environment both peers get: loopback only, no warnings about unrelated UCX_* vars.
std::vector<std::string> loopback_env(std::string_view tls_value) {
  std::vector<std::string> env = {"UCX_NET_DEVICES=lo", "UCX_WARN_UNUSED_ENV_VARS=n"};
  if (!tls_value.empty()) env.push_back("UCX_TLS=" + std::string(tls_value));
  return env;
}

Status check_tls(std::string_view tls) {
  if (tls == "tcp" || tls == "shm") return ok_status();
  return make_error(errc::invalid_argument, "expected tls 'tcp' or 'shm', got '{}'", tls);
}

/// Strict number parse: the whole of `text` must be the number.
bool to_double(std::string_view text, double& out) {
  const std::string s(text);
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

std::string trimmed(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

/// Error for a tool run that did not succeed, with its last lines of output.
Error run_failed(std::string_view what, const ExitInfo& info) {
  const bool late = info.timed_out || info.code == 124;  // 124: the tool's own deadline
  return make_error(late ? errc::deadline_exceeded : errc::unavailable,
                    "{} {}: {}", what, info.describe(), info.tail());
}

Result<std::string> pingpong_exe(const PeerConfig& config) {
  const std::string dir = self_dir();
  return find_executable("apiary_ucx_pingpong", config.pingpong_path, "APIARY_UCX_PINGPONG",
                         {dir, dir.empty() ? "" : dir + "/../bench"});
}

/// Runs `apiary_ucx_pingpong --pair <args>` and parses its result line.
Result<PingpongFigure> run_pingpong_pair(std::vector<std::string> args, const PeerConfig& config) {
  auto exe = pingpong_exe(config);
  if (!exe) return exe.error();
  args.insert(args.begin(), {*exe, "--pair", "--timeout", std::to_string(config.timeout.count())});
  if (config.pin) args.emplace_back("--pin");
  auto child = Child::start(args, loopback_env(""));
  if (!child) return child.error();
  // The tool enforces --timeout itself; the extra margin only catches a hung tool.
  const ExitInfo info = child->wait(Clock::now() + config.timeout + std::chrono::seconds(15));
  if (!info.success()) return run_failed("apiary_ucx_pingpong --pair", info);
  return parse_pingpong_output(info.output);
}

}  // namespace

Result<PerftestFigure> run_perftest(std::string_view test, std::string_view tls,
                                    std::uint64_t size, std::uint64_t iters,
                                    const PeerConfig& config) {
  static constexpr std::string_view known[] = {"tag_lat", "tag_bw",    "ucp_am_lat",
                                               "ucp_am_bw", "stream_lat", "stream_bw"};
  if (std::find(std::begin(known), std::end(known), test) == std::end(known))
    return make_error(errc::invalid_argument,
                      "expected a UCP test such as tag_lat or ucp_am_bw, got '{}'", test);
  if (auto s = check_tls(tls); !s) return s.error();
  if (size == 0 || iters == 0)
    return make_error(errc::invalid_argument, "expected size and iters > 0, got {} and {}", size, iters);
  auto exe = find_executable("ucx_perftest", config.perftest_path, "APIARY_UCX_PERFTEST", {});
  if (!exe) return exe.error();
  const std::vector<int> cpus = config.pin ? allowed_cpus() : std::vector<int>{};
  const auto deadline = Clock::now() + config.timeout;
  const auto env = loopback_env(tls == "tcp" ? "tcp" : "sm,self");

  for (int attempt = 0;; ++attempt) {
    auto port = free_port();
    if (!port) return port.error();
    std::vector<std::string> common = {
        "-t", std::string(test), "-s", std::to_string(size), "-n", std::to_string(iters),
        "-w", std::to_string(std::max<std::uint64_t>(iters / 10, 1)), "-p", std::to_string(*port),
        "-f", "-v"};
    std::vector<std::string> server_args = {*exe};
    std::vector<std::string> client_args = {*exe, "127.0.0.1"};
    server_args.insert(server_args.end(), common.begin(), common.end());
    client_args.insert(client_args.end(), common.begin(), common.end());
    if (cpus.size() >= 2) {  // both sides busy-poll: one core each
      server_args.insert(server_args.end(), {"-c", std::to_string(cpus[0])});
      client_args.insert(client_args.end(), {"-c", std::to_string(cpus[1])});
    }
    auto server = Child::start(server_args, env);
    if (!server) return server.error();
    // Wait for its listening socket without connecting to it (it accepts one client).
    const auto listen_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
    while (!is_listening(*port) && !server->exited() && Clock::now() < listen_deadline) {
      server->pump(0);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (server->exited()) {
      const ExitInfo info = server->wait(Clock::now());
      if (attempt < 2) continue;  // most likely the port was taken meanwhile: new port
      return run_failed("ucx_perftest server exited before listening:", info);
    }
    if (!is_listening(*port))
      return make_error(errc::deadline_exceeded,
                        "ucx_perftest server did not listen on port {} within 10 s: {}", *port,
                        server->output().empty() ? "(no output)" : trimmed(server->output()));
    auto client = Child::start(client_args, env);
    if (!client) return client.error();
    const ExitInfo client_info = client->wait(deadline);
    const ExitInfo server_info =
        server->wait(std::min(deadline, Clock::now() + std::chrono::seconds(5)));
    if (!client_info.success())
      return run_failed(fmt::format("ucx_perftest client ({} {} B, tls {})", test, size, tls),
                        client_info);
    auto figure = parse_perftest_output(client_info.output);
    if (!figure) return figure.error();
    figure->test = std::string(test);
    figure->tls = std::string(tls);
    figure->size = size;
    if (test.size() > 4 && test.substr(test.size() - 4) == "_lat") {
      figure->rtt_us = 2.0 * figure->one_way_us;
    } else {
      figure->one_way_us = figure->rtt_us = figure->avg_one_way_us = 0;  // not latency tests
    }
    (void)server_info;  // the client's figures are the result; the server only serves
    return figure;
  }
}

Result<PerftestFigure> parse_perftest_output(std::string_view output) {
  std::string last;
  std::istringstream in{std::string(output)};
  for (std::string line; std::getline(in, line);) {
    const std::string t = trimmed(line);
    if (!t.empty() && t[0] >= '0' && t[0] <= '9' && t.find(',') != std::string::npos) last = t;
  }
  if (last.empty())
    return make_error(errc::malformed,
                      "expected a CSV line 'iterations,typical_lat,...' in ucx_perftest -f -v "
                      "output, found none; is this ucx_perftest 1.13 with -f -v?");
  std::vector<double> v;
  std::istringstream fields(last);
  for (std::string f; std::getline(fields, f, ',');) {
    double d = 0;
    if (!to_double(trimmed(f), d))
      return make_error(errc::malformed, "expected numbers in ucx_perftest CSV line '{}', got '{}'",
                        last, f);
    v.push_back(d);
  }
  if (v.size() < 8)
    return make_error(errc::malformed, "expected 8 CSV fields from ucx_perftest, got {} in '{}'",
                      v.size(), last);
  PerftestFigure f;
  f.iters = static_cast<std::uint64_t>(v[0]);
  f.one_way_us = v[1];
  f.avg_one_way_us = v[2];
  f.mib_per_s = v[5];  // perftest's "MB/s" divides by 1024*1024
  f.msg_per_s = v[7];
  return f;
}

Result<PingpongFigure> run_bare_pingpong(std::string_view tls, bool busy, std::uint64_t iters,
                                         const PeerConfig& config) {
  if (auto s = check_tls(tls); !s) return s.error();
  if (iters == 0) return make_error(errc::invalid_argument, "expected iters > 0, got 0");
  std::vector<std::string> args = {"--tls", std::string(tls), "--size", "64", "--iters",
                                   std::to_string(iters)};
  if (busy) args.emplace_back("--busy");
  return run_pingpong_pair(std::move(args), config);
}

Result<PingpongFigure> run_bare_bw(std::string_view tls, std::uint64_t size, std::uint64_t iters,
                                   const PeerConfig& config) {
  if (auto s = check_tls(tls); !s) return s.error();
  if (size == 0 || iters == 0)
    return make_error(errc::invalid_argument, "expected size and iters > 0, got {} and {}", size, iters);
  return run_pingpong_pair({"--tls", std::string(tls), "--bw", std::to_string(size), "--iters",
                            std::to_string(iters)},
                           config);
}

Result<PingpongFigure> parse_pingpong_output(std::string_view output) {
  std::string last;
  std::istringstream in{std::string(output)};
  for (std::string line; std::getline(in, line);)
    if (line.rfind("result ", 0) == 0) last = line;
  if (last.empty())
    return make_error(errc::malformed, "expected a 'result kind=...' line from "
                      "apiary_ucx_pingpong, found none in: {}", trimmed(output.substr(0, 300)));
  std::map<std::string, std::string, std::less<>> kv;
  std::istringstream words(last.substr(7));
  for (std::string w; words >> w;) {
    const auto eq = w.find('=');
    if (eq == std::string::npos || eq == 0)
      return make_error(errc::malformed, "expected key=value in '{}', got '{}'", last, w);
    kv[w.substr(0, eq)] = w.substr(eq + 1);
  }
  PingpongFigure f;
  f.kind = kv["kind"];
  f.tls = kv["tls"];
  f.mode = kv["mode"];
  auto number = [&](const char* key, double& out) -> Status {
    auto it = kv.find(key);
    if (it != kv.end() && to_double(it->second, out)) return ok_status();
    return make_error(errc::malformed, "expected a number for '{}' in '{}'", key, last);
  };
  double size = 0, iters = 0;
  for (auto s : {number("size", size), number("iters", iters)})
    if (!s) return s.error();
  f.size = static_cast<std::uint64_t>(size);
  f.iters = static_cast<std::uint64_t>(iters);
  if (f.kind == "rtt") {
    for (auto s : {number("median_us", f.median_us), number("p99_us", f.p99_us),
                   number("mean_us", f.mean_us)})
      if (!s) return s.error();
  } else if (f.kind == "bw") {
    for (auto s : {number("MiBps", f.mib_per_s), number("seconds", f.seconds)})
      if (!s) return s.error();
  } else {
    return make_error(errc::malformed, "expected kind=rtt or kind=bw in '{}'", last);
  }
  return f;
}

std::string not_available(const Error& error) { return fmt::format("n/a ({})", error.message); }

}  // namespace apiary::bench
