#pragma once
/// device_context: what a device actor owns for one device: the backend, the CUDA device
/// ordinal, one stream, and a memory pool of reusable buffers, plus element-wise
/// operations on host arrays that run there (upload, kernel on the stream, download).
/// Plain C++ (no CUDA header), so the actors in actors/device/ can use it in any build;
/// on backend::cpu the same calls run the CPU twins on host memory, which is how the CUDA
/// actor's code path is tested on machines without a GPU.
#include <cstddef>
#include <map>
#include <memory>

#include "cuda/buffer.hpp"
#include "cuda/status.hpp"

namespace apiary::cuda {

/// Reusable buffers of one backend: released buffers are kept (up to a byte cap) and
/// handed out again for requests of at most their size and at least half of it, so
/// repeated operations on same-sized tensors allocate once. Not thread-safe (one actor).
class memory_pool {
 public:
  /// A pool of `where`'s memory keeping at most `cap_bytes` of released buffers.
  explicit memory_pool(backend where, std::size_t cap_bytes = std::size_t{1} << 30);

  /// A buffer of at least `bytes` bytes (uninitialised) into `*out`, reused when one fits.
  status acquire(std::size_t bytes, device_buffer* out);
  /// Takes `b` back for reuse (freed instead when the cap would be exceeded).
  void release(device_buffer b);

  /// Bytes held by released buffers now.
  [[nodiscard]] std::size_t cached_bytes() const { return cached_; }
  /// Allocations made so far (not counting reuses).
  [[nodiscard]] std::size_t allocations() const { return allocations_; }

 private:
  backend where_;
  std::size_t cap_;
  std::size_t cached_ = 0;
  std::size_t allocations_ = 0;
  std::multimap<std::size_t, device_buffer> free_;  // by size in bytes
};

/// One device's stream and memory pool, and the element-wise operations of the device
/// actors on host float32 arrays. Not thread-safe: one owner (an actor) at a time.
class device_context {
 public:
  /// Opens `device` (a CUDA ordinal; ignored for cpu) on `where` into `*out`: makes it
  /// current, creates its stream. Fails when cuda is asked for and cannot be used.
  static status open(backend where, int device, std::unique_ptr<device_context>* out);
  ~device_context();
  device_context(const device_context&) = delete;
  device_context& operator=(const device_context&) = delete;

  /// The backend the operations run on.
  [[nodiscard]] backend where() const { return where_; }
  /// The CUDA device ordinal (0 on cpu).
  [[nodiscard]] int device() const { return device_; }
  /// The context's stream (nullptr on cpu).
  [[nodiscard]] stream_handle stream() const { return stream_; }
  /// The context's memory pool.
  [[nodiscard]] memory_pool& pool() { return pool_; }

  /// out[i] = acc[i] + weight * x[i] for n floats (host arrays; out may equal acc).
  status accumulate(float* out, const float* acc, const float* x, float weight, std::size_t n);
  /// out[i] = sum[i] / divisor for n floats (host arrays; out may equal sum).
  status divide(float* out, const float* sum, float divisor, std::size_t n);
  /// A weighted average and each input's distance to it, for `count` host arrays of n
  /// floats: average = (0 + w_0 * x_0 + ... + w_{count-1} * x_{count-1}) / divisor, each
  /// step rounded as in kernels.hpp, then deltas[i] = average - inputs[i] (deltas[i] may
  /// equal inputs[i]). On cuda the inputs go up once and the results come down once.
  status weighted_average(const float* const* inputs, const float* weights, std::size_t count,
                          std::size_t n, float divisor, float* average, float* const* deltas);
  /// Copies n floats of this backend's memory at `src` (a device pointer on cuda, host
  /// memory on cpu) to the host array `host`.
  status read(float* host, const float* src, std::size_t n);
  /// dst[i] = dst[i] + alpha * x[i] for n floats, `dst` in this backend's memory (a
  /// device pointer on cuda, host memory on cpu) and `x` a host array.
  status add_scaled(float* dst, const float* x, float alpha, std::size_t n);
  /// dst[i] = x[i] for n floats, `dst` in this backend's memory and `x` a host array
  /// (the same bits: results that must agree across peers are written, not added).
  status write(float* dst, const float* x, std::size_t n);

 private:
  device_context(backend where, int device, stream_handle stream);

  backend where_;
  int device_;
  stream_handle stream_;
  memory_pool pool_;
};

}  // namespace apiary::cuda
