// The `apiary` executable's allocation policy. Its malloc is tcmalloc (linked in,
// apps/CMakeLists.txt): a DHT operation allocates hundreds of small blocks across the
// actor and transport threads, which glibc's malloc served with a fifth of the CPU
// (fastbin consolidation, arena locks); tcmalloc's per-thread caches halve the CPU per
// get and put. It never returns freed memory to the system (release rate 0): a
// training process reuses its tensors' memory step after step, and pages handed back
// would be faulted in again on the next step (a 1 s step in ten in `bench ps`).
//
// Its operator new: a block of 2 MiB or more (a tensor, a PS
// shard's values, a replica's parameters and gradients) is aligned to 2 MiB and advised
// to be backed by transparent huge pages, as the payload pool's blocks are (both come
// from allocate_huge_page_backed, messages/buffer.hpp). A cma copy from another process then pins it a huge page at a
// time instead of one 4 KiB page after another, and passes over it miss the TLB far less.
// Smaller blocks come from malloc as before. Every block is released with free(), so the
// library's operator delete and this file's mix freely. THP here is in `madvise` mode:
// only advised memory gets huge pages, and where the kernel has none the advice is
// ignored. This is the executable's policy only: a program embedding the libraries keeps
// its own allocator.
#include <cstdlib>
#include <new>

#include <gperftools/malloc_extension.h>

#include "messages/buffer.hpp"

namespace {

/// tcmalloc keeps what is freed: set before main(), before any large block is freed.
const bool g_release_rate_set = [] {
  MallocExtension::instance()->SetMemoryReleaseRate(0);
  return true;
}();

void* allocate(std::size_t n) {
  for (;;) {
    if (void* p = apiary::allocate_huge_page_backed(n)) return p;
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
