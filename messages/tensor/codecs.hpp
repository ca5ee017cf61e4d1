#pragma once
/// The lossy codecs one by one, and what they share. Each encoder fills `message` (its
/// header fields, compression and buffer; a buffer's capacity is reused). encode() and decode() in codec.hpp
/// dispatch here; use those unless you need one codec directly. Buffer layouts (all
/// little-endian) are hivemind's, shared/reference/hivemind.md section 4.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "messages/result.hpp"
#include "messages/tensor/tensor.hpp"
#include "runtime.pb.h"

namespace apiary::messages {

/// Elements per block of BLOCKWISE_8BIT (one float32 absmax each).
inline constexpr std::size_t blockwise_block_size = 4096;
/// Entries of the codebooks and code tables our encoders write.
inline constexpr std::size_t codebook_entries = 256;

/// What decode() has read from a message before handing it to a codec.
struct DecodeHeader {
  dtype type = dtype::float32;  ///< the dtype named by the message
  Shape shape;                  ///< its shape
  std::size_t numel = 0;        ///< elements of the shape
  pb::CompressionType compression = pb::NONE;  ///< the message's codec
  bool requires_grad = false;   ///< the message's flag, kept on the tensor
};

/// FLOAT16: fp16[numel], clamped to +-65504. float32/float16/float64 only.
Status encode_float16(const Tensor& tensor, pb::Tensor& message);
/// Decodes a FLOAT16 buffer into the header's dtype.
Result<Tensor> decode_float16(std::string_view buffer, DecodeHeader header);

/// MEANSTD_16BIT: fp16[numel] || f32 means[M] || f32 stds[M], M = prod(shape[:-1]);
/// per last-dim row: mean, std = rms of the centred row clamped >= 2^-23. 0-d tensors and
/// dtypes other than float32/float16/float64 are errc::unsupported.
Status encode_meanstd16(const Tensor& tensor, pb::Tensor& message);
/// Decodes a MEANSTD_16BIT buffer: fp16 * std + mean, in the header's dtype.
Result<Tensor> decode_meanstd16(std::string_view buffer, DecodeHeader header);

/// UNIFORM_8BIT: i64 256 || f32 codebook[256] || u8 idx[numel]. shift = mean,
/// scale = 6 std / 256, idx = clamp(round_half_even((x - shift) / scale) + 128, 0, 255),
/// codebook[k] = mean of the original values with index k (0 if none).
Status encode_uniform8(const Tensor& tensor, pb::Tensor& message);
/// QUANTILE_8BIT: same layout; 255 borders at the 1/256 ... 255/256 quantiles (see
/// quantile_borders), idx = borders below x, codebook = bucket means.
Status encode_quantile8(const Tensor& tensor, pb::Tensor& message);
/// Decodes either 8-bit codebook layout (any codebook of 1..256 entries; every index
/// must be inside it): out[i] = codebook[idx[i]] in the header's dtype.
Result<Tensor> decode_codebook8(std::string_view buffer, DecodeHeader header);

/// BLOCKWISE_8BIT: i64 n_absmax || i64 n_code || f32 absmax[n_absmax] || f32 code[n_code]
/// || u8 q[numel]; blocks of 4096 elements, q = index of the code nearest x / absmax (a
/// value exactly between two codes takes the lower; an all-zero block, absmax 0, maps to
/// the code 0 so that it decodes to zeros).
Status encode_blockwise8(const Tensor& tensor, pb::Tensor& message);
/// Decodes BLOCKWISE_8BIT with any in-band code table of 1..256 entries.
Result<Tensor> decode_blockwise8(std::string_view buffer, DecodeHeader header);

/// The signed dynamic code table: 256 ascending float32 values in [-1, 1], with 0 and 1.
/// For i = 0..6, the 2^i midpoints of 2^i equal steps of [0.1, 1] times 10^(i-6), with
/// both signs (254 values), plus 0 and 1: the semantics of bitsandbytes'
/// create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), computed in
/// float64 and rounded once to float32.
const std::vector<float>& dynamic_code_table();

/// The 255 QUANTILE_8BIT borders of `x` (ascending): numpy's linear-interpolation
/// quantiles at k/256, k = 1..255. Exact (from a sorted copy) up to 2^16 elements; above,
/// each order statistic is estimated from one pass's histogram of 2^16 bins of the
/// values' order-preserving bit patterns (bins 2^-7 wide relative to their values),
/// placing the rank evenly inside its bin. Deterministic. Any borders give a valid
/// encoding; the estimate only affects the error. n = 0 gives zeros.
std::vector<float> quantile_borders(const float* x, std::size_t n);

namespace detail {

/// The float32 values of a floating-point tensor: a view of float32 tensors, a converted
/// copy of the others.
class FloatValues {
 public:
  explicit FloatValues(const Tensor& tensor);
  [[nodiscard]] const float* data() const { return data_; }

 private:
  std::vector<float> owned_;
  const float* data_ = nullptr;
};

/// Where a decoder writes float32 results: straight into the output for float32, into a
/// scratch array converted by finish() for the other floating-point dtypes.
class FloatOutput {
 public:
  FloatOutput(dtype type, std::size_t n);
  [[nodiscard]] float* data() { return data_; }
  /// The elements in the output dtype.
  Buffer finish();

 private:
  dtype type_;
  std::size_t n_;
  Buffer direct_;
  std::vector<float> scratch_;
  float* data_ = nullptr;
};

/// `n` float32 values converted to `type` (a floating-point dtype) as a new Buffer.
Buffer floats_as(dtype type, const float* x, std::size_t n);

/// errc::unsupported naming the codec, the dtype and the accepted dtypes.
Error unsupported_dtype(pb::CompressionType codec, dtype type, const char* accepted);

/// errc::malformed for a buffer of `actual` bytes where `expected` were due.
Error wrong_size(pb::CompressionType codec, const DecodeHeader& header, std::size_t expected,
                 std::size_t actual, const char* layout);

/// Sets size, dtype, requires_grad and compression of `message` from `tensor`, chunks 0;
/// leaves the buffer to the codec.
void prepare(pb::Tensor& message, const Tensor& tensor, pb::CompressionType codec);

/// Little-endian scalar reads and writes at a byte offset of a buffer.
void put_i64(std::string& buffer, std::size_t offset, std::int64_t value);
/// Reads an int64 at `offset` (the caller checks bounds).
std::int64_t get_i64(std::string_view buffer, std::size_t offset);

}  // namespace detail
}  // namespace apiary::messages
