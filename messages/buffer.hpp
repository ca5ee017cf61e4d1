#pragma once
/// Buffer: a shared, immutable-after-fill byte buffer for frame payloads.
/// Allocation does not zero the bytes (a 256 MiB payload must not pay a memset), and
/// copies share the storage, so a payload moves from UCX to an actor without a copy.
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

namespace apiary {

/// Smallest allocation served from the buffer pool, in bytes.
inline constexpr std::size_t k_pooled_min_bytes = std::size_t{64} << 10;
/// Most bytes the pool keeps in released blocks; beyond it, blocks are freed.
inline constexpr std::size_t k_pool_capacity_bytes = std::size_t{512} << 20;

class Buffer {
 public:
  Buffer() = default;

  /// Uninitialised storage of `size` bytes, to be filled by the owner before sharing.
  /// Blocks of k_pooled_min_bytes or more come from a process-wide pool of released
  /// blocks, so a stream of large payloads reuses memory whose pages are already
  /// mapped instead of faulting in fresh pages for every payload.
  static Buffer allocate(std::size_t size);
  /// A copy of `bytes`.
  static Buffer copy_of(const void* bytes, std::size_t size) {
    Buffer b = allocate(size);
    if (size > 0) std::memcpy(b.data(), bytes, size);
    return b;
  }
  static Buffer copy_of(std::string_view s) { return copy_of(s.data(), s.size()); }
  /// Takes `bytes` over without copying: the string's storage becomes the buffer's.
  static Buffer adopt(std::string&& bytes) {
    if (bytes.empty()) return Buffer{};
    auto owner = std::make_shared<std::string>(std::move(bytes));
    Buffer b;
    b.size_ = owner->size();
    b.data_ = std::shared_ptr<std::byte[]>(owner, reinterpret_cast<std::byte*>(owner->data()));
    return b;
  }

  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  const char* chars() const { return reinterpret_cast<const char*>(data_.get()); }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {chars(), size_}; }

 private:
  std::shared_ptr<std::byte[]> data_;
  std::size_t size_ = 0;
};

}  // namespace apiary
