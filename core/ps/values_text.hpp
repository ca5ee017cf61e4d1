#pragma once
/// A variable's values as a job prints them on its `final NAME ...` line: every value
/// (%.9g, enough to read the same float back) while there are at most
/// `k_values_printed_whole`; beyond that, how many, a digest of their bits (equal
/// digests: equal bits, so runs still compare bit for bit) and the first few. A 100 MiB
/// model printed whole was 300 MB of text a replica.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace apiary::core::ps {

inline constexpr std::size_t k_values_printed_whole = 4096;
inline constexpr std::size_t k_values_printed_first = 8;

/// FNV-1a (64 bits) over the values' float bits, in order (little-endian bytes).
[[nodiscard]] std::uint64_t values_digest(const std::vector<float>& values);

/// " v0 v1 ..." (each with a leading space), or for more than k_values_printed_whole:
/// " [N values, fnv1a64 0x...] v0 ... v7 ...".
[[nodiscard]] std::string values_text(const std::vector<float>& values);

}  // namespace apiary::core::ps
