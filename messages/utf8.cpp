#include "messages/utf8.hpp"

#include <algorithm>
#include <cstdint>

namespace apiary::messages {
namespace {

/// The length of the well-formed sequence at the start of `s`, or 0.
std::size_t sequence_length(std::string_view s) {
  const auto b = [&s](std::size_t i) { return static_cast<std::uint8_t>(s[i]); };
  const auto cont = [&](std::size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  const std::uint8_t lead = b(0);
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return cont(1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (lead == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (lead == 0xED && b(1) >= 0xA0) return 0;  // a surrogate
    return 3;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (lead == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (lead == 0xF4 && b(1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::string valid_utf8(std::string_view text, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = sequence_length(text.substr(i));
    const std::size_t taken = n == 0 ? 1 : n;
    if (out.size() + taken > max_bytes) break;
    if (n == 0) {
      out += '?';
    } else {
      out.append(text.substr(i, n));
    }
    i += taken;
  }
  return out;
}

}  // namespace apiary::messages
