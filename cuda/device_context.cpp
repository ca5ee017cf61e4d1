// memory_pool and device_context: the per-device state of a device actor.
#include "cuda/device_context.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cuda/kernels.hpp"
#include "cuda/runtime.hpp"

namespace apiary::cuda {

memory_pool::memory_pool(backend where, std::size_t cap_bytes) : where_(where), cap_(cap_bytes) {}

status memory_pool::acquire(std::size_t bytes, device_buffer* out) {
  // The smallest released buffer that holds `bytes` and wastes at most half of itself.
  auto it = free_.lower_bound(bytes);
  if (it != free_.end() && it->first / 2 <= bytes) {
    cached_ -= it->first;
    *out = std::move(it->second);
    free_.erase(it);
    return ok_status();
  }
  ++allocations_;
  return device_buffer::allocate(where_, bytes, out);
}

void memory_pool::release(device_buffer b) {
  const std::size_t bytes = b.size_bytes();
  if (bytes == 0 || b.where() != where_) return;
  // Over the cap: drop the largest cached buffers first, or this one if it is larger.
  while (cached_ + bytes > cap_ && !free_.empty() && std::prev(free_.end())->first >= bytes) {
    cached_ -= std::prev(free_.end())->first;
    free_.erase(std::prev(free_.end()));
  }
  if (cached_ + bytes > cap_) return;  // b frees its memory here
  cached_ += bytes;
  free_.emplace(bytes, std::move(b));
}

device_context::device_context(backend where, int device, stream_handle stream)
    : where_(where), device_(device), stream_(stream), pool_(where) {}

device_context::~device_context() {
  if (stream_ != nullptr) gpu::destroy_stream(stream_);
}

status device_context::open(backend where, int device, std::unique_ptr<device_context>* out) {
  stream_handle stream = nullptr;
  if (where == backend::cuda) {
    if (status st = gpu::set_device(device); !st) return st;
    if (status st = gpu::create_stream(&stream); !st) return st;
  }
  out->reset(new device_context(where, where == backend::cuda ? device : 0, stream));
  return ok_status();
}

status device_context::accumulate(float* out, const float* acc, const float* x, float weight,
                                  std::size_t n) {
  if (n == 0) return ok_status();
  if (where_ == backend::cpu) {
    if (out != acc) std::memmove(out, acc, n * sizeof(float));
    return cuda::weighted_accumulate(backend::cpu, out, x, weight, n);
  }
  // Upload both operands, accumulate on the stream, wait for it, download.
  if (status st = gpu::set_device(device_); !st) return st;  // the caller's thread may vary
  const std::size_t bytes = n * sizeof(float);
  device_buffer d_acc, d_x;
  if (status st = pool_.acquire(bytes, &d_acc); !st) return st;
  if (status st = pool_.acquire(bytes, &d_x); !st) return st;
  status st = d_acc.upload(acc, bytes);
  if (st) st = d_x.upload(x, bytes);
  if (st) st = cuda::weighted_accumulate(where_, d_acc.as<float>(), d_x.as<float>(), weight, n, stream_);
  if (st) st = gpu::synchronize(stream_);
  if (st) st = d_acc.download(out, bytes);
  pool_.release(std::move(d_acc));
  pool_.release(std::move(d_x));
  return st;
}

status device_context::divide(float* out, const float* sum, float divisor, std::size_t n) {
  if (n == 0) return ok_status();
  if (where_ == backend::cpu) return cuda::divide(backend::cpu, out, sum, divisor, n);
  if (status st = gpu::set_device(device_); !st) return st;
  const std::size_t bytes = n * sizeof(float);
  device_buffer d_sum;
  if (status st = pool_.acquire(bytes, &d_sum); !st) return st;
  status st = d_sum.upload(sum, bytes);
  if (st) st = cuda::divide(where_, d_sum.as<float>(), d_sum.as<float>(), divisor, n, stream_);
  if (st) st = gpu::synchronize(stream_);
  if (st) st = d_sum.download(out, bytes);
  pool_.release(std::move(d_sum));
  return st;
}

status device_context::weighted_average(const float* const* inputs, const float* weights,
                                        std::size_t count, std::size_t n, float divisor, float* average,
                                        float* const* deltas) {
  if (n == 0) return ok_status();
  if (where_ == backend::cpu) {
    std::fill(average, average + n, 0.0f);
    for (std::size_t i = 0; i < count; ++i) {
      if (status st = cuda::weighted_accumulate(backend::cpu, average, inputs[i], weights[i], n); !st) return st;
    }
    if (status st = cuda::divide(backend::cpu, average, average, divisor, n); !st) return st;
    std::vector<float> scratch(n);
    for (std::size_t i = 0; i < count; ++i) {
      // average + (-1) * x: the negation is exact, so this is average - x.
      std::copy(average, average + n, scratch.begin());
      if (status st = cuda::weighted_accumulate(backend::cpu, scratch.data(), inputs[i], -1.0f, n); !st) return st;
      std::copy(scratch.begin(), scratch.end(), deltas[i]);
    }
    return ok_status();
  }
  if (status st = gpu::set_device(device_); !st) return st;
  const std::size_t bytes = n * sizeof(float);
  std::vector<device_buffer> d_inputs(count);
  device_buffer d_average;
  status st = pool_.acquire(bytes, &d_average);
  if (st) st = d_average.fill_bytes(0);
  for (std::size_t i = 0; st && i < count; ++i) {
    st = pool_.acquire(bytes, &d_inputs[i]);
    if (st) st = d_inputs[i].upload(inputs[i], bytes);
  }
  for (std::size_t i = 0; st && i < count; ++i) {
    st = cuda::weighted_accumulate(where_, d_average.as<float>(), d_inputs[i].as<float>(), weights[i], n, stream_);
  }
  if (st) st = cuda::divide(where_, d_average.as<float>(), d_average.as<float>(), divisor, n, stream_);
  if (st) st = gpu::synchronize(stream_);
  if (st) st = d_average.download(average, bytes);
  // Each delta as on the host: a fresh copy of the average, + (-1) * x (an exact negation).
  for (std::size_t i = 0; st && i < count; ++i) {
    st = d_average.upload(average, bytes);
    if (st) st = cuda::weighted_accumulate(where_, d_average.as<float>(), d_inputs[i].as<float>(), -1.0f, n, stream_);
    if (st) st = gpu::synchronize(stream_);
    if (st) st = d_average.download(deltas[i], bytes);
  }
  pool_.release(std::move(d_average));
  for (auto& b : d_inputs) {
    if (b.size_bytes() > 0) pool_.release(std::move(b));
  }
  return st;
}

namespace {

// Copies n floats from src to dst after the kernels queued on `stream`: a memmove on the
// cpu backend; on cuda, `copy` (gpu::copy_to_host or gpu::copy_to_device) on `device`.
status copy_after_kernels(backend where, int device, stream_handle stream, float* dst,
                          const float* src, std::size_t n,
                          status (*copy)(void*, const void*, std::size_t)) {
  if (n == 0) return ok_status();
  if (where == backend::cpu) {
    std::memmove(dst, src, n * sizeof(float));
    return ok_status();
  }
  if (status st = gpu::set_device(device); !st) return st;
  if (status st = gpu::synchronize(stream); !st) return st;
  return copy(dst, src, n * sizeof(float));
}

}  // namespace

status device_context::read(float* host, const float* src, std::size_t n) {
  return copy_after_kernels(where_, device_, stream_, host, src, n, gpu::copy_to_host);
}

status device_context::write(float* dst, const float* x, std::size_t n) {
  return copy_after_kernels(where_, device_, stream_, dst, x, n, gpu::copy_to_device);
}

status device_context::add_scaled(float* dst, const float* x, float alpha, std::size_t n) {
  if (n == 0) return ok_status();
  if (where_ == backend::cpu) return cuda::weighted_accumulate(backend::cpu, dst, x, alpha, n);
  if (status st = gpu::set_device(device_); !st) return st;
  const std::size_t bytes = n * sizeof(float);
  device_buffer d_x;
  status st = pool_.acquire(bytes, &d_x);
  if (st) st = d_x.upload(x, bytes);
  if (st) st = cuda::weighted_accumulate(where_, dst, d_x.as<float>(), alpha, n, stream_);
  if (st) st = gpu::synchronize(stream_);
  if (d_x.size_bytes() > 0) pool_.release(std::move(d_x));
  return st;
}

}  // namespace apiary::cuda
