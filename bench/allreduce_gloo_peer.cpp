// The Gloo peer of `apiary bench allreduce`: one rank of gloo::AllreduceRing<float>
// (in-place sum) over Gloo's tcp transport on 127.0.0.1, ranks meeting through a
// FileStore directory. Links Gloo only (Debian libgloo-dev), no apiary layer.
//
//   apiary_allreduce_gloo_peer --rank R --ranks N --store DIR --sizes B1,B2,... [--quick]
//
// Prints the workload's allreduce_result lines (bench/allreduce_workload.hpp), system
// gloo-ring. Exit 0 ok, 1 a failed check, 2 bad arguments.
#include <gloo/allreduce_ring.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bench/allreduce_workload.hpp"

namespace wl = apiary::bench::allreduce_workload;

namespace {

using Clock = std::chrono::steady_clock;

/// Runs one size: a checked operation, warm-up, timed operations. Returns the figure.
wl::RankFigure run_size(const std::shared_ptr<gloo::Context>& ctx, std::size_t bytes, bool quick) {
  const auto rank = static_cast<std::size_t>(ctx->rank);
  const auto ranks = static_cast<std::size_t>(ctx->size);
  std::vector<float> buf(bytes / sizeof(float));
  std::vector<float*> ptrs{buf.data()};
  gloo::AllreduceRing<float> ring(ctx, ptrs, static_cast<int>(buf.size()));

  // Checked operation: the in-place sum of known inputs.
  wl::fill_inputs(buf, rank);
  ring.run();
  const bool ok = wl::first_mismatch(buf, [&](std::size_t j) { return wl::expected_sum(ranks, j); }) == buf.size();

  // Zeros from here on: repeated in-place sums stay finite and the work is the same.
  std::fill(buf.begin(), buf.end(), 0.0f);
  const std::size_t iters = wl::iters_for(bytes, quick);
  for (std::size_t i = 0; i < wl::warmup_for(iters); ++i) ring.run();
  gloo::BarrierAllToAll(ctx).run();
  const auto s0 = wl::switches_now();
  const auto t0 = Clock::now();
  for (std::size_t i = 0; i < iters; ++i) ring.run();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  const auto s1 = wl::switches_now();

  wl::RankFigure f;
  f.system = "gloo-ring";
  f.rank = rank;
  f.ranks = ranks;
  f.bytes = bytes;
  f.iters = iters;
  f.us_per_op = us / static_cast<double>(iters);
  f.set_counters(s0, s1);
  f.ok = ok;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = std::atoi(wl::flag_value(argc, argv, "--rank", "-1").c_str());
  const int ranks = std::atoi(wl::flag_value(argc, argv, "--ranks", "0").c_str());
  const std::string store_dir = wl::flag_value(argc, argv, "--store");
  const auto sizes = wl::parse_sizes(wl::flag_value(argc, argv, "--sizes"));
  const bool quick = wl::has_flag(argc, argv, "--quick");
  if (rank < 0 || ranks < 2 || rank >= ranks || store_dir.empty() || sizes.empty()) {
    std::fprintf(stderr,
                 "usage: %s --rank R --ranks N --store DIR --sizes B1,B2,... [--quick]\n"
                 "expected 0 <= R < N, N >= 2, an empty directory shared by the ranks, and sizes in bytes\n",
                 argv[0]);
    return 2;
  }
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";  // loopback only
  attr.ai_family = AF_INET;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore files(store_dir);
  gloo::rendezvous::PrefixStore store("apiary_allreduce", files);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, ranks);
  ctx->setTimeout(std::chrono::seconds(60));
  ctx->connectFullMesh(store, device);

  bool all_ok = true;
  for (const std::size_t bytes : sizes) {
    const auto f = run_size(ctx, bytes, quick);
    wl::print_figure(f);
    all_ok = all_ok && f.ok;
  }
  gloo::BarrierAllToAll(ctx).run();  // nobody leaves while another still reads
  return all_ok ? 0 : 1;
}
