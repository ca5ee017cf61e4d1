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

/// `size` bytes from malloc's heap; from 2 MiB on, aligned to 2 MiB and advised to be
/// backed by transparent huge pages (buffer.cpp says why). nullptr when memory is out.
/// Release with std::free. The buffer pool's blocks come from here, and so does the
/// `apiary` executable's operator new (apps/huge_page_new.cpp).
void* allocate_huge_page_backed(std::size_t size) noexcept;

class Buffer {
 public:
  Buffer() = default;

  /// Uninitialised storage of `size` bytes, to be filled by the owner before sharing.
  /// Blocks of k_pooled_min_bytes or more come from a process-wide pool of released
  /// blocks, so a stream of large payloads reuses memory whose pages are already
  /// mapped instead of faulting in fresh pages for every payload. Blocks of 2 MiB or
  /// more are aligned to 2 MiB and advised to use transparent huge pages, and blocks from
  /// 256 KiB up are carved out of such a block (buffer.cpp).
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

  /// A view of `size` bytes at `bytes`, kept alive by `owner` (e.g. a tensor's storage):
  /// no copy. The bytes must not change while the view is in use.
  static Buffer view_of(std::shared_ptr<const void> owner, const void* bytes, std::size_t size) {
    Buffer b;
    if (size == 0) return b;
    b.size_ = size;
    b.data_ = std::shared_ptr<std::byte[]>(std::move(owner),
                                           const_cast<std::byte*>(static_cast<const std::byte*>(bytes)));
    return b;
  }

  /// A writable view of `size` bytes at `bytes`, kept alive by `owner`: a Landing's zone,
  /// where a transport writes a received body. The owner must not touch the bytes while
  /// the zone is posted.
  static Buffer zone_of(std::shared_ptr<void> owner, void* bytes, std::size_t size) {
    return view_of(std::move(owner), bytes, size);
  }

  /// Bytes [offset, offset + size) of this buffer, sharing its storage (no copy).
  [[nodiscard]] Buffer slice(std::size_t offset, std::size_t size) const {
    Buffer b;
    if (size == 0) return b;
    b.size_ = size;
    b.data_ = std::shared_ptr<std::byte[]>(data_, data_.get() + offset);
    b.huge_backed_ = huge_backed_;
    return b;
  }

  /// Whether the bytes lie in a pooled block backed by transparent huge pages (blocks of
  /// 256 KiB or more, and slices of them), which a cma copy pins in a few steps; views of
  /// other memory (a caller's tensor) are pinned one 4 KiB page at a time. Advisory: the
  /// kernel may still have given 4 KiB pages.
  [[nodiscard]] bool huge_backed() const { return huge_backed_; }

  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  const char* chars() const { return reinterpret_cast<const char*>(data_.get()); }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {chars(), size_}; }

 private:
  std::shared_ptr<std::byte[]> data_;
  std::size_t size_ = 0;
  bool huge_backed_ = false;
};

/// A message in three pieces, `head` + `body` + `tail`, sent without joining them: the
/// body may be a view of bytes that lie elsewhere (Buffer::view_of), so a large message
/// leaves without a copy. The transport carries head and tail in the frame's envelope and
/// the body as its payload; the receiver sees the one joined message. A plain Buffer is a
/// message with an empty head and tail.
struct Payload {
  std::string head;
  Buffer body;
  std::string tail;

  Payload() = default;
  Payload(Buffer whole) : body(std::move(whole)) {}  // NOLINT: implicit by design
  Payload(std::string h, Buffer b, std::string t) : head(std::move(h)), body(std::move(b)), tail(std::move(t)) {}

  /// Bytes of the whole message.
  [[nodiscard]] std::size_t size() const { return head.size() + body.size() + tail.size(); }
  [[nodiscard]] bool spliced() const { return !head.empty() || !tail.empty(); }
  /// The whole message in one string (a copy).
  [[nodiscard]] std::string joined() const {
    std::string out;
    out.reserve(size());
    out.append(head).append(body.view()).append(tail);
    return out;
  }
};

/// Memory posted by a receiver for the body of one expected spliced message: a message
/// whose head and tail are exactly `head` and `tail` and whose body is `zone.size()` bytes
/// has its body written straight into `zone` (e.g. a view of a tensor, so the bytes land
/// where they are used), and is delivered as head + tail, marked landed. Any other message
/// arrives as usual. The zone must stay writable by the receiving transport until the
/// message arrives or the landing is dropped.
struct Landing {
  Buffer zone;
  std::string head;
  std::string tail;
  /// Any head matches (`head` is then unused; the tail and the body's size still must):
  /// for an answer whose head carries what the receiver cannot know in advance, such as a
  /// PS pull's version. The receiver checks the delivered head itself.
  bool any_head = false;
};

}  // namespace apiary
