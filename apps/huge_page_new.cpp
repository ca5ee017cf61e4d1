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
//
// heap_on_huge_pages(): the simulator's commands put all of tcmalloc's heap on huge
// pages (below).
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

#include <gperftools/malloc_extension.h>

#include "apps/commands.hpp"
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

/// tcmalloc's source of memory once heap_on_huge_pages() is called: whole 2 MiB aligned
/// regions advised for transparent huge pages. The DHT simulator's hosts hold
/// hundreds of megabytes of small blocks (routing tables, searches) and touch them at
/// random, so on 4 KiB pages most of its time goes to TLB misses. Where mmap fails, the
/// allocator tcmalloc had serves the request.
class HugePageSysAllocator : public SysAllocator {
 public:
  explicit HugePageSysAllocator(SysAllocator* fallback) : fallback_(fallback) {}

  void* Alloc(std::size_t size, std::size_t* actual_size, std::size_t alignment) override {
    constexpr std::size_t k_huge = std::size_t{2} << 20;
    const std::size_t align = std::max(alignment, k_huge);
    const std::size_t rounded = (size + k_huge - 1) / k_huge * k_huge;
    if (rounded < size || align % k_huge != 0) return fallback_->Alloc(size, actual_size, alignment);
    void* raw = mmap(nullptr, rounded + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return fallback_->Alloc(size, actual_size, alignment);
    const auto start = reinterpret_cast<std::uintptr_t>(raw);
    const std::uintptr_t aligned = (start + align - 1) / align * align;
    // The unaligned head and the tail past the region go back at once.
    if (aligned > start) munmap(raw, aligned - start);
    const std::uintptr_t end = start + rounded + align;
    if (end > aligned + rounded) munmap(reinterpret_cast<void*>(aligned + rounded), end - aligned - rounded);
    madvise(reinterpret_cast<void*>(aligned), rounded, MADV_HUGEPAGE);  // refused: 4 KiB pages
    if (actual_size != nullptr) *actual_size = rounded;
    return reinterpret_cast<void*>(aligned);
  }

 private:
  SysAllocator* fallback_;
};

}  // namespace

void apiary::apps::heap_on_huge_pages() {
  static bool done = false;  // called before any thread starts
  if (done) return;
  done = true;
  MallocExtension& tcmalloc = *MallocExtension::instance();
  // Never destroyed: tcmalloc may grow the heap until the process ends.
  tcmalloc.SetSystemAllocator(new HugePageSysAllocator(tcmalloc.GetSystemAllocator()));
}

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
