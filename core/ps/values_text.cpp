#include "core/ps/values_text.hpp"

#include <cstring>

#include <fmt/format.h>

namespace apiary::core::ps {

std::uint64_t values_digest(const std::vector<float>& values) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (float v : values) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    for (int i = 0; i < 4; ++i) {
      h ^= (bits >> (8 * i)) & 0xFFU;
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

std::string values_text(const std::vector<float>& values) {
  std::string out;
  const bool whole = values.size() <= k_values_printed_whole;
  if (!whole) out = fmt::format(" [{} values, fnv1a64 {:#018x}]", values.size(), values_digest(values));
  const std::size_t shown = whole ? values.size() : k_values_printed_first;
  for (std::size_t i = 0; i < shown; ++i) out += fmt::format(" {:.9g}", values[i]);
  if (!whole) out += " ...";
  return out;
}

}  // namespace apiary::core::ps
