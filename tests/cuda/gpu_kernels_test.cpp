// GPU tests (label gpu): every CUDA kernel against its CPU twin on random data of sizes
// 0, 1, 4097 and 2^20 (bit-exact except sum, which differs only in summation order),
// every binary16 pattern and a sweep of float patterns through the casts, streams, the
// backend-dispatching API, and one NCCL all-reduce over the local devices. Without a
// usable device it prints why and exits 77, which ctest reports as skipped.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda/bits.hpp"
#include "cuda/buffer.hpp"
#include "cuda/device.hpp"
#include "cuda/kernels.hpp"
#include "cuda/nccl.hpp"
#include "cuda/runtime.hpp"
#include "tests/cuda/check.hpp"

using namespace apiary::cuda;
using apiary::cuda::testing::first_bit_mismatch;

namespace {

constexpr int skip_exit_code = 77;  // ctest SKIP_RETURN_CODE
const std::size_t kSizes[] = {0, 1, 4097, std::size_t{1} << 20};

// Copies `host` into a new device buffer; an empty one for an empty vector.
template <class T>
device_buffer to_device(const std::vector<T>& host) {
  device_buffer b;
  const status st = device_buffer::allocate(backend::cuda, host.size() * sizeof(T), &b);
  CHECK_MSG(st.ok(), st.message());
  if (st.ok()) {
    const status up = b.upload(host.data(), host.size() * sizeof(T));
    CHECK_MSG(up.ok(), up.message());
  }
  return b;
}

template <class T>
std::vector<T> to_host(const device_buffer& b, std::size_t n) {
  std::vector<T> host(n);
  const status st = b.download(host.data(), n * sizeof(T));
  CHECK_MSG(st.ok(), st.message());
  return host;
}

std::vector<float> random_floats(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::string size_text(std::size_t n) { return "n = " + std::to_string(n); }

}  // namespace

TEST_CASE("weighted_accumulate: CUDA equals the CPU twin bit for bit") {
  std::mt19937 rng(21);
  for (std::size_t n : kSizes) {
    std::vector<float> acc = random_floats(n, rng);
    const std::vector<float> x = random_floats(n, rng);
    device_buffer d_acc = to_device(acc), d_x = to_device(x);
    const status st = gpu::weighted_accumulate(d_acc.as<float>(), d_x.as<float>(), -0.731f, n);
    CHECK_MSG(st.ok(), st.message());
    CHECK(gpu::synchronize().ok());
    cpu::weighted_accumulate(acc.data(), x.data(), -0.731f, n);
    CHECK_MSG(first_bit_mismatch(to_host<float>(d_acc, n), acc) == n, size_text(n));
  }
}

TEST_CASE("casts: CUDA equals the CPU twin on random bit patterns of every class") {
  std::mt19937 rng(22);
  for (std::size_t n : kSizes) {
    std::vector<float> src(n);
    for (float& v : src) v = float_of(static_cast<std::uint32_t>(rng()));  // incl. NaN, inf
    device_buffer d_src = to_device(src), d_half, d_wide;
    CHECK(device_buffer::allocate(backend::cuda, n * 2, &d_half).ok());
    CHECK(device_buffer::allocate(backend::cuda, n * 4, &d_wide).ok());
    CHECK(gpu::cast_f32_to_f16(d_half.as<std::uint16_t>(), d_src.as<float>(), n).ok());
    CHECK(gpu::cast_f16_to_f32(d_wide.as<float>(), d_half.as<std::uint16_t>(), n).ok());
    CHECK(gpu::synchronize().ok());
    std::vector<std::uint16_t> half(n);
    std::vector<float> wide(n);
    cpu::cast_f32_to_f16(half.data(), src.data(), n);
    cpu::cast_f16_to_f32(wide.data(), half.data(), n);
    CHECK_MSG(first_bit_mismatch(to_host<std::uint16_t>(d_half, n), half) == n,
              "narrow " + size_text(n));
    CHECK_MSG(first_bit_mismatch(to_host<float>(d_wide, n), wide) == n, "widen " + size_text(n));
  }
}

TEST_CASE("casts: every binary16 pattern, and a float sweep, match the CPU twin") {
  std::vector<std::uint16_t> every(65536);
  for (std::uint32_t h = 0; h < 65536; ++h) every[h] = static_cast<std::uint16_t>(h);
  std::vector<float> want_wide(every.size());
  cpu::cast_f16_to_f32(want_wide.data(), every.data(), every.size());
  device_buffer d_every = to_device(every), d_wide;
  CHECK(device_buffer::allocate(backend::cuda, every.size() * 4, &d_wide).ok());
  CHECK(gpu::cast_f16_to_f32(d_wide.as<float>(), d_every.as<std::uint16_t>(), every.size()).ok());
  CHECK(gpu::synchronize().ok());
  const std::size_t at = first_bit_mismatch(to_host<float>(d_wide, every.size()), want_wide);
  CHECK_MSG(at == every.size(), "first differing half: " + std::to_string(at));

  // Every 257th float bit pattern (16.7M values), covering each binade and class.
  std::vector<float> sweep;
  for (std::uint64_t b = 3; b < (1ull << 32); b += 257)
    sweep.push_back(float_of(static_cast<std::uint32_t>(b)));
  std::vector<std::uint16_t> want_half(sweep.size());
  cpu::cast_f32_to_f16(want_half.data(), sweep.data(), sweep.size());
  device_buffer d_sweep = to_device(sweep), d_half;
  CHECK(device_buffer::allocate(backend::cuda, sweep.size() * 2, &d_half).ok());
  CHECK(gpu::cast_f32_to_f16(d_half.as<std::uint16_t>(), d_sweep.as<float>(), sweep.size()).ok());
  CHECK(gpu::synchronize().ok());
  const std::size_t bad =
      first_bit_mismatch(to_host<std::uint16_t>(d_half, sweep.size()), want_half);
  CHECK_MSG(bad == sweep.size(), bad < sweep.size()
                                     ? "first differing float: " + testing::hex_bits(sweep[bad])
                                     : std::string());
}

TEST_CASE("sum: CUDA agrees with the CPU twin and is deterministic") {
  std::mt19937 rng(23);
  for (std::size_t n : kSizes) {
    const std::vector<float> x = random_floats(n, rng);
    device_buffer d_x = to_device(x);
    double first = -1.0, second = -2.0;
    const status st = gpu::sum(d_x.as<float>(), n, &first);
    CHECK_MSG(st.ok(), st.message());
    CHECK(gpu::sum(d_x.as<float>(), n, &second).ok());
    CHECK_MSG(first == second, size_text(n));
    double magnitude = 0.0;
    for (float v : x) magnitude += std::fabs(v);
    const double want = cpu::sum(x.data(), n);
    CHECK_MSG(std::fabs(first - want) <= 1e-12 * magnitude,
              size_text(n) + ": " + std::to_string(first) + " vs " + std::to_string(want));
  }
}

TEST_CASE("streams and the dispatching API on backend::cuda") {
  stream_handle stream = nullptr;
  const status made = gpu::create_stream(&stream);
  CHECK_MSG(made.ok(), made.message());
  std::mt19937 rng(24);
  const std::size_t n = 4097;
  std::vector<float> acc = random_floats(n, rng);
  const std::vector<float> x = random_floats(n, rng);
  device_buffer d_acc = to_device(acc), d_x = to_device(x);
  for (int round = 0; round < 3; ++round) {
    CHECK(weighted_accumulate(backend::cuda, d_acc.as<float>(), d_x.as<float>(), 0.25f, n, stream)
              .ok());
    cpu::weighted_accumulate(acc.data(), x.data(), 0.25f, n);
  }
  double total = 0.0;
  CHECK(sum(backend::cuda, d_acc.as<float>(), n, &total, stream).ok());  // waits for the stream
  CHECK(gpu::synchronize(stream).ok());
  CHECK(first_bit_mismatch(to_host<float>(d_acc, n), acc) == n);
  CHECK(std::fabs(total - cpu::sum(acc.data(), n)) <= 1e-9 * n);
  gpu::destroy_stream(stream);
}

TEST_CASE("nccl: one all-reduce over every local device") {
  if (!nccl_compiled()) {
    std::printf("note: this build has no NCCL; all-reduce not tested\n");
    return;
  }
  int devices = 0;
  CHECK(gpu::device_count(&devices).ok());
  std::vector<int> ordinals;
  for (int d = 0; d < devices; ++d) ordinals.push_back(d);
  std::unique_ptr<nccl_clique> clique;
  const status made = nccl_clique::create(ordinals, &clique);
  CHECK_MSG(made.ok(), made.message());
  if (!made.ok()) return;
  const std::size_t n = 4097;
  // Rank k sends integers times (k + 1), so every partial sum is exact in float.
  std::vector<float> base(n);
  for (std::size_t i = 0; i < n; ++i) base[i] = static_cast<float>(static_cast<int>(i % 199) - 99);
  std::vector<device_buffer> send(devices), recv(devices);
  std::vector<const float*> send_ptrs;
  std::vector<float*> recv_ptrs;
  for (int k = 0; k < devices; ++k) {
    CHECK(gpu::set_device(k).ok());
    std::vector<float> mine(base);
    for (float& v : mine) v *= static_cast<float>(k + 1);
    send[k] = to_device(mine);
    CHECK(device_buffer::allocate(backend::cuda, n * 4, &recv[k]).ok());
    CHECK(recv[k].fill_bytes(0xff).ok());  // NaN everywhere: untouched output shows
    send_ptrs.push_back(send[k].as<float>());
    recv_ptrs.push_back(recv[k].as<float>());
  }
  const status reduced = clique->all_reduce_sum(send_ptrs, recv_ptrs, n);
  CHECK_MSG(reduced.ok(), reduced.message());
  const float factor = static_cast<float>(devices * (devices + 1) / 2);
  std::vector<float> want(base);
  for (float& v : want) v *= factor;
  for (int k = 0; k < devices; ++k) {
    CHECK(gpu::set_device(k).ok());
    CHECK_MSG(first_bit_mismatch(to_host<float>(recv[k], n), want) == n,
              "rank " + std::to_string(k));
  }
  CHECK(gpu::set_device(0).ok());
}

int main(int argc, char** argv) {
  int devices = 0;
  const status counted = gpu::device_count(&devices);
  if (devices <= 0) {
    std::printf("SKIP: no CUDA device (%s)\n",
                counted.ok() ? "cudaGetDeviceCount: 0 devices" : counted.message().c_str());
    return skip_exit_code;
  }
  std::printf("%s", device_info().c_str());
  return apiary::cuda::testing::run_all("cuda_gpu_kernels_test", argc, argv);
}
