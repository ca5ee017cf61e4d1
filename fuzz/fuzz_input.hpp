#pragma once
/// How the fuzz targets split one input into the choices and byte strings they feed
/// (FuzzInput), and how fuzz/make_seeds.cpp writes inputs they read back (FuzzOutput).
/// Written by hand rather than with clang's FuzzedDataProvider, so that the targets also
/// build with gcc for the corpus replay test (tests/fuzz/).
///
/// Format: a choice is one byte (taken modulo the number of choices); a number is 1 to 8
/// bytes, little-endian; a byte string is a 2-byte little-endian length, then that many
/// bytes (fewer at the end of the input). Past the end every read gives zeros or "".
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace apiary::fuzz {

/// Reads choices, numbers and byte strings off the front of an input.
class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size)
      : rest_(reinterpret_cast<const char*>(data), size) {}
  explicit FuzzInput(std::string_view bytes) : rest_(bytes) {}

  /// True when the input is used up.
  [[nodiscard]] bool empty() const { return rest_.empty(); }
  /// The next byte (0 past the end).
  std::uint8_t byte() {
    if (rest_.empty()) return 0;
    const auto b = static_cast<std::uint8_t>(rest_[0]);
    rest_.remove_prefix(1);
    return b;
  }
  /// One of `n` choices (n >= 1, at most 256 tell apart): the next byte modulo n.
  std::size_t pick(std::size_t n) { return n == 0 ? 0 : byte() % n; }
  /// A yes or no: the next byte's low bit.
  bool flag() { return (byte() & 1U) != 0; }
  /// A number of `bytes` (1..8) little-endian bytes.
  std::uint64_t number(std::size_t bytes) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < bytes && i < 8; ++i) v |= std::uint64_t{byte()} << (8 * i);
    return v;
  }
  /// A double from 8 bytes (any bit pattern: NaNs and infinities included).
  double real() {
    const std::uint64_t bits = number(8);
    double v = 0;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  /// A byte string: a 2-byte length, then up to that many bytes.
  std::string bytes() {
    const auto n = static_cast<std::size_t>(number(2));
    const std::string_view part = rest_.substr(0, n);
    rest_.remove_prefix(part.size());
    return std::string(part);
  }
  /// Everything left.
  std::string_view rest() {
    const std::string_view all = rest_;
    rest_ = {};
    return all;
  }

 private:
  std::string_view rest_;
};

/// Writes an input that a FuzzInput reads back as the same choices and strings.
class FuzzOutput {
 public:
  /// A choice (index below the number of choices) or a byte.
  FuzzOutput& byte(std::size_t b) {
    out_.push_back(static_cast<char>(b & 0xffU));
    return *this;
  }
  FuzzOutput& flag(bool b) { return byte(b ? 1 : 0); }
  FuzzOutput& number(std::uint64_t v, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i) byte((v >> (8 * i)) & 0xffU);
    return *this;
  }
  FuzzOutput& real(double v) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    return number(bits, 8);
  }
  /// A byte string (at most 65535 bytes: longer ones are cut).
  FuzzOutput& bytes(std::string_view s) {
    const std::size_t n = s.size() < 0xffff ? s.size() : 0xffff;
    number(n, 2);
    out_.append(s.data(), n);
    return *this;
  }
  /// Raw bytes, read back by FuzzInput::rest.
  FuzzOutput& raw(std::string_view s) {
    out_.append(s.data(), s.size());
    return *this;
  }
  [[nodiscard]] const std::string& str() const { return out_; }

 private:
  std::string out_;
};

}  // namespace apiary::fuzz
