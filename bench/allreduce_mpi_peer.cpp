// The MPI peer of `apiary bench allreduce`: one rank of MPI_Allreduce (float sum,
// out-of-place) under Open MPI's mpirun; the transport (shared memory or tcp on lo) is
// chosen by mpirun's flags. Links MPI only (Debian libopenmpi-dev), no apiary layer.
//
//   mpirun -np N [flags] apiary_allreduce_mpi_peer --label L --sizes B1,B2,... [--quick]
//
// Prints the workload's allreduce_result lines (bench/allreduce_workload.hpp), system
// mpi-L, one per rank and size. Exit 0 ok, 1 a failed check, 2 bad arguments.
#include <mpi.h>

#include <string>
#include <vector>

#include "bench/allreduce_workload.hpp"

namespace wl = apiary::bench::allreduce_workload;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const std::string label = wl::flag_value(argc, argv, "--label", "default");
  const auto sizes = wl::parse_sizes(wl::flag_value(argc, argv, "--sizes"));
  const bool quick = wl::has_flag(argc, argv, "--quick");
  if (sizes.empty()) {
    if (rank == 0) std::fprintf(stderr, "usage: %s --label L --sizes B1,B2,... [--quick]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const auto r = static_cast<std::size_t>(rank);
  const auto n = static_cast<std::size_t>(ranks);
  bool all_ok = true;
  for (const std::size_t bytes : sizes) {
    const int count = static_cast<int>(bytes / sizeof(float));
    std::vector<float> in(static_cast<std::size_t>(count));
    std::vector<float> out(in.size(), 0.0f);
    wl::fill_inputs(in, r);
    // Checked operation: the sum of known inputs (the inputs stay, so every op is alike).
    MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const bool ok = wl::first_mismatch(out, [&](std::size_t j) { return wl::expected_sum(n, j); }) == out.size();
    const std::size_t iters = wl::iters_for(bytes, quick);
    for (std::size_t i = 0; i < wl::warmup_for(iters); ++i)
      MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const auto s0 = wl::switches_now();
    const double t0 = MPI_Wtime();
    for (std::size_t i = 0; i < iters; ++i)
      MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double seconds = MPI_Wtime() - t0;
    const auto s1 = wl::switches_now();
    wl::RankFigure f;
    f.system = "mpi-" + label;
    f.rank = r;
    f.ranks = n;
    f.bytes = bytes;
    f.iters = iters;
    f.us_per_op = seconds * 1e6 / static_cast<double>(iters);
    f.set_counters(s0, s1);
    f.ok = ok;
    wl::print_figure(f);
    all_ok = all_ok && ok;
  }
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
