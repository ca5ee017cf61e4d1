// cuda_gpu_bench: memory throughput of each kernel, CUDA against its CPU twin (one
// thread), side by side in one run. GB/s counts the bytes a kernel must move (read and
// written) per element: weighted accumulate 12, fp32->fp16 6, fp16->fp32 6, sum 4.
// Usage: cuda_gpu_bench [elements (default 2^24)] [seconds per measurement (default 0.3)]
// Without a CUDA device it prints the CPU column only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cuda/buffer.hpp"
#include "cuda/device.hpp"
#include "cuda/kernels.hpp"
#include "cuda/runtime.hpp"

using namespace apiary::cuda;

namespace {

using clock_type = std::chrono::steady_clock;

// Seconds per call of `run`: one warm-up, one timed call to size the batch, then a
// batch filling about `budget_s`; `finish` waits for queued work (the GPU's stream).
double seconds_per_call(const std::function<bool()>& run, const std::function<bool()>& finish,
                        double budget_s) {
  if (!run() || !finish()) return -1.0;
  auto t0 = clock_type::now();
  if (!run() || !finish()) return -1.0;
  const double once = std::chrono::duration<double>(clock_type::now() - t0).count();
  const long reps =
      std::max(3L, std::min(100000L, static_cast<long>(budget_s / std::max(once, 1e-7))));
  t0 = clock_type::now();
  for (long r = 0; r < reps; ++r) {
    if (!run()) return -1.0;
  }
  if (!finish()) return -1.0;
  return std::chrono::duration<double>(clock_type::now() - t0).count() / static_cast<double>(reps);
}

struct kernel_case {
  const char* name;
  double bytes_per_element;
  std::function<bool(backend)> run;  // one call on the given backend's buffers
};

void print_row(const char* name, double cpu_gbs, double cuda_gbs) {
  char cuda_text[32] = "n/a", ratio_text[32] = "n/a";
  if (cuda_gbs > 0) {
    std::snprintf(cuda_text, sizeof cuda_text, "%.1f", cuda_gbs);
    std::snprintf(ratio_text, sizeof ratio_text, "%.1fx", cuda_gbs / cpu_gbs);
  }
  std::printf("%-22s %12.2f %12s %10s\n", name, cpu_gbs, cuda_text, ratio_text);
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : std::size_t{1} << 24;
  const double budget_s = argc > 2 ? std::atof(argv[2]) : 0.3;
  if (n == 0 || budget_s <= 0) {
    std::fprintf(stderr, "usage: cuda_gpu_bench [elements > 0] [seconds per measurement > 0]\n");
    return 2;
  }
  std::printf("%s", device_info().c_str());
  int devices = 0;
  (void)gpu::device_count(&devices);
  const bool have_cuda = devices > 0;

  // The same buffers on each backend, filled with the same values.
  std::vector<float> init(n);
  for (std::size_t i = 0; i < n; ++i) init[i] = static_cast<float>(i % 1000) * 0.001f - 0.5f;
  struct buffers {
    device_buffer acc, x, half, wide;
  };
  buffers on[2];
  for (backend b : {backend::cpu, backend::cuda}) {
    if (b == backend::cuda && !have_cuda) continue;
    buffers& s = on[static_cast<int>(b)];
    for (device_buffer* d : {&s.acc, &s.x, &s.wide}) {
      const status st = device_buffer::allocate(b, n * sizeof(float), d);
      if (st) (void)d->upload(init.data(), n * sizeof(float));
      if (!st) {
        std::fprintf(stderr, "allocation on %s failed: %s\n", to_string(b), st.message().c_str());
        return 1;
      }
    }
    if (!device_buffer::allocate(b, n * sizeof(std::uint16_t), &s.half)) return 1;
  }

  double result = 0.0;
  const kernel_case cases[] = {
      {"weighted_accumulate", 12.0,
       [&](backend b) {
         buffers& s = on[static_cast<int>(b)];
         return weighted_accumulate(b, s.acc.as<float>(), s.x.as<float>(), 1e-3f, n).ok();
       }},
      {"cast_f32_to_f16", 6.0,
       [&](backend b) {
         buffers& s = on[static_cast<int>(b)];
         return cast_f32_to_f16(b, s.half.as<std::uint16_t>(), s.x.as<float>(), n).ok();
       }},
      {"cast_f16_to_f32", 6.0,
       [&](backend b) {
         buffers& s = on[static_cast<int>(b)];
         return cast_f16_to_f32(b, s.wide.as<float>(), s.half.as<std::uint16_t>(), n).ok();
       }},
      {"sum", 4.0,
       [&](backend b) {
         buffers& s = on[static_cast<int>(b)];
         return sum(b, s.x.as<float>(), n, &result).ok();
       }},
  };

  std::printf("elements: %zu (%.1f MiB per float array), %.2f s per measurement\n", n,
              static_cast<double>(n) * 4.0 / (1024.0 * 1024.0), budget_s);
  std::printf("%-22s %12s %12s %10s\n", "kernel", "cpu GB/s", "cuda GB/s", "cuda/cpu");
  for (const kernel_case& k : cases) {
    const double gigabytes = k.bytes_per_element * static_cast<double>(n) / 1e9;
    const double cpu_s =
        seconds_per_call([&] { return k.run(backend::cpu); }, [] { return true; }, budget_s);
    double cuda_s = -1.0;
    if (have_cuda) {
      cuda_s = seconds_per_call([&] { return k.run(backend::cuda); },
                                [] { return gpu::synchronize().ok(); }, budget_s);
    }
    if (cpu_s <= 0) {
      std::fprintf(stderr, "%s failed on the cpu backend\n", k.name);
      return 1;
    }
    if (have_cuda && cuda_s <= 0) {
      std::fprintf(stderr, "%s failed on the cuda backend\n", k.name);
      return 1;
    }
    print_row(k.name, gigabytes / cpu_s, cuda_s > 0 ? gigabytes / cuda_s : -1.0);
  }
  return 0;
}
