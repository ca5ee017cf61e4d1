#pragma once
/// Result<T> and Error: the error currency of core/, messages/, transport/ and sim/.
#include <cstdint>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace apiary {

/// Error codes shared by every layer. Each subsystem uses the range that fits; the
/// message says what was expected, what came, and what to do.
enum class errc : std::uint32_t {
  ok = 0,
  invalid_argument = 1,   ///< caller passed something malformed (address, key, shape)
  malformed = 2,          ///< bytes from the wire could not be parsed
  too_large = 3,          ///< a frame or message exceeded a configured limit
  not_found = 4,          ///< unknown handle, call, peer or file
  unavailable = 5,        ///< peer unreachable or connection could not be made
  peer_down = 6,          ///< peer died or was declared dead by keepalives
  deadline_exceeded = 7,  ///< the call's deadline passed before it finished
  cancelled = 8,          ///< the other side (or the local caller) cancelled the call
  handler_error = 9,      ///< the remote handler raised an error; message has its text
  protocol = 10,          ///< a peer broke the RPC protocol (e.g. item after end-of-stream)
  io = 11,                ///< file or OS error
  internal = 12,          ///< a bug: an invariant did not hold
  crypto = 13,            ///< key generation, signing or verification failed
  truncated = 14,         ///< a stream ended before all announced chunks arrived
  unsupported = 15,       ///< the operation does not apply (e.g. codec for a dtype)
  unauthorized = 16,      ///< refused by authorization: no, an invalid, expired or replayed token or signature
  // A new code goes last; core/rpc/engine.cpp's code_from_wire must accept it.
};

/// Whether `code` says a peer is there but refused the connection (a mode mismatch, a
/// failed handshake, an unauthentic frame): asking it again will not help.
inline bool is_refusal(errc code) {
  return code == errc::protocol || code == errc::crypto || code == errc::malformed;
}

/// Printable name of an error code ("peer_down").
const char* to_string(errc code);

/// An error: a code plus a human-readable message.
struct Error {
  errc code = errc::internal;
  std::string message;

  /// "peer_down: connection reset by 127.0.0.1:4100"
  [[nodiscard]] std::string what() const { return fmt::format("{}: {}", to_string(code), message); }
};

/// Builds an Error with a fmt-formatted message.
template <class... Args>
Error make_error(errc code, fmt::format_string<Args...> f, Args&&... args) {
  return Error{code, fmt::format(f, std::forward<Args>(args)...)};
}

/// A value or an Error.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}      // NOLINT: implicit by design

  [[nodiscard]] bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(v_); }
  Error& error() { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

/// Result of an operation that yields nothing.
struct Unit {};
using Status = Result<Unit>;
inline Status ok_status() { return Unit{}; }

}  // namespace apiary
