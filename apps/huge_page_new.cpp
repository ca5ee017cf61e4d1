// The `apiary` executable's operator new: a block of 2 MiB or more (a tensor, a PS
// shard's values, a replica's parameters and gradients) is aligned to 2 MiB and advised
// to be backed by transparent huge pages, as the payload pool's blocks are
// (messages/buffer.cpp). A cma copy from another process then pins it a huge page at a
// time instead of one 4 KiB page after another, and passes over it miss the TLB far less.
// Smaller blocks come from malloc as before. Every block is released with free(), so the
// library's operator delete and this file's mix freely. THP here is in `madvise` mode:
// only advised memory gets huge pages, and where the kernel has none the advice is
// ignored. This is the executable's policy only: a program embedding the libraries keeps
// its own allocator.
#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace {

constexpr std::size_t k_huge = std::size_t{2} << 20;

void* allocate(std::size_t n) {
  if (n == 0) n = 1;
  for (;;) {
    void* p = nullptr;
    if (n >= k_huge) {
      if (posix_memalign(&p, k_huge, n) != 0) p = nullptr;
      if (p != nullptr) (void)madvise(p, n, MADV_HUGEPAGE);
    } else {
      p = std::malloc(n);
    }
    if (p != nullptr) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

}  // namespace

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
