#include "core/averaging/group_key.hpp"

#include "core/rng.hpp"

#include <array>
#include <map>

namespace apiary::core::averaging {
namespace {

constexpr std::uint64_t k_golden_gamma = 0x9e3779b97f4a7c15ULL;
constexpr std::uint64_t k_seed_init = 0x6a09e667f3bcc908ULL;
constexpr std::string_view k_separator = ".0b";

/// SplitMix64's output function applied to x + gamma.
std::uint64_t splitmix64(std::uint64_t x) { return splitmix64_next(x); }

/// xoshiro256** seeded from the bytes of a group id (steps 1-2 of the header comment).
class GroupRng {
 public:
  explicit GroupRng(std::string_view seed_bytes) {
    std::uint64_t h = k_seed_init ^ static_cast<std::uint64_t>(seed_bytes.size());
    for (std::size_t at = 0; at < seed_bytes.size(); at += 8) {
      std::uint64_t chunk = 0;
      for (std::size_t i = 0; i < 8 && at + i < seed_bytes.size(); ++i) {
        chunk |= static_cast<std::uint64_t>(static_cast<unsigned char>(seed_bytes[at + i]))
                 << (8 * i);
      }
      h = splitmix64(h ^ chunk);
    }
    std::array<std::uint64_t, 4> s{};
    for (std::size_t j = 0; j < 4; ++j) s[j] = splitmix64(h + j * k_golden_gamma);
    rng_ = Rng::from_state(s);
  }

  /// The next 64 bits of xoshiro256**.
  std::uint64_t next() { return rng_.next_u64(); }

  /// Uniform in [0, n), n >= 1, without modulo bias.
  std::uint64_t uniform(std::uint64_t n) {
    const std::uint64_t reject_from = ~std::uint64_t{0} - (~std::uint64_t{0} % n + 1) % n;
    // Accept x <= reject_from: 2^64 - (2^64 mod n) values, a multiple of n.
    for (;;) {
      const std::uint64_t x = next();
      if (x <= reject_from) return x % n;
    }
  }

 private:
  Rng rng_{0};  ///< replaced by the state above in the constructor
};

}  // namespace

Status validate_group_bits(std::string_view bits) {
  for (std::size_t i = 0; i < bits.size(); ++i) {
    if (bits[i] != '0' && bits[i] != '1') {
      return make_error(errc::invalid_argument,
                        "group bits must be binary digits '0'/'1', got '{}' at position {} of "
                        "\"{}\"",
                        bits[i], i, bits);
    }
  }
  return ok_status();
}

Result<GroupKey> parse_group_key(std::string_view key) {
  const std::size_t dot = key.find('.');
  if (dot == std::string_view::npos || dot == 0) {
    return make_error(errc::invalid_argument,
                      "group key \"{}\" must be <prefix>.0b<bits> with a non-empty prefix "
                      "without dots (e.g. \"my_run.0b0110\")",
                      key);
  }
  if (key.substr(dot, k_separator.size()) != k_separator) {
    return make_error(errc::invalid_argument,
                      "group key \"{}\": expected \".0b\" after the prefix \"{}\", got \"{}\"",
                      key, key.substr(0, dot), key.substr(dot));
  }
  const std::string_view bits = key.substr(dot + k_separator.size());
  if (auto st = validate_group_bits(bits); !st) {
    return make_error(errc::invalid_argument, "group key \"{}\": {}", key, st.error().message);
  }
  return GroupKey{std::string(key.substr(0, dot)), std::string(bits)};
}

bool is_valid_group_key(std::string_view key) { return parse_group_key(key).ok(); }

Result<std::string> make_group_key(std::string_view prefix, std::string_view bits) {
  if (prefix.empty() || prefix.find('.') != std::string_view::npos) {
    return make_error(errc::invalid_argument,
                      "group key prefix must be non-empty and contain no '.', got \"{}\"",
                      prefix);
  }
  if (auto st = validate_group_bits(bits); !st) return st.error();
  return GroupKey{std::string(prefix), std::string(bits)}.str();
}

std::size_t next_power_of_two(std::size_t n) {
  std::size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

std::size_t bucket_bits(std::size_t num_buckets) {
  std::size_t bits = 0;
  while ((std::size_t{1} << bits) < num_buckets) ++bits;
  return bits;
}

Result<std::size_t> draw_bucket(std::string_view group_id, std::size_t group_size,
                                std::size_t my_index, std::size_t num_buckets) {
  if (group_id.empty()) {
    return make_error(errc::invalid_argument,
                      "moshpit: expected a non-empty group id ({} bytes from the leader), got "
                      "an empty one",
                      k_group_id_bytes);
  }
  if (group_size == 0 || my_index >= group_size) {
    return make_error(errc::invalid_argument,
                      "moshpit: expected 0 <= my_index < group_size, got index {} in a group "
                      "of {}",
                      my_index, group_size);
  }
  if (num_buckets < group_size || num_buckets > k_max_buckets) {
    return make_error(errc::invalid_argument,
                      "moshpit: expected group_size ({}) <= num_buckets <= {}, got {} buckets; "
                      "set target_group_size to at least the group's size",
                      group_size, k_max_buckets, num_buckets);
  }
  // Partial Fisher-Yates over [0, num_buckets); `moved` holds the slots that differ from
  // their index, so only group_size slots are ever materialised.
  GroupRng rng(group_id);
  std::map<std::size_t, std::size_t> moved;
  auto slot = [&](std::size_t i) {
    auto it = moved.find(i);
    return it == moved.end() ? i : it->second;
  };
  std::size_t mine = 0;
  for (std::size_t i = 0; i <= my_index; ++i) {
    const std::size_t j = i + static_cast<std::size_t>(rng.uniform(num_buckets - i));
    const std::size_t at_i = slot(i);
    const std::size_t at_j = slot(j);
    moved[i] = at_j;
    moved[j] = at_i;
    mine = at_j;
  }
  return mine;
}

Result<std::string> next_group_bits(std::string_view bits, std::string_view group_id,
                                    std::size_t group_size, std::size_t my_index,
                                    std::optional<std::size_t> target_group_size) {
  if (auto st = validate_group_bits(bits); !st) return st.error();
  if (target_group_size && *target_group_size == 0) {
    return make_error(errc::invalid_argument,
                      "moshpit: target_group_size must be >= 1 when set, got 0; leave it unset "
                      "to use the group's size rounded up to a power of two");
  }
  const std::size_t num_buckets =
      target_group_size ? *target_group_size : next_power_of_two(group_size);
  // Draw even for empty bits, so bad inputs are reported the same way in every case.
  auto bucket = draw_bucket(group_id, group_size, my_index, num_buckets);
  if (!bucket) return bucket.error();
  if (bits.empty()) return std::string();

  const std::size_t width = bucket_bits(num_buckets);
  std::string appended(width, '0');
  for (std::size_t i = 0; i < width; ++i) {
    if ((*bucket >> (width - 1 - i)) & 1U) appended[i] = '1';
  }
  std::string joined = std::string(bits) + appended;
  return joined.substr(joined.size() - bits.size());
}

}  // namespace apiary::core::averaging
