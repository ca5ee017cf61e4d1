#pragma once
/// The one source of pseudo-randomness of core/ and sim/: xoshiro256** (Blackman and
/// Vigna), its state filled from a seed by splitmix64. Our own implementation, so a seed
/// gives the same stream on every compiler and standard library (std:: distributions do
/// not). Not for cryptography.
#include <array>
#include <cstdint>

namespace apiary::core {

/// splitmix64: advances `state` by the golden gamma and returns its mix. Also the
/// stateless mix of a value x: `splitmix64_next(x)` with a copy of x.
std::uint64_t splitmix64_next(std::uint64_t& state);

/// A splitmix64 stream from a seed: the generator of streams specified as splitmix64
/// (RandomAxisPartitionAR's axes, the logistic-regression workload's data).
class SplitMix64 {
 public:
  /// The stream of `seed`.
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  /// The next 64 bits.
  std::uint64_t next() { return splitmix64_next(state_); }

 private:
  std::uint64_t state_;
};

/// A seeded pseudo-random generator.
class Rng {
 public:
  /// Seeds the generator; every seed, 0 included, gives a valid, distinct stream.
  explicit Rng(std::uint64_t seed);

  /// A generator with exactly this xoshiro256** state (not all zero), for streams whose
  /// seeding is specified elsewhere (core/averaging/group_key.hpp).
  static Rng from_state(const std::array<std::uint64_t, 4>& state);

  /// The next 64 uniformly distributed bits.
  std::uint64_t next_u64();

  /// A uniform integer in [0, bound); 0 when `bound` is 0. Unbiased (rejection).
  std::uint64_t uniform(std::uint64_t bound);

  /// A uniform double in [0, 1), 53 bits of precision.
  double uniform01();

  /// True with probability `p` (p <= 0: never draws, false; p >= 1: never draws, true).
  bool chance(double p);

 private:
  Rng() = default;
  std::array<std::uint64_t, 4> s_{};
};

}  // namespace apiary::core
