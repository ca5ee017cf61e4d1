#pragma once
/// The simulation's one source of randomness: xoshiro256** (Blackman and Vigna), its
/// state filled from the seed by splitmix64. Our own implementation, so a seed gives
/// the same stream on every compiler and standard library (std:: distributions do not).
#include <array>
#include <cstdint>

namespace apiary::sim {

/// A seeded pseudo-random generator; not for cryptography.
class Rng {
 public:
  /// Seeds the generator; every seed, 0 included, gives a valid, distinct stream.
  explicit Rng(std::uint64_t seed);

  /// The next 64 uniformly distributed bits.
  std::uint64_t next_u64();

  /// A uniform integer in [0, bound); 0 when `bound` is 0. Unbiased (rejection).
  std::uint64_t uniform(std::uint64_t bound);

  /// A uniform double in [0, 1), 53 bits of precision.
  double uniform01();

  /// True with probability `p` (p <= 0: never draws, false; p >= 1: never draws, true).
  bool chance(double p);

 private:
  std::array<std::uint64_t, 4> s_{};
};

}  // namespace apiary::sim
