// Unit tests (label unit) of the CPU codec twins in cuda/codec_kernels.hpp against
// plain reference computations, of device_context / memory_pool on the CPU, and of the
// NCCL communicator's argument checks.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cuda/codec_kernels.hpp"
#include "cuda/device_context.hpp"
#include "cuda/kernels.hpp"
#include "cuda/nccl_comm.hpp"
#include "tests/cuda/check.hpp"

using namespace apiary::cuda;

namespace {

std::vector<float> randn(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// 255 midpoints between 256 ascending codes spread over [-1, 1].
borders255 midpoints(const std::vector<float>& code) {
  borders255 b{};
  for (std::size_t k = 0; k + 1 < code.size(); ++k) b.value[k] = (code[k] + code[k + 1]) / 2.0f;
  return b;
}

std::vector<float> cubic_code() {
  std::vector<float> code(codebook_entries);
  for (std::size_t k = 0; k < code.size(); ++k) {
    const float t = -1.0f + 2.0f * static_cast<float>(k) / 255.0f;
    code[k] = t * t * t;
  }
  return code;
}

std::uint8_t count_below(const borders255& b, float v) {
  return static_cast<std::uint8_t>(std::count_if(std::begin(b.value), std::end(b.value),
                                                 [v](float m) { return m < v; }));
}

}  // namespace

TEST_CASE("uniform_indices rounds half to even, clamps, and sends NaN to 0") {
  const std::vector<float> x = {-0.5f, 0.5f, 1.5f, 2.5f, -128.0f, -129.0f, 127.0f, 128.0f, 1e9f, NAN};
  std::vector<std::uint8_t> idx(x.size());
  cpu::uniform_indices(idx.data(), x.data(), x.size(), 0.0f, 1.0f);
  const std::vector<std::uint8_t> want = {128, 128, 130, 130, 0, 0, 255, 255, 255, 0};
  CHECK(idx == want);
  CHECK(!uniform_indices(backend::cpu, idx.data(), x.data(), x.size(), 0.0f, 0.0f).ok());
}

TEST_CASE("search_borders counts the borders below each value") {
  const borders255 b = midpoints(cubic_code());
  std::vector<float> x = randn(10007, 3);
  x[0] = NAN;
  x[1] = INFINITY;
  x[2] = -INFINITY;
  x[3] = b.value[100];
  for (float divisor : {1.0f, 2.5f}) {
    std::vector<std::uint8_t> idx(x.size());
    CHECK(search_borders(backend::cpu, idx.data(), x.data(), x.size(), divisor, b).ok());
    bool same = true;
    for (std::size_t i = 0; i < x.size(); ++i) same = same && idx[i] == count_below(b, x[i] / divisor);
    CHECK_MSG(same, "divisor " + std::to_string(divisor));
  }
}

TEST_CASE("blockwise: absmax per 4096, nearest code per value, zero blocks, decode") {
  const std::vector<float> code = cubic_code();
  const borders255 mids = midpoints(code);
  const std::size_t n = 2 * blockwise_block + 5;
  std::vector<float> x = randn(n, 5);
  std::fill(x.begin() + blockwise_block, x.begin() + 2 * blockwise_block, 0.0f);  // block 1: zeros
  std::vector<float> absmax(3);
  CHECK(block_absmax(backend::cpu, absmax.data(), x.data(), n).ok());
  float want0 = 0.0f;
  for (std::size_t i = 0; i < blockwise_block; ++i) want0 = std::max(want0, std::fabs(x[i]));
  CHECK(absmax[0] == want0);
  CHECK(absmax[1] == 0.0f);
  CHECK(absmax[2] > 0.0f);
  std::vector<std::uint8_t> q(n);
  const std::uint8_t zero_index = count_below(mids, 0.0f);
  CHECK(blockwise_quantize(backend::cpu, q.data(), x.data(), n, absmax.data(), mids, zero_index).ok());
  bool nearest = true;
  for (std::size_t i = 0; i < n; ++i) {
    const float a = absmax[i / blockwise_block];
    nearest = nearest && q[i] == (a > 0.0f ? count_below(mids, x[i] / a) : zero_index);
  }
  CHECK(nearest);
  std::vector<float> back(n);
  CHECK(blockwise_dequantize(backend::cpu, back.data(), q.data(), n, absmax.data(), code.data()).ok());
  double worst = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(back[i] == code[q[i]] * absmax[i / blockwise_block]);
    worst = std::max(worst, std::fabs(static_cast<double>(back[i]) - x[i]));
  }
  CHECK_MSG(worst < 0.05 * want0, "worst error " + std::to_string(worst));
}

TEST_CASE("key_histogram and bucket_sums count and add exactly") {
  const std::vector<float> x = {1.0f, 1.0f, -1.0f, 0.0f, -0.0f, 2.0f};
  std::vector<std::uint32_t> counts(65536, 0);
  CHECK(key_histogram(backend::cpu, counts.data(), x.data(), x.size()).ok());
  CHECK(counts[(0x3f800000u | 0x80000000u) >> 16] == 2);  // 1.0
  CHECK(counts[(~0xbf800000u) >> 16] == 1);               // -1.0
  CHECK(counts[0x8000u] == 1);                            // +0
  CHECK(counts[0x7fffu] == 1);                            // -0
  std::uint64_t total = 0;
  for (std::uint32_t c : counts) total += c;
  CHECK(total == x.size());
  const std::vector<std::uint8_t> idx = {3, 3, 0, 255, 255, 3};
  std::vector<double> sums(codebook_entries, 0.0);
  std::vector<std::uint64_t> per(codebook_entries, 0);
  CHECK(bucket_sums(backend::cpu, sums.data(), per.data(), x.data(), idx.data(), x.size()).ok());
  CHECK(sums[3] == 4.0);
  CHECK(per[3] == 3);
  CHECK(sums[0] == -1.0);
  CHECK(per[255] == 2);
  std::vector<float> out(idx.size());
  std::vector<float> book(codebook_entries, 0.0f);
  book[3] = 7.0f;
  CHECK(codebook_lookup(backend::cpu, out.data(), book.data(), idx.data(), idx.size()).ok());
  CHECK(out[0] == 7.0f && out[2] == 0.0f);
}

TEST_CASE("row moments, standardize and destandardize round-trip rows") {
  const std::size_t rows = 5, len = 1000;
  std::vector<float> x = randn(rows * len, 9);
  for (std::size_t i = 0; i < len; ++i) x[i] = 3.0f;  // a constant row: std = min_std
  std::vector<float> means(rows), stds(rows);
  const float min_std = 1.1920929e-07f;
  CHECK(row_moments(backend::cpu, means.data(), stds.data(), x.data(), rows, len, min_std).ok());
  CHECK(means[0] == 3.0f && stds[0] == min_std);
  for (std::size_t r = 1; r < rows; ++r) {
    double m = 0, v = 0;
    for (std::size_t i = 0; i < len; ++i) m += x[r * len + i];
    m /= len;
    for (std::size_t i = 0; i < len; ++i) v += (x[r * len + i] - m) * (x[r * len + i] - m);
    CHECK(std::fabs(means[r] - m) < 1e-6);
    CHECK(std::fabs(stds[r] - std::sqrt(v / len)) < 1e-6);
  }
  std::vector<std::uint16_t> halves(rows * len);
  std::vector<float> back(rows * len);
  CHECK(standardize_to_f16(backend::cpu, halves.data(), x.data(), rows, len, means.data(), stds.data()).ok());
  CHECK(destandardize_from_f16(backend::cpu, back.data(), halves.data(), rows, len, means.data(), stds.data()).ok());
  double mse = 0;
  for (std::size_t i = 0; i < x.size(); ++i) mse += (back[i] - x[i]) * (back[i] - x[i]);
  CHECK_MSG(mse / x.size() < 5e-7, "mse " + std::to_string(mse / x.size()));
  double ssd = 0;
  CHECK(sum_squared_deviation(backend::cpu, x.data(), len, 3.0, &ssd).ok());
  CHECK(ssd == 0.0);
}

TEST_CASE("device_context on the CPU accumulates and divides, the pool reuses buffers") {
  std::unique_ptr<device_context> ctx;
  CHECK(device_context::open(backend::cpu, 0, &ctx).ok());
  if (!ctx) return;
  const std::vector<float> acc = {1.0f, 2.0f, 3.0f}, x = {10.0f, 20.0f, 30.0f};
  std::vector<float> out(3);
  CHECK(ctx->accumulate(out.data(), acc.data(), x.data(), 0.5f, 3).ok());
  CHECK(out == std::vector<float>({6.0f, 12.0f, 18.0f}));
  CHECK(ctx->divide(out.data(), out.data(), 3.0f, 3).ok());
  CHECK(out == std::vector<float>({2.0f, 4.0f, 6.0f}));
  memory_pool& pool = ctx->pool();
  device_buffer a;
  CHECK(pool.acquire(1000, &a).ok());
  CHECK(pool.allocations() == 1);
  pool.release(std::move(a));
  CHECK(pool.cached_bytes() == 1000);
  device_buffer b;
  CHECK(pool.acquire(600, &b).ok());  // reuses the 1000-byte buffer
  CHECK(pool.allocations() == 1 && b.size_bytes() == 1000 && pool.cached_bytes() == 0);
  device_buffer c;
  CHECK(pool.acquire(400, &c).ok());  // too small a request for it: a new allocation
  CHECK(pool.allocations() == 2);
}

TEST_CASE("device_context on the CPU: a part reduction, deltas written over the inputs") {
  std::unique_ptr<device_context> ctx;
  CHECK(device_context::open(backend::cpu, 0, &ctx).ok());
  if (!ctx) return;
  std::vector<float> a = {1.0f, -2.0f, 0.5f}, b = {3.0f, 2.0f, 0.5f};
  const float* in[] = {a.data(), b.data()};
  float* deltas[] = {a.data(), b.data()};
  const float weights[] = {1.0f, 3.0f};
  std::vector<float> avg(3);
  CHECK(ctx->weighted_average(in, weights, 2, 3, 4.0f, avg.data(), deltas).ok());
  CHECK(avg == std::vector<float>({2.5f, 1.0f, 0.5f}));
  CHECK(a == std::vector<float>({1.5f, 3.0f, 0.0f}));
  CHECK(b == std::vector<float>({-0.5f, -1.0f, 0.0f}));
}

TEST_CASE("nccl communicator refuses a rank outside the group, in any build") {
  std::unique_ptr<nccl_communicator> comm;
  const status st = nccl_communicator::create(nccl_id{}, 2, 2, 0, &comm);
  CHECK(!st.ok());
  CHECK(comm == nullptr);
  CHECK_MSG(!st.message().empty(), "a reason");
}
