// device_buffer: host memory through aligned operator new, device memory through
// runtime.hpp (so this file needs no CUDA headers).
#include "cuda/buffer.hpp"

#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "cuda/runtime.hpp"

namespace apiary::cuda {
namespace {

constexpr std::align_val_t host_alignment{64};  // bytes: one cache line, any SIMD width

}  // namespace

device_buffer::~device_buffer() { reset(); }

device_buffer::device_buffer(device_buffer&& other) noexcept
    : where_(other.where_),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

device_buffer& device_buffer::operator=(device_buffer&& other) noexcept {
  if (this != &other) {
    reset();
    where_ = other.where_;
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void device_buffer::reset() noexcept {
  if (data_ != nullptr) {
    if (where_ == backend::cuda) {
      gpu::release(data_);
    } else {
      ::operator delete(data_, host_alignment);
    }
  }
  data_ = nullptr;
  size_ = 0;
}

status device_buffer::allocate(backend where, std::size_t bytes, device_buffer* out) {
  out->reset();
  out->where_ = where;
  if (bytes == 0) return ok_status();
  if (where == backend::cuda) {
    status st = gpu::allocate(&out->data_, bytes);
    if (!st) return st;
  } else {
    out->data_ = ::operator new(bytes, host_alignment, std::nothrow);
    if (out->data_ == nullptr) {
      return status::failure("host allocation of " + std::to_string(bytes) +
                             " bytes failed; expected that much free memory, allocate less");
    }
  }
  out->size_ = bytes;
  return ok_status();
}

status device_buffer::check_range(const char* op, std::size_t bytes, std::size_t offset) const {
  if (offset <= size_ && bytes <= size_ - offset) return ok_status();
  return status::failure(std::string("device_buffer::") + op + ": range [" +
                         std::to_string(offset) + ", " + std::to_string(offset) + " + " +
                         std::to_string(bytes) + ") is outside the buffer of " +
                         std::to_string(size_) + " bytes; expected offset + bytes <= size");
}

status device_buffer::upload(const void* src, std::size_t bytes, std::size_t offset) {
  status st = check_range("upload", bytes, offset);
  if (!st || bytes == 0) return st;
  char* dst = static_cast<char*>(data_) + offset;
  if (where_ == backend::cuda) return gpu::copy_to_device(dst, src, bytes);
  std::memcpy(dst, src, bytes);
  return ok_status();
}

status device_buffer::download(void* dst, std::size_t bytes, std::size_t offset) const {
  status st = check_range("download", bytes, offset);
  if (!st || bytes == 0) return st;
  const char* src = static_cast<const char*>(data_) + offset;
  if (where_ == backend::cuda) return gpu::copy_to_host(dst, src, bytes);
  std::memcpy(dst, src, bytes);
  return ok_status();
}

status device_buffer::fill_bytes(int value) {
  if (size_ == 0) return ok_status();
  if (where_ == backend::cuda) return gpu::fill_bytes(data_, value, size_);
  std::memset(data_, value, size_);
  return ok_status();
}

}  // namespace apiary::cuda
