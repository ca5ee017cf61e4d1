// apiary_peer_report: measures every established-peer figure that `apiary bench transport`
// shows beside apiary's own (ucx_perftest and bare UCX, tcp and shm, 127.0.0.1 only) and
// prints them as one table. A figure that cannot be measured shows as "n/a (why)".
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/peers.hpp"

namespace {

using apiary::Result;
using apiary::bench::PeerConfig;

/// Iteration counts; the defaults keep the whole report under a minute on 2 cores.
struct Counts {
  std::uint64_t lat = 100000;      ///< perftest tag_lat round trips
  std::uint64_t perf_bw = 200;     ///< perftest ucp_am_bw messages of 16 MiB
  std::uint64_t rtt = 20000;       ///< bare pingpong round trips
  std::uint64_t bw = 64;           ///< bare bw messages of 16 MiB
  std::uint64_t bw_size = 16u << 20;
};

/// One table cell: the figure, or "n/a (why)" with the reason kept for the notes.
struct Cell {
  std::string text;
  std::string note;  ///< the full error when text is n/a
};

template <class T, class Format>
Cell cell(const Result<T>& r, Format format) {
  if (r) return {format(*r), ""};
  return {"n/a (" + std::string(apiary::to_string(r.error().code)) + ")",
          r.error().what()};
}

struct Row {
  std::string label;
  std::vector<Cell> cells;  ///< one per tls, in the order of `tls_list`
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Measure the established-peer transport figures (ucx_perftest, bare UCX) on "
               "127.0.0.1 and print them as a table."};
  PeerConfig config;
  Counts n;
  int timeout_s = 60;
  bool no_pin = false;
  app.add_option("--perftest", config.perftest_path, "path of ucx_perftest (default: PATH)");
  app.add_option("--pingpong", config.pingpong_path,
                 "path of apiary_ucx_pingpong (default: next to this program)");
  app.add_option("--timeout", timeout_s, "seconds allowed per run before it is killed");
  app.add_flag("--no-pin", no_pin, "do not pin the two processes of a run to two CPUs");
  app.add_option("--lat-iters", n.lat, "ucx_perftest tag_lat iterations");
  app.add_option("--perf-bw-iters", n.perf_bw, "ucx_perftest ucp_am_bw iterations");
  app.add_option("--rtt-iters", n.rtt, "bare pingpong round trips");
  app.add_option("--bw-iters", n.bw, "bare bandwidth messages");
  CLI11_PARSE(app, argc, argv);
  config.timeout = std::chrono::seconds(timeout_s);
  config.pin = !no_pin;

  using namespace apiary::bench;
  const std::vector<std::string> tls_list = {"tcp", "shm"};
  auto us = [](double v) { return fmt::format("{:.2f} us", v); };
  std::vector<Row> rows = {
      {"ucx_perftest tag_lat 64 B: RTT (1-way x2)", {}},
      {"ucx_perftest ucp_am_bw 16 MiB", {}},
      {"bare UCX AM 64 B RTT, event fd: median (p99)", {}},
      {"bare UCX AM 64 B RTT, busy poll: median (p99)", {}},
      {"bare UCX AM 16 MiB one-way bw, event fd", {}},
  };
  for (const auto& tls : tls_list) {
    std::fprintf(stderr, "measuring %s ...\n", tls.c_str());
    rows[0].cells.push_back(cell(run_perftest("tag_lat", tls, 64, n.lat, config),
                                 [&](const PerftestFigure& f) {
                                   return fmt::format("{} ({:.3f})", us(f.rtt_us), f.one_way_us);
                                 }));
    rows[1].cells.push_back(cell(run_perftest("ucp_am_bw", tls, n.bw_size, n.perf_bw, config),
                                 [](const PerftestFigure& f) {
                                   return fmt::format("{:.0f} MiB/s", f.mib_per_s);
                                 }));
    for (int busy = 0; busy < 2; ++busy)
      rows[2 + busy].cells.push_back(
          cell(run_bare_pingpong(tls, busy != 0, n.rtt, config), [&](const PingpongFigure& f) {
            return fmt::format("{} ({:.1f})", us(f.median_us), f.p99_us);
          }));
    rows[4].cells.push_back(cell(run_bare_bw(tls, n.bw_size, n.bw, config),
                                 [](const PingpongFigure& f) {
                                   return fmt::format("{:.0f} MiB/s", f.mib_per_s);
                                 }));
  }

  // Number the failures, then size each column to its widest cell.
  std::vector<std::string> notes;
  for (auto& row : rows)
    for (auto& c : row.cells)
      if (!c.note.empty()) {
        notes.push_back(c.note);
        c.text += fmt::format(" [{}]", notes.size());
      }
  std::vector<std::size_t> width = {std::string("figure").size()};
  for (std::size_t t = 0; t < tls_list.size(); ++t) width.push_back(tls_list[t].size());
  for (const auto& row : rows) {
    width[0] = std::max(width[0], row.label.size());
    for (std::size_t t = 0; t < row.cells.size(); ++t)
      width[t + 1] = std::max(width[t + 1], row.cells[t].text.size());
  }
  fmt::print("established peers, 127.0.0.1, UCX_NET_DEVICES=lo, {}\n",
             config.pin ? "each pair pinned to two CPUs" : "unpinned");
  fmt::print("{:<{}}", "figure", width[0]);
  for (std::size_t t = 0; t < tls_list.size(); ++t) fmt::print("  {:<{}}", tls_list[t], width[t + 1]);
  fmt::print("\n");
  for (const auto& row : rows) {
    fmt::print("{:<{}}", row.label, width[0]);
    for (std::size_t t = 0; t < row.cells.size(); ++t)
      fmt::print("  {:<{}}", row.cells[t].text, width[t + 1]);
    fmt::print("\n");
  }
  for (std::size_t i = 0; i < notes.size(); ++i) fmt::print("[{}] {}\n", i + 1, notes[i]);
  return notes.empty() ? 0 : 1;
}
