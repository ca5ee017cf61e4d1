#pragma once
/// Group keys and the Moshpit grid.
///
/// Averagers looking for a group declare themselves in the DHT under a group key
/// `<prefix>.0b<bits>`: a prefix without dots (the experiment's name), then ".0b", then
/// zero or more binary digits, the peer's cell in a grid of 2^len(bits) buckets
/// (hivemind's pattern `^(([^.])+)[.]0b[01]*$`). After each round a peer moves to a new
/// bucket chosen so that the members of one group end up in different buckets: the next
/// round mixes each of them with other groups' members (Moshpit averaging).
///
/// The bucket draw uses our own deterministic generator, the same on every groupmate:
///  1. seed: h = 0x6a09e667f3bcc908 XOR len(group_id); for each 8-byte chunk of the group
///     id (little-endian, the last chunk zero-padded): h = splitmix64(h XOR chunk), where
///     splitmix64(x) = mix(x + 0x9e3779b97f4a7c15) and mix is SplitMix64's finaliser
///     (z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27; z *= 0x94d049bb133111eb;
///     z ^= z >> 31);
///  2. state: xoshiro256** seeded with s_j = splitmix64(h + j * 0x9e3779b97f4a7c15),
///     j = 0..3;
///  3. sample: a partial Fisher-Yates shuffle of [0, num_buckets): for i = 0..group_size-1
///     swap slot i with slot i + uniform(num_buckets - i), where uniform(n) draws
///     xoshiro256** outputs x, rejects x >= 2^64 - (2^64 mod n) and returns x mod n;
///     slot i then holds the bucket of the peer at index i of the group's ordered ids.
/// (hivemind seeds Python's random.Random with the group id instead; the two do not
/// produce the same buckets, so all members of a group must run this implementation.)
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "messages/result.hpp"

namespace apiary::core::averaging {

/// Bytes in a group id as drawn by a leader (hivemind's DHTID size).
inline constexpr std::size_t k_group_id_bytes = 20;
/// Most buckets a Moshpit update draws from (a grid larger than this is a configuration
/// error: groups are tens to hundreds of peers).
inline constexpr std::size_t k_max_buckets = std::size_t{1} << 20;

/// A parsed group key.
struct GroupKey {
  /// The part before ".0b": one or more characters, none of them '.'.
  std::string prefix;
  /// The binary digits after ".0b" (possibly empty).
  std::string bits;

  /// The key string, `prefix + ".0b" + bits`.
  [[nodiscard]] std::string str() const { return prefix + ".0b" + bits; }
};

/// True if `key` is a whole group key (`^(([^.])+)[.]0b[01]*$`).
[[nodiscard]] bool is_valid_group_key(std::string_view key);

/// Checks that `bits` holds only '0' and '1' (the empty string is valid).
[[nodiscard]] Status validate_group_bits(std::string_view bits);

/// Builds `prefix.0b<bits>`; errors (invalid_argument) on an empty prefix, a prefix with
/// a '.', or bits other than '0'/'1'.
[[nodiscard]] Result<std::string> make_group_key(std::string_view prefix, std::string_view bits);

/// Splits a group key into prefix and bits; errors (invalid_argument) when it does not
/// match the pattern, saying which part is wrong.
[[nodiscard]] Result<GroupKey> parse_group_key(std::string_view key);

/// Smallest power of two >= n (1 for n <= 1).
[[nodiscard]] std::size_t next_power_of_two(std::size_t n);

/// Digits needed to write every bucket index below `num_buckets`: ceil(log2(num_buckets))
/// (0 for a single bucket).
[[nodiscard]] std::size_t bucket_bits(std::size_t num_buckets);

/// The bucket, in [0, num_buckets), of the peer at `my_index` of the group's ordered
/// peer ids, drawn as in the header comment. Groupmates get pairwise distinct buckets.
/// Errors (invalid_argument): empty group id, group_size 0, my_index >= group_size,
/// num_buckets < group_size or num_buckets > k_max_buckets.
[[nodiscard]] Result<std::size_t> draw_bucket(std::string_view group_id, std::size_t group_size,
                                              std::size_t my_index, std::size_t num_buckets);

/// A peer's group bits for the next round, after a round in a group of `group_size`
/// peers with id `group_id` (raw bytes) where it was at `my_index` of the ordered peer
/// ids. num_buckets = target_group_size if given, else next_power_of_two(group_size);
/// the peer's bucket b is written in bucket_bits(num_buckets) binary digits and
/// appended to `bits`, and the last len(bits) characters are kept. Empty bits stay empty.
/// Groupmates end in pairwise distinct bits when len(bits) >= bucket_bits(num_buckets).
///
/// (hivemind appends Python's bin(b), which is at least one digit "0" even for a single
/// bucket; here a single bucket appends nothing, so a group of one keeps its bits.)
/// Errors: those of draw_bucket, invalid bits, or target_group_size 0.
[[nodiscard]] Result<std::string> next_group_bits(std::string_view bits, std::string_view group_id,
                                                  std::size_t group_size, std::size_t my_index,
                                                  std::optional<std::size_t> target_group_size);

}  // namespace apiary::core::averaging
