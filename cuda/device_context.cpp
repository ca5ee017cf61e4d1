// memory_pool and device_context: the per-device state of a device actor.
#include "cuda/device_context.hpp"

#include <cstring>
#include <string>
#include <utility>

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

}  // namespace apiary::cuda
