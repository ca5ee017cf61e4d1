// messages/buffer.hpp: pooled blocks (reused, huge ones aligned to 2 MiB, those from
// 256 KiB carved out of huge-page blocks), views kept
// alive by their owner, slices, and Payload's pieces.
#include "messages/buffer.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

using apiary::Buffer;
using apiary::Payload;

TEST_CASE("large buffers come from the pool: a released block serves the next allocation") {
  const std::byte* first = nullptr;
  {
    Buffer b = Buffer::allocate(std::size_t{300} << 10);
    first = b.data();
  }
  Buffer again = Buffer::allocate(std::size_t{300} << 10);
  CHECK(again.data() == first);  // same capacity class, the released block
  CHECK(again.size() == (std::size_t{300} << 10));
}

TEST_CASE("blocks of 2 MiB or more are aligned to 2 MiB (for transparent huge pages)") {
  // 1 MiB and a part's framing rounds up to a 2 MiB block too.
  for (std::size_t size : {(std::size_t{1} << 20) + 100, std::size_t{2} << 20, std::size_t{5} << 20}) {
    INFO("size " << size);
    Buffer b = Buffer::allocate(size);
    REQUIRE(b.size() == size);
    CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % (std::size_t{2} << 20) == 0);
    std::memset(b.data(), 0x5a, size);  // every byte is usable
    CHECK(b.data()[size - 1] == std::byte{0x5a});
  }
}

TEST_CASE("blocks from 256 KiB to 2 MiB are carved out of one huge-page block, only pooled blocks say huge_backed") {
  constexpr std::size_t huge = std::size_t{2} << 20;
  for (std::size_t capacity : {std::size_t{256} << 10, std::size_t{512} << 10, std::size_t{1} << 20}) {
    INFO("capacity " << capacity);
    // Every piece of one carved block, held at once: distinct, inside one 2 MiB-aligned block.
    std::vector<Buffer> pieces;
    std::set<std::uintptr_t> bases;
    for (std::size_t i = 0; i < huge / capacity; ++i) {
      pieces.push_back(Buffer::allocate(capacity - 8));
      CHECK(pieces.back().huge_backed());
      const auto at = reinterpret_cast<std::uintptr_t>(pieces.back().data());
      CHECK(at % capacity == 0);
      bases.insert(at - at % huge);
      std::memset(pieces.back().data(), 0x33, capacity - 8);
    }
    CHECK(bases.size() <= 2);  // pieces left in the pool by an earlier test may come from another block
    std::set<const std::byte*> distinct;
    for (const auto& b : pieces) distinct.insert(b.data());
    CHECK(distinct.size() == pieces.size());
    CHECK(pieces.front().slice(16, 32).huge_backed());  // a slice keeps the flag
  }
  // Small blocks, heap strings and views of other memory are not in huge pages.
  CHECK_FALSE(Buffer::allocate(std::size_t{100} << 10).huge_backed());
  CHECK_FALSE(Buffer::adopt(std::string(std::size_t{1} << 20, 'x')).huge_backed());
  auto tensor = std::make_shared<std::vector<float>>(std::size_t{1} << 20);
  CHECK_FALSE(Buffer::view_of(tensor, tensor->data(), std::size_t{4} << 20).huge_backed());
  CHECK(Buffer::allocate(std::size_t{3} << 20).huge_backed());
}

TEST_CASE("blocks above 2 MiB come in classes of whole huge pages, not powers of two") {
  const std::byte* first = nullptr;
  {
    Buffer b = Buffer::allocate((std::size_t{32} << 20) + 100);  // a 32 MiB part and its framing: 34 MiB
    first = b.data();
  }
  {
    Buffer same = Buffer::allocate((std::size_t{33} << 20) + 7);  // the same 34 MiB class
    CHECK(same.data() == first);
  }
  Buffer other = Buffer::allocate((std::size_t{34} << 20) + 1);  // 36 MiB: a class of its own
  CHECK(other.data() != first);
  CHECK(reinterpret_cast<std::uintptr_t>(other.data()) % (std::size_t{2} << 20) == 0);
}

TEST_CASE("a view keeps its owner alive and copies nothing, a slice shares its buffer") {
  std::weak_ptr<std::vector<float>> watch;
  Buffer view;
  {
    auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f});
    watch = owner;
    view = Buffer::view_of(owner, owner->data() + 1, 2 * sizeof(float));
    CHECK(reinterpret_cast<const float*>(view.data()) == owner->data() + 1);
  }
  REQUIRE_FALSE(watch.expired());  // the view holds it
  float second = 0.0f;
  std::memcpy(&second, view.data(), sizeof second);
  CHECK(second == 2.0f);
  Buffer slice = view.slice(sizeof(float), sizeof(float));
  view = Buffer{};
  CHECK_FALSE(watch.expired());  // the slice holds it now
  float third = 0.0f;
  std::memcpy(&third, slice.data(), sizeof third);
  CHECK(third == 3.0f);
  slice = Buffer{};
  CHECK(watch.expired());
  CHECK(Buffer::view_of(nullptr, nullptr, 0).empty());
}

TEST_CASE("a payload is head + body + tail, a plain buffer is a whole message") {
  Payload spliced{"<", Buffer::copy_of(std::string_view("body")), ">"};
  CHECK(spliced.spliced());
  CHECK(spliced.size() == 6);
  CHECK(spliced.joined() == "<body>");
  Payload whole = Buffer::copy_of(std::string_view("all"));
  CHECK_FALSE(whole.spliced());
  CHECK(whole.joined() == "all");
}
