#pragma once
/// The bytes of the collective's exchange (core/collective/exchange.hpp): one frame per
/// request and per answer, and the values of a span of a mean op.
///
/// Frame, little-endian: "AXC1", u64 op, u32 rank of the writer, u8 kind (1 mean,
/// 2 gather), f64 weight (mean requests; 0 otherwise), u64 layout fingerprint, then the
/// payload to the end. The fingerprint hashes the op's kind, tensor sizes and codecs, so
/// members that disagree on the layout find out instead of mixing unrelated values.
///
/// Span values: the elements [lo, hi) of the concatenation of an op's tensors, each
/// element in its tensor's codec: NONE as 4 float32 bytes, FLOAT16 as 2 binary16 bytes
/// (clamped to +-65504 first and rounded to nearest even, as the FLOAT16 tensor codec).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "messages/result.hpp"
#include "runtime.pb.h"

namespace apiary::core::collective {

/// What an exchange op does.
enum class ExchangeKind : std::uint8_t {
  mean = 1,    ///< every member gets the same encoded weighted average
  gather = 2,  ///< every member gets every member's payload
};

/// One request or answer of an exchange op.
struct ExchangeFrame {
  std::uint64_t op = 0;                     ///< the op's number (0, 1, 2, ... per member)
  std::uint32_t rank = 0;                   ///< the writer's rank
  ExchangeKind kind = ExchangeKind::mean;   ///< the op's kind
  double weight = 0.0;                      ///< mean requests: the sender's weight
  std::uint64_t fingerprint = 0;            ///< hash of the op's layout
  std::string payload;                      ///< span values (mean) or gathered bytes
};

/// The frame as bytes.
[[nodiscard]] std::string encode_frame(const ExchangeFrame& frame);
/// A frame back from bytes. Errors: malformed (short, wrong magic, unknown kind).
[[nodiscard]] Result<ExchangeFrame> decode_frame(std::string_view bytes);

/// The tensors of one mean op as one concatenated vector: sizes and one codec per tensor.
struct SpanLayout {
  std::vector<std::size_t> sizes;            ///< float32 values per tensor
  std::vector<pb::CompressionType> codecs;   ///< per tensor: NONE or FLOAT16
  std::size_t total = 0;                     ///< sum of sizes
};

/// A layout from tensor sizes and codecs (one codec applies to all; none: NONE).
/// Errors: unsupported for a codec other than NONE and FLOAT16, invalid_argument when
/// the codec count is neither 0, 1 nor the tensor count.
[[nodiscard]] Result<SpanLayout> make_span_layout(const std::vector<std::size_t>& sizes,
                                                  const std::vector<pb::CompressionType>& codecs);

/// Hash of `kind` and `layout` (FNV-1a over sizes and codecs).
[[nodiscard]] std::uint64_t fingerprint_of(ExchangeKind kind, const SpanLayout& layout);

/// Bytes that elements [lo, hi) take on the wire.
[[nodiscard]] std::size_t span_bytes(const SpanLayout& layout, std::size_t lo, std::size_t hi);

/// Appends `values` (hi - lo floats, elements [lo, hi) of the concatenation) to `out`.
void encode_span(const SpanLayout& layout, std::size_t lo, std::size_t hi, const float* values, std::string& out);

/// Decodes elements [lo, hi) from `bytes` into `out` (hi - lo floats). Errors: malformed
/// when `bytes` is not span_bytes() long.
[[nodiscard]] Status decode_span(const SpanLayout& layout, std::size_t lo, std::size_t hi, std::string_view bytes,
                                 float* out);

}  // namespace apiary::core::collective
