#pragma once
/// A 64-bit hash over the simulation's executed events (every field and payload word
/// through a multiply and shift): equal runs give equal hashes, and any change in timing,
/// order or payload changes it (with overwhelming probability).
#include <cstdint>
#include <cstring>
#include <string_view>

namespace apiary::sim {

/// An incremental 64-bit hash; fields are folded in a fixed order.
class TraceHash {
 public:
  /// Folds raw bytes: 32-byte blocks through four independent lanes (so the multiplies
  /// overlap; payloads of a hundred kilobytes are common and a byte at a time was most
  /// of a run's time), folded back in order, then whole words, then the tail as one
  /// word holding its length.
  void add_bytes(std::string_view bytes) {
    const char* p = bytes.data();
    std::size_t n = bytes.size();
    if (n >= 32) {
      std::uint64_t lanes[4] = {h_, h_ ^ k_lane_seed, h_ ^ (k_lane_seed << 1), h_ ^ (k_lane_seed << 2)};
      for (; n >= 32; p += 32, n -= 32) {
        for (std::size_t l = 0; l < 4; ++l) lanes[l] = mix(lanes[l], load(p + 8 * l));
      }
      h_ = lanes[0];
      for (std::size_t l = 1; l < 4; ++l) h_ = mix(h_, lanes[l]);
    }
    for (; n >= 8; p += 8, n -= 8) h_ = mix(h_, load(p));
    std::uint64_t tail = static_cast<std::uint64_t>(n) << 56;
    if (n != 0) std::memcpy(&tail, p, n);  // n < 8: the top byte keeps the length
    h_ = mix(h_, tail);
  }

  /// Folds a 64-bit integer.
  void add_u64(std::uint64_t v) { h_ = mix(h_, v); }

  /// Folds a string with its length first, so ("ab","c") and ("a","bc") differ.
  void add_string(std::string_view s) {
    add_u64(s.size());
    add_bytes(s);
  }

  /// The hash so far.
  [[nodiscard]] std::uint64_t value() const { return h_; }

 private:
  static std::uint64_t load(const char* p) {
    std::uint64_t word = 0;
    std::memcpy(&word, p, 8);  // the hosts are little-endian (x86-64, arm64)
    return word;
  }
  static std::uint64_t mix(std::uint64_t h, std::uint64_t word) {
    h = (h ^ word) * k_word_prime;
    return h ^ (h >> 29);
  }

  static constexpr std::uint64_t k_offset = 0xcbf29ce484222325ULL;     ///< the start (FNV-1a 64's basis)
  static constexpr std::uint64_t k_word_prime = 0x9e3779b97f4a7c15ULL;  ///< odd: 2^64 / golden ratio
  static constexpr std::uint64_t k_lane_seed = 0x243f6a8885a308d3ULL;   ///< pi's fraction: lanes differ
  std::uint64_t h_ = k_offset;
};

}  // namespace apiary::sim
