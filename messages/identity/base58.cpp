#include "messages/identity/base58.hpp"

#include <array>
#include <cstdint>
#include <vector>

namespace apiary::messages {
namespace {

constexpr int invalid_digit = -1;

/// Maps an input byte to its base58 digit value, or invalid_digit.
constexpr std::array<int, 256> make_digit_table() {
  std::array<int, 256> table{};
  for (auto& entry : table) entry = invalid_digit;
  for (std::size_t i = 0; i < base58_alphabet.size(); ++i)
    table[static_cast<unsigned char>(base58_alphabet[i])] = static_cast<int>(i);
  return table;
}
constexpr std::array<int, 256> digit_table = make_digit_table();

/// A character as it can be shown inside an error message ('x' or \xNN).
std::string printable(char c) {
  auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return fmt::format("'{}'", c);
  return fmt::format("byte 0x{:02x}", u);
}

/// At most the first 80 characters of `text`, for error messages.
std::string_view excerpt(std::string_view text) { return text.substr(0, 80); }

}  // namespace

std::string base58_encode(std::string_view bytes) {
  std::size_t zeros = 0;
  while (zeros < bytes.size() && bytes[zeros] == '\0') ++zeros;

  // Base-58 digits of the remaining big-endian number, least significant first.
  // log(256)/log(58) < 1.37, so 137/100 digits per byte (plus one) always suffice.
  std::vector<std::uint8_t> digits;
  digits.reserve((bytes.size() - zeros) * 137 / 100 + 1);
  for (std::size_t i = zeros; i < bytes.size(); ++i) {
    // digits = digits * 256 + byte
    std::uint32_t carry = static_cast<unsigned char>(bytes[i]);
    for (auto& d : digits) {
      carry += static_cast<std::uint32_t>(d) << 8;
      d = static_cast<std::uint8_t>(carry % 58);
      carry /= 58;
    }
    while (carry > 0) {
      digits.push_back(static_cast<std::uint8_t>(carry % 58));
      carry /= 58;
    }
  }

  std::string text(zeros, base58_alphabet[0]);
  text.reserve(zeros + digits.size());
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) text.push_back(base58_alphabet[*it]);
  return text;
}

Result<std::string> base58_decode(std::string_view text) {
  std::size_t ones = 0;
  while (ones < text.size() && text[ones] == base58_alphabet[0]) ++ones;

  // Base-256 bytes of the remaining number, least significant first.
  // log(58)/log(256) < 0.733, so 733/1000 bytes per digit (plus one) always suffice.
  std::vector<std::uint8_t> bytes;
  bytes.reserve((text.size() - ones) * 733 / 1000 + 1);
  for (std::size_t i = ones; i < text.size(); ++i) {
    int digit = digit_table[static_cast<unsigned char>(text[i])];
    if (digit == invalid_digit) {
      return make_error(errc::malformed,
                        "base58: expected only characters of the bitcoin alphabet (1-9, A-Z, a-z "
                        "without 0, O, I, l), got {} at position {} of \"{}\"; check that the "
                        "text was copied whole and without extra characters",
                        printable(text[i]), i, excerpt(text));
    }
    // bytes = bytes * 58 + digit
    auto carry = static_cast<std::uint32_t>(digit);
    for (auto& b : bytes) {
      carry += static_cast<std::uint32_t>(b) * 58;
      b = static_cast<std::uint8_t>(carry & 0xff);
      carry >>= 8;
    }
    while (carry > 0) {
      bytes.push_back(static_cast<std::uint8_t>(carry & 0xff));
      carry >>= 8;
    }
  }

  std::string out(ones, '\0');
  out.reserve(ones + bytes.size());
  for (auto it = bytes.rbegin(); it != bytes.rend(); ++it) out.push_back(static_cast<char>(*it));
  return out;
}

}  // namespace apiary::messages
