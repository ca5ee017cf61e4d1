#pragma once
/// A 64-bit hash over the simulation's executed events (FNV-1a for the fields, payload
/// bytes folded a 64-bit word at a time): equal runs give equal hashes, and any change in
/// timing, order or payload changes it (with overwhelming probability).
#include <cstdint>
#include <cstring>
#include <string_view>

namespace apiary::sim {

/// An incremental FNV-1a (64-bit) hash; fields are folded in a fixed byte order.
class TraceHash {
 public:
  /// Folds raw bytes: whole little-endian words through a multiply and shift (payloads
  /// of a hundred kilobytes are common; a byte at a time was most of a run's time), the
  /// tail byte by byte.
  void add_bytes(std::string_view bytes) {
    std::size_t i = 0;
    for (; i + 8 <= bytes.size(); i += 8) {
      std::uint64_t word = 0;
      std::memcpy(&word, bytes.data() + i, 8);  // the hosts are little-endian (x86-64, arm64)
      h_ = (h_ ^ word) * k_word_prime;
      h_ ^= h_ >> 29;
    }
    for (; i < bytes.size(); ++i) {
      h_ ^= static_cast<unsigned char>(bytes[i]);
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
  static constexpr std::uint64_t k_word_prime = 0x9e3779b97f4a7c15ULL;  ///< odd: 2^64 / golden ratio
  std::uint64_t h_ = k_offset;
};

}  // namespace apiary::sim
