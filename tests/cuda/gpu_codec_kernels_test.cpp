// GPU tests (label gpu, part of cuda_gpu_kernels_test, which skips without a device):
// each CUDA codec kernel against its CPU twin on randn data of sizes 1, 4097 and 2^20
// plus special values; bit-exact except row_moments and bucket_sums (summation order),
// and the device_context / CUDA device actor path.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda/buffer.hpp"
#include "cuda/codec_kernels.hpp"
#include "cuda/device_context.hpp"
#include "cuda/kernels.hpp"
#include "cuda/runtime.hpp"
#include "tests/cuda/check.hpp"

using namespace apiary::cuda;
using apiary::cuda::testing::first_bit_mismatch;

namespace {

const std::size_t kCodecSizes[] = {1, 4097, std::size_t{1} << 20};

template <class T>
device_buffer upload(const std::vector<T>& host) {
  device_buffer b;
  const status st = device_buffer::allocate(backend::cuda, std::max<std::size_t>(host.size(), 1) * sizeof(T), &b);
  CHECK_MSG(st.ok(), st.message());
  if (st.ok() && !host.empty()) CHECK(b.upload(host.data(), host.size() * sizeof(T)).ok());
  return b;
}

template <class T>
std::vector<T> download(const device_buffer& b, std::size_t n) {
  CHECK(gpu::synchronize(nullptr).ok());
  std::vector<T> host(n);
  if (n > 0) CHECK(b.download(host.data(), n * sizeof(T)).ok());
  return host;
}

std::vector<float> data(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  const float specials[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-40f, 65520.0f};
  for (std::size_t k = 0; k < 7 && 3 * k + 2 < n; ++k) v[3 * k + 2] = specials[k];
  return v;
}

borders255 sorted_borders(unsigned seed) {
  std::vector<float> v = data(255, seed);
  for (float& x : v) x = std::isfinite(x) ? x : 0.5f;
  std::sort(v.begin(), v.end());
  borders255 b{};
  std::copy(v.begin(), v.end(), b.value);
  return b;
}

std::string at(std::size_t n) { return "n = " + std::to_string(n); }

}  // namespace

TEST_CASE("codec kernels: uniform, search, histogram, lookup match the CPU twins") {
  for (std::size_t n : kCodecSizes) {
    const std::vector<float> x = data(n, 21);
    const device_buffer dx = upload(x);
    std::vector<std::uint8_t> want(n);
    device_buffer didx = upload(std::vector<std::uint8_t>(n));
    cpu::uniform_indices(want.data(), x.data(), n, 0.1f, 6.0f / 256.0f);
    CHECK(gpu::uniform_indices(didx.as<std::uint8_t>(), dx.as<float>(), n, 0.1f, 6.0f / 256.0f).ok());
    CHECK_MSG(first_bit_mismatch(download<std::uint8_t>(didx, n), want) == n, "uniform " + at(n));
    const borders255 b = sorted_borders(5);
    cpu::search_borders(want.data(), x.data(), n, 1.5f, b);
    CHECK(gpu::search_borders(didx.as<std::uint8_t>(), dx.as<float>(), n, 1.5f, b).ok());
    CHECK_MSG(first_bit_mismatch(download<std::uint8_t>(didx, n), want) == n, "search " + at(n));
    std::vector<std::uint32_t> hist(65536, 0);
    cpu::key_histogram(hist.data(), x.data(), n);
    device_buffer dhist = upload(std::vector<std::uint32_t>(65536, 0));
    CHECK(gpu::key_histogram(dhist.as<std::uint32_t>(), dx.as<float>(), n).ok());
    CHECK_MSG(download<std::uint32_t>(dhist, 65536) == hist, "histogram " + at(n));
    std::vector<float> book = data(codebook_entries, 8);
    std::vector<float> out(n);
    cpu::codebook_lookup(out.data(), book.data(), want.data(), n);
    const device_buffer dbook = upload(book);
    device_buffer dout = upload(std::vector<float>(n));
    CHECK(gpu::codebook_lookup(dout.as<float>(), dbook.as<float>(), didx.as<std::uint8_t>(), n).ok());
    CHECK_MSG(first_bit_mismatch(download<float>(dout, n), out) == n, "lookup " + at(n));
    // Bucket sums: counts exact, sums up to the order of additions.
    std::vector<double> sums(codebook_entries, 0.0);
    std::vector<std::uint64_t> counts(codebook_entries, 0);
    std::vector<float> finite(x);
    for (float& v : finite) v = std::isfinite(v) ? v : 0.0f;
    cpu::bucket_sums(sums.data(), counts.data(), finite.data(), want.data(), n);
    device_buffer dsums = upload(std::vector<double>(codebook_entries, 0.0));
    device_buffer dcounts = upload(std::vector<std::uint64_t>(codebook_entries, 0));
    const device_buffer dfinite = upload(finite);
    CHECK(gpu::bucket_sums(dsums.as<double>(), dcounts.as<std::uint64_t>(), dfinite.as<float>(),
                           didx.as<std::uint8_t>(), n).ok());
    CHECK_MSG(download<std::uint64_t>(dcounts, codebook_entries) == counts, "bucket counts " + at(n));
    const std::vector<double> got = download<double>(dsums, codebook_entries);
    bool close = true;
    for (std::size_t k = 0; k < codebook_entries; ++k) close = close && std::fabs(got[k] - sums[k]) <= 1e-9 * (1.0 + std::fabs(sums[k]));
    CHECK_MSG(close, "bucket sums " + at(n));
  }
}

TEST_CASE("codec kernels: blockwise absmax, quantize, dequantize match the CPU twins") {
  for (std::size_t n : kCodecSizes) {
    const std::vector<float> x = data(n, 31);
    const std::size_t blocks = (n + blockwise_block - 1) / blockwise_block;
    std::vector<float> absmax(blocks);
    cpu::block_absmax(absmax.data(), x.data(), n);
    const device_buffer dx = upload(x);
    device_buffer dabs = upload(std::vector<float>(blocks));
    CHECK(gpu::block_absmax(dabs.as<float>(), dx.as<float>(), n).ok());
    CHECK_MSG(first_bit_mismatch(download<float>(dabs, blocks), absmax) == blocks, "absmax " + at(n));
    // Finite data for the quantizer, so blocks have a positive absmax.
    std::vector<float> finite(x);
    for (float& v : finite) v = std::isfinite(v) ? v : 0.25f;
    cpu::block_absmax(absmax.data(), finite.data(), n);
    const device_buffer dfinite = upload(finite);
    const device_buffer dabs2 = upload(absmax);
    const borders255 mids = sorted_borders(7);
    std::vector<std::uint8_t> q(n);
    cpu::blockwise_quantize(q.data(), finite.data(), n, absmax.data(), mids, 127);
    device_buffer dq = upload(std::vector<std::uint8_t>(n));
    CHECK(gpu::blockwise_quantize(dq.as<std::uint8_t>(), dfinite.as<float>(), n, dabs2.as<float>(), mids, 127).ok());
    CHECK_MSG(first_bit_mismatch(download<std::uint8_t>(dq, n), q) == n, "quantize " + at(n));
    const std::vector<float> code = data(codebook_entries, 3);
    std::vector<float> out(n);
    cpu::blockwise_dequantize(out.data(), q.data(), n, absmax.data(), code.data());
    const device_buffer dcode = upload(code);
    device_buffer dout = upload(std::vector<float>(n));
    CHECK(gpu::blockwise_dequantize(dout.as<float>(), dq.as<std::uint8_t>(), n, dabs2.as<float>(), dcode.as<float>()).ok());
    CHECK_MSG(first_bit_mismatch(download<float>(dout, n), out) == n, "dequantize " + at(n));
  }
}

TEST_CASE("codec kernels: row moments close, standardize and destandardize bit-exact") {
  const std::size_t shapes[][2] = {{1, 1}, {3, 4097}, {1024, 1024}};
  for (const auto& shape : shapes) {
    const std::size_t rows = shape[0], len = shape[1], n = rows * len;
    std::vector<float> x = data(n, 41);
    for (float& v : x) v = std::isfinite(v) ? v : 1.0f;
    std::vector<float> means(rows), stds(rows);
    cpu::row_moments(means.data(), stds.data(), x.data(), rows, len, 1.1920929e-07f);
    const device_buffer dx = upload(x);
    device_buffer dmeans = upload(std::vector<float>(rows)), dstds = upload(std::vector<float>(rows));
    CHECK(gpu::row_moments(dmeans.as<float>(), dstds.as<float>(), dx.as<float>(), rows, len, 1.1920929e-07f).ok());
    const std::vector<float> gm = download<float>(dmeans, rows), gs = download<float>(dstds, rows);
    bool close = true;
    for (std::size_t r = 0; r < rows; ++r) {
      close = close && std::fabs(gm[r] - means[r]) <= 1e-6f * (1.0f + std::fabs(means[r])) &&
              std::fabs(gs[r] - stds[r]) <= 1e-6f * stds[r];
    }
    CHECK_MSG(close, "row moments " + at(n));
    // The same statistics on both sides from here on: bit-exact.
    const device_buffer dm = upload(means), ds = upload(stds);
    std::vector<std::uint16_t> halves(n);
    cpu::standardize_to_f16(halves.data(), x.data(), rows, len, means.data(), stds.data());
    device_buffer dh = upload(std::vector<std::uint16_t>(n));
    CHECK(gpu::standardize_to_f16(dh.as<std::uint16_t>(), dx.as<float>(), rows, len, dm.as<float>(), ds.as<float>()).ok());
    CHECK_MSG(first_bit_mismatch(download<std::uint16_t>(dh, n), halves) == n, "standardize " + at(n));
    std::vector<float> back(n);
    cpu::destandardize_from_f16(back.data(), halves.data(), rows, len, means.data(), stds.data());
    device_buffer dback = upload(std::vector<float>(n));
    CHECK(gpu::destandardize_from_f16(dback.as<float>(), dh.as<std::uint16_t>(), rows, len, dm.as<float>(), ds.as<float>()).ok());
    CHECK_MSG(first_bit_mismatch(download<float>(dback, n), back) == n, "destandardize " + at(n));
    double cpu_ssd = cpu::sum_squared_deviation(x.data(), n, 0.5), gpu_ssd = 0;
    CHECK(gpu::sum_squared_deviation(dx.as<float>(), n, 0.5, &gpu_ssd).ok());
    CHECK_MSG(std::fabs(cpu_ssd - gpu_ssd) <= 1e-12 * (1.0 + cpu_ssd), "ssd " + at(n));
  }
}

TEST_CASE("device_context on a GPU: stream, pool, accumulate and divide as the CPU") {
  std::unique_ptr<device_context> ctx;
  const status opened = device_context::open(backend::cuda, 0, &ctx);
  CHECK_MSG(opened.ok(), opened.message());
  if (!ctx) return;
  CHECK(ctx->stream() != nullptr);
  const std::size_t n = std::size_t{1} << 20;
  const std::vector<float> acc = data(n, 1), x = data(n, 2);
  std::vector<float> want(n), got(n);
  std::vector<float> w(acc);
  cpu::weighted_accumulate(w.data(), x.data(), 0.25f, n);
  CHECK(ctx->accumulate(got.data(), acc.data(), x.data(), 0.25f, n).ok());
  CHECK(first_bit_mismatch(got, w) == n);
  const std::size_t allocations = ctx->pool().allocations();
  CHECK(ctx->accumulate(got.data(), acc.data(), x.data(), 0.25f, n).ok());
  CHECK(ctx->pool().allocations() == allocations);  // the second run reuses the pool
  cpu::divide(want.data(), acc.data(), 3.0f, n);
  CHECK(ctx->divide(got.data(), acc.data(), 3.0f, n).ok());
  CHECK(first_bit_mismatch(got, want) == n);
}

TEST_CASE("device_context on a GPU: a part reduction (weighted average and deltas) as the CPU") {
  std::unique_ptr<device_context> gpu_ctx, cpu_ctx;
  const status opened = device_context::open(backend::cuda, 0, &gpu_ctx);
  CHECK_MSG(opened.ok(), opened.message());
  CHECK(device_context::open(backend::cpu, 0, &cpu_ctx).ok());
  if (!gpu_ctx || !cpu_ctx) return;
  for (std::size_t n : {std::size_t{1}, std::size_t{4097}, std::size_t{1} << 20}) {
    const std::vector<std::vector<float>> inputs{data(n, 3), data(n, 4), data(n, 5)};
    const float weights[] = {0.5f, 2.0f, 1.25f};
    const float* in[] = {inputs[0].data(), inputs[1].data(), inputs[2].data()};
    std::vector<std::vector<float>> want(3, std::vector<float>(n)), got(3, std::vector<float>(n));
    std::vector<float> want_avg(n), got_avg(n);
    float* want_d[] = {want[0].data(), want[1].data(), want[2].data()};
    float* got_d[] = {got[0].data(), got[1].data(), got[2].data()};
    CHECK(cpu_ctx->weighted_average(in, weights, 3, n, 3.75f, want_avg.data(), want_d).ok());
    CHECK(gpu_ctx->weighted_average(in, weights, 3, n, 3.75f, got_avg.data(), got_d).ok());
    CHECK_MSG(first_bit_mismatch(got_avg, want_avg) == n, "average n=" + std::to_string(n));
    for (std::size_t i = 0; i < 3; ++i) {
      CHECK_MSG(first_bit_mismatch(got[i], want[i]) == n, "delta " + std::to_string(i) + " n=" + std::to_string(n));
    }
  }
}

