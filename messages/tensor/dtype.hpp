#pragma once
/// Element types of tensors on the wire, named as hivemind names them in Tensor.dtype
/// (torch's dtype name without the "torch." prefix).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "messages/result.hpp"

namespace apiary::messages {

/// An element type. Values are apiary's own, never sent as numbers: the wire carries
/// the name returned by to_string().
enum class dtype : std::uint8_t {
  float32,
  float16,
  bfloat16,
  float64,
  int64,
  int32,
  int16,
  int8,
  uint8,
  bool_,       ///< one byte per element, 0 or 1
  complex64,   ///< two float32: real then imaginary
  complex128,  ///< two float64: real then imaginary
};

/// Every dtype, in declaration order (for tests and tables).
inline constexpr dtype all_dtypes[] = {
    dtype::float32, dtype::float16,  dtype::bfloat16, dtype::float64,
    dtype::int64,   dtype::int32,    dtype::int16,    dtype::int8,
    dtype::uint8,   dtype::bool_,    dtype::complex64, dtype::complex128,
};

/// The wire name: "float32", "bfloat16", "bool", "complex64", ...
std::string_view to_string(dtype type);

/// Size of one element in bytes, as held in memory (bfloat16: 2).
std::size_t element_size(dtype type);

/// Whether the dtype is a floating-point type (real, not complex).
bool is_floating_point(dtype type);

/// Parses a wire name. Only the canonical names of to_string() are accepted;
/// anything else gives errc::unsupported naming the accepted set, and an empty name
/// gives errc::malformed (a later chunk of a stream carries no dtype).
Result<dtype> parse_dtype(std::string_view name);

}  // namespace apiary::messages
