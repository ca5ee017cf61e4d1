#include "messages/buffer.hpp"

#include <map>
#include <mutex>
#include <vector>

namespace apiary {
namespace {

/// Released large blocks by capacity (a power of two), reused by later allocations.
class BufferPool {
 public:
  static BufferPool& instance() {
    static BufferPool* pool = new BufferPool();  // never destroyed: deleters may run at exit
    return *pool;
  }

  std::shared_ptr<std::byte[]> take(std::size_t size) {
    const std::size_t capacity = round_up(size);
    std::byte* block = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto& free_list = free_[capacity];
      if (!free_list.empty()) {
        block = free_list.back();
        free_list.pop_back();
        cached_bytes_ -= capacity;
      }
    }
    if (block == nullptr) block = new std::byte[capacity];
    return std::shared_ptr<std::byte[]>(block, [this, capacity](std::byte* p) { give_back(p, capacity); });
  }

 private:
  static std::size_t round_up(std::size_t n) {
    std::size_t c = k_pooled_min_bytes;
    while (c < n) c <<= 1;
    return c;
  }

  void give_back(std::byte* p, std::size_t capacity) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_bytes_ + capacity <= k_pool_capacity_bytes) {
        free_[capacity].push_back(p);
        cached_bytes_ += capacity;
        return;
      }
    }
    delete[] p;
  }

  std::mutex mu_;
  std::map<std::size_t, std::vector<std::byte*>> free_;
  std::size_t cached_bytes_ = 0;
};

}  // namespace

Buffer Buffer::allocate(std::size_t size) {
  Buffer b;
  if (size >= k_pooled_min_bytes) {
    b.data_ = BufferPool::instance().take(size);
  } else if (size > 0) {
    b.data_ = std::shared_ptr<std::byte[]>(new std::byte[size]);
  }
  b.size_ = size;
  return b;
}

}  // namespace apiary
