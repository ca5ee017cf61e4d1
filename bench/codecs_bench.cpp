#include "bench/codecs_bench.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "messages/tensor/codec.hpp"

namespace apiary::bench {
namespace {

using clock_type = std::chrono::steady_clock;

// Seconds of this thread's CPU time.
double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// Which clock best_seconds reads (set once per run from the options).
bool use_cpu_clock = false;

// Best time of `repeat` runs of `fn`, in seconds (wall, or thread CPU time).
template <class Fn>
double best_seconds(std::size_t repeat, Fn&& fn) {
  double best = 1e30;
  for (std::size_t r = 0; r < std::max<std::size_t>(repeat, 1); ++r) {
    const auto start = clock_type::now();
    const double cpu_start = thread_cpu_seconds();
    fn();
    const std::chrono::duration<double> took = clock_type::now() - start;
    best = std::min(best, use_cpu_clock ? thread_cpu_seconds() - cpu_start : took.count());
  }
  return best;
}

struct Row {
  std::string name;
  double encode_gbs = 0;        // into a reused message (steady state of a sender)
  double encode_new_gbs = 0;    // into a new message (allocation and page faults included)
  double decode_gbs = 0;
  std::size_t message_bytes = 0;
  double mse = 0;
};

double mse(const float* a, const float* b, std::size_t n) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    sum += d * d;
  }
  return sum / static_cast<double>(n);
}

}  // namespace

int run_codecs_bench(const CodecsBenchOptions& options) {
  const std::size_t n = options.mib * (std::size_t{1} << 20) / sizeof(float);
  use_cpu_clock = options.thread_cpu_clock;
  const std::size_t bytes = n * sizeof(float);
  if (n == 0) {
    std::fprintf(stderr, "apiary bench codecs: --mib must be at least 1\n");
    return 1;
  }
  // Input: randn float32 from a fixed seed.
  std::vector<float> values(n);
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : values) v = normal(rng);
  auto tensor = messages::Tensor::copy_of(messages::dtype::float32, {static_cast<std::uint32_t>(n)},
                                          values.data(), bytes);
  if (!tensor) {
    std::fprintf(stderr, "apiary bench codecs: %s\n", tensor.error().what().c_str());
    return 1;
  }
  // The reference: memcpy of the same bytes into a buffer whose pages are mapped already.
  std::vector<char> target(bytes, 1);
  const double memcpy_s = best_seconds(options.repeat, [&] {
    std::memcpy(target.data(), values.data(), bytes);
    asm volatile("" : : "r"(target.data()) : "memory");
  });
  const double memcpy_gbs = static_cast<double>(bytes) / memcpy_s / 1e9;
  std::printf("apiary bench codecs: %zu MiB randn float32 (%zu elements), one core, best of %zu, %s\n",
              options.mib, n, options.repeat, use_cpu_clock ? "thread CPU time" : "wall time");
  std::printf("memcpy (same bytes, same run): %.2f GB/s\n\n", memcpy_gbs);
  std::printf("encode: into a reused message (its buffer already mapped, like memcpy's target);\n"
              "encode new: into a new message (allocation and page faults included)\n\n");
  std::printf("%-15s %12s %12s %10s %12s %14s %10s\n", "codec", "encode GB/s", "decode GB/s", "enc/memcpy",
              "encode new", "message bytes", "MSE");
  std::vector<Row> rows;
  for (int c = pb::CompressionType_MIN; c <= pb::CompressionType_MAX; ++c) {
    const auto codec = static_cast<pb::CompressionType>(c);
    Row row{messages::compression_name(codec)};
    Result<pb::Tensor> message = make_error(errc::internal, "not run");
    const double enc_new_s = best_seconds(options.repeat, [&] { message = messages::encode(*tensor, codec); });
    if (!message) {
      std::fprintf(stderr, "apiary bench codecs: %s: %s\n", row.name.c_str(), message.error().what().c_str());
      return 1;
    }
    Status reused = ok_status();
    const double enc_s = best_seconds(options.repeat, [&] { reused = messages::encode_into(*tensor, codec, *message); });
    if (!reused) {
      std::fprintf(stderr, "apiary bench codecs: %s: %s\n", row.name.c_str(), reused.error().what().c_str());
      return 1;
    }
    Result<messages::Tensor> back = make_error(errc::internal, "not run");
    const double dec_s = best_seconds(options.repeat, [&] { back = messages::decode(*message); });
    if (!back) {
      std::fprintf(stderr, "apiary bench codecs: %s: %s\n", row.name.c_str(), back.error().what().c_str());
      return 1;
    }
    row.encode_gbs = static_cast<double>(bytes) / enc_s / 1e9;
    row.encode_new_gbs = static_cast<double>(bytes) / enc_new_s / 1e9;
    row.decode_gbs = static_cast<double>(bytes) / dec_s / 1e9;
    row.message_bytes = message->ByteSizeLong();
    row.mse = mse(values.data(), back->data<float>(), n);
    std::printf("%-15s %12.2f %12.2f %9.0f%% %12.2f %14zu %10.3g\n", row.name.c_str(), row.encode_gbs,
                row.decode_gbs, 100.0 * row.encode_gbs / memcpy_gbs, row.encode_new_gbs, row.message_bytes,
                row.mse);
    rows.push_back(row);
  }
  auto find = [&](const char* name) {
    return *std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.name == name; });
  };
  const auto goal = [](bool met) { return met ? "met" : "MISSED"; };
  std::printf("\ngoals:\n");
  for (const char* name : {"FLOAT16", "BLOCKWISE_8BIT"}) {
    const double share = find(name).encode_gbs / memcpy_gbs;
    std::printf("  %-15s encode >= 50%% of memcpy: %3.0f%%  %s\n", name, 100.0 * share, goal(share >= 0.5));
  }
  const double ratio = find("UNIFORM_8BIT").encode_gbs / find("QUANTILE_8BIT").encode_gbs;
  std::printf("  QUANTILE_8BIT encode within 4x of UNIFORM_8BIT: %.2fx  %s\n", ratio, goal(ratio <= 4.0));
  return 0;
}

}  // namespace apiary::bench
