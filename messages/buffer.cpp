#include "messages/buffer.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <new>
#include <mutex>
#include <vector>

namespace apiary {
namespace {

/// A huge page, the 2 MiB the kernel's transparent huge pages come in.
constexpr std::size_t k_huge = std::size_t{2} << 20;

/// Released large blocks by capacity class (see round_up), reused by later allocations.
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
    if (block == nullptr) block = carved(capacity) ? carve(capacity) : fresh(capacity);
    return std::shared_ptr<std::byte[]>(block, [this, capacity](std::byte* p) { give_back(p, capacity); });
  }

  /// Whether a block for `size` bytes lies in huge-page memory (see fresh and carve).
  static bool huge_backed(std::size_t size) { return round_up(size) >= k_carved_min; }

 private:
  static std::byte* fresh(std::size_t capacity) {
    void* p = allocate_huge_page_backed(capacity);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<std::byte*>(p);
  }

  /// Blocks from k_carved_min up to a huge page are carved out of one huge-page block
  /// (fresh), so they too are pinned cheaply; the other pieces go to the free list. Such
  /// pieces stay in the pool for good (one cannot free part of a block): the pool then
  /// holds at most the peak of what was in use at once.
  static constexpr std::size_t k_carved_min = std::size_t{256} << 10;
  static bool carved(std::size_t capacity) { return capacity >= k_carved_min && capacity < k_huge; }
  std::byte* carve(std::size_t capacity) {
    std::byte* whole = fresh(k_huge);
    std::lock_guard<std::mutex> lock(mu_);
    auto& free_list = free_[capacity];
    for (std::size_t at = capacity; at < k_huge; at += capacity) free_list.push_back(whole + at);
    cached_bytes_ += k_huge - capacity;
    return whole;
  }

  /// A block's capacity class: a power of two below a huge page, a multiple of a huge
  /// page from there (a 32 MiB payload and its framing takes 34 MiB, not 64), so that
  /// payloads of one size reuse one class without doubling what the pool holds.
  static std::size_t round_up(std::size_t n) {
    if (n > k_huge) return (n + k_huge - 1) / k_huge * k_huge;
    std::size_t c = k_pooled_min_bytes;
    while (c < n) c <<= 1;
    return c;
  }

  void give_back(std::byte* p, std::size_t capacity) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (carved(capacity) || cached_bytes_ + capacity <= k_pool_capacity_bytes) {
        free_[capacity].push_back(p);
        cached_bytes_ += capacity;
        return;
      }
    }
    std::free(p);
  }

  std::mutex mu_;
  std::map<std::size_t, std::vector<std::byte*>> free_;
  std::size_t cached_bytes_ = 0;
};

}  // namespace

void* allocate_huge_page_backed(std::size_t size) noexcept {
  // Blocks of a huge page or more are aligned to it and asked to be backed by
  // transparent huge pages: a cma copy pins such a block in a few page-table steps
  // instead of one per 4 KiB page, and passes over it miss the TLB far less. The block's
  // whole size is then resident once touched. Where the kernel gives no huge pages
  // (THP off, fragmented memory), the advice is ignored and 4 KiB pages serve as before.
  if (size < k_huge) return std::malloc(size == 0 ? 1 : size);
  void* p = nullptr;
  if (posix_memalign(&p, k_huge, size) != 0) return nullptr;
  (void)madvise(p, size, MADV_HUGEPAGE);
  return p;
}

Buffer Buffer::allocate(std::size_t size) {
  Buffer b;
  if (size >= k_pooled_min_bytes) {
    b.data_ = BufferPool::instance().take(size);
    b.huge_backed_ = BufferPool::huge_backed(size);
  } else if (size > 0) {
    b.data_ = std::shared_ptr<std::byte[]>(new std::byte[size]);
  }
  b.size_ = size;
  return b;
}

}  // namespace apiary
