#pragma once
/// FNV-1a 64 over the simulation's executed events: equal runs give equal hashes, and
/// any change in timing, order or payload changes it (with overwhelming probability).
#include <cstdint>
#include <string_view>

namespace apiary::sim {

/// An incremental FNV-1a (64-bit) hash; fields are folded in a fixed byte order.
class TraceHash {
 public:
  /// Folds raw bytes.
  void add_bytes(std::string_view bytes) {
    for (unsigned char c : bytes) {
      h_ ^= c;
      h_ *= k_prime;
    }
  }

  /// Folds a 64-bit integer, little-endian.
  void add_u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h_ ^= static_cast<unsigned char>(v >> (8 * i));
      h_ *= k_prime;
    }
  }

  /// Folds a string with its length first, so ("ab","c") and ("a","bc") differ.
  void add_string(std::string_view s) {
    add_u64(s.size());
    add_bytes(s);
  }

  /// The hash so far.
  [[nodiscard]] std::uint64_t value() const { return h_; }

 private:
  static constexpr std::uint64_t k_offset = 0xcbf29ce484222325ULL;  ///< FNV-1a 64 offset basis
  static constexpr std::uint64_t k_prime = 0x100000001b3ULL;        ///< FNV-1a 64 prime
  std::uint64_t h_ = k_offset;
};

}  // namespace apiary::sim
