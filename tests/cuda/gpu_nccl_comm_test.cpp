// GPU tests (label gpu, part of cuda_gpu_kernels_test, which skips without a device):
// one nccl_communicator per local device, each driven by its own thread as separate
// processes would, joined through one unique id; all-reduce and all-gather results.
#include <string>
#include <thread>
#include <vector>

#include "cuda/buffer.hpp"
#include "cuda/nccl_comm.hpp"
#include "cuda/runtime.hpp"
#include "tests/cuda/check.hpp"

using namespace apiary::cuda;

namespace {

// What one rank saw: its all-reduce and all-gather results, or the first failure.
struct rank_result {
  std::string failure;
  std::vector<float> reduced, gathered;
};

rank_result run_rank(const nccl_id& id, int ranks, int rank, std::size_t n) {
  rank_result out;
  std::unique_ptr<nccl_communicator> comm;
  status st = nccl_communicator::create(id, ranks, rank, rank, &comm);
  if (!st) return {st.message(), {}, {}};
  std::vector<float> mine(n);
  for (std::size_t i = 0; i < n; ++i) mine[i] = static_cast<float>(rank + 1) * static_cast<float>(i % 13);
  device_buffer send, recv, gathered;
  st = device_buffer::allocate(backend::cuda, n * sizeof(float), &send);
  if (st) st = device_buffer::allocate(backend::cuda, n * sizeof(float), &recv);
  if (st) st = device_buffer::allocate(backend::cuda, ranks * n * sizeof(float), &gathered);
  if (st) st = send.upload(mine.data(), n * sizeof(float));
  if (st) st = comm->all_reduce(send.as<float>(), recv.as<float>(), n);
  if (st) st = comm->all_gather(send.as<float>(), gathered.as<float>(), n);
  out.reduced.resize(n);
  out.gathered.resize(ranks * n);
  if (st) st = recv.download(out.reduced.data(), n * sizeof(float));
  if (st) st = gathered.download(out.gathered.data(), ranks * n * sizeof(float));
  if (!st) out.failure = st.message();
  return out;
}

}  // namespace

TEST_CASE("nccl communicator: one rank per device joins by id, all-reduce and all-gather") {
  int devices = 0;
  CHECK(gpu::device_count(&devices).ok());
  nccl_id id;
  const status made = nccl_new_id(&id);
  CHECK_MSG(made.ok(), made.message());
  if (!made.ok() || devices < 1) return;
  const std::size_t n = 4097;
  std::vector<rank_result> results(devices);
  std::vector<std::thread> threads;
  for (int r = 0; r < devices; ++r) {
    threads.emplace_back([&, r] { results[r] = run_rank(id, devices, r, n); });
  }
  for (std::thread& t : threads) t.join();
  const float factor = static_cast<float>(devices * (devices + 1) / 2);
  for (int r = 0; r < devices; ++r) {
    CHECK_MSG(results[r].failure.empty(), results[r].failure);
    if (!results[r].failure.empty()) continue;
    bool reduced = true, gathered = true;
    for (std::size_t i = 0; i < n; ++i) {
      reduced = reduced && results[r].reduced[i] == factor * static_cast<float>(i % 13);
      for (int k = 0; k < devices; ++k) {
        gathered = gathered && results[r].gathered[k * n + i] == static_cast<float>(k + 1) * static_cast<float>(i % 13);
      }
    }
    CHECK_MSG(reduced, "all-reduce on rank " + std::to_string(r));
    CHECK_MSG(gathered, "all-gather on rank " + std::to_string(r));
  }
}
