#pragma once
/// device_buffer: bytes owned on one backend (host heap for cpu, device memory of the
/// current CUDA device for cuda), so callers can allocate for whichever backend
/// default_backend() chose and hand the pointers to kernels.hpp.
#include <cstddef>

#include "cuda/status.hpp"

namespace apiary::cuda {

/// Move-only owner of `size_bytes()` bytes on `where()`. Host memory is 64-byte aligned;
/// device memory has cudaMalloc's alignment (256 bytes).
class device_buffer {
 public:
  /// An empty buffer on the CPU (no memory).
  device_buffer() = default;
  ~device_buffer();
  device_buffer(device_buffer&& other) noexcept;
  device_buffer& operator=(device_buffer&& other) noexcept;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  /// Allocates `bytes` uninitialised bytes on `where` into `*out` (which is emptied
  /// first). Fails when memory is short or `where` is cuda and no device can be used.
  [[nodiscard]] static status allocate(backend where, std::size_t bytes, device_buffer* out);

  /// The backend whose memory this is.
  [[nodiscard]] backend where() const { return where_; }

  /// Size in bytes.
  [[nodiscard]] std::size_t size_bytes() const { return size_; }

  /// The memory (a device pointer for cuda; nullptr when empty).
  [[nodiscard]] void* data() { return data_; }
  [[nodiscard]] const void* data() const { return data_; }

  /// The memory as an array of T (T must match what the bytes hold).
  template <class T>
  [[nodiscard]] T* as() {
    return static_cast<T*>(data_);
  }
  template <class T>
  [[nodiscard]] const T* as() const {
    return static_cast<const T*>(data_);
  }

  /// Copies `bytes` from host memory `src` into this buffer at byte `offset`; returns
  /// when the copy is done. Fails when [offset, offset + bytes) is outside the buffer.
  status upload(const void* src, std::size_t bytes, std::size_t offset = 0);

  /// Copies `bytes` at byte `offset` of this buffer to host memory `dst`; returns when
  /// the copy is done. Fails when the range is outside the buffer. On cuda it is ordered
  /// after the default stream only: synchronize the stream that wrote the data first.
  status download(void* dst, std::size_t bytes, std::size_t offset = 0) const;

  /// Sets every byte to `value` (0..255); returns when done.
  status fill_bytes(int value);

 private:
  status check_range(const char* op, std::size_t bytes, std::size_t offset) const;
  void reset() noexcept;

  backend where_ = backend::cpu;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace apiary::cuda
