#pragma once
/// The part stream's uncompressed (NONE) and float16 (FLOAT16) float32 parts, written
/// and read without the general codec path's intermediate copies. Same bytes as the
/// general path: the protobuf encoding of AveragingData{code, group_id, peer_id,
/// tensor_part{buffer, size = [count], dtype = "float32", compression}, weight}.
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "core/averaging/allreduce_wire.hpp"

namespace apiary::core::averaging {

/// The serialized AveragingData of a NONE part (`count` floats at `values`).
[[nodiscard]] std::string encode_none_part(pb::MessageCode code, const std::string& group_id,
                                           const std::string& peer_id, const float* values,
                                           std::size_t count, double weight);

/// Writes the same bytes as encode_none_part with the values given in pieces, so that
/// they can be computed straight into the message (no intermediate vector).
class NonePartWriter {
 public:
  /// A message of `count` floats; append() them all, then finish().
  NonePartWriter(pb::MessageCode code, const std::string& group_id, const std::string& peer_id,
                 std::size_t count, double weight);
  /// Appends the next `n` values (count in all).
  void append(const float* values, std::size_t n);
  /// The message. Expects every value appended.
  [[nodiscard]] std::string finish();

 private:
  std::string out_;
  std::size_t count_ = 0;
  double weight_ = 0.0;
};

/// The bytes of encode_none_part()'s message before its values and after them, for a
/// message sent in pieces with the values left where they lie: head + the `count` floats'
/// raw bytes + tail is that message.
[[nodiscard]] std::pair<std::string, std::string> none_part_framing(pb::MessageCode code, const std::string& group_id,
                                                                    const std::string& peer_id, std::size_t count,
                                                                    double weight);

/// The serialized AveragingData of a FLOAT16 part: the `count` floats at `values` rounded
/// to float16 (clamped to its range, round to nearest even, NaN kept) straight into the
/// message, the general path's bytes.
[[nodiscard]] std::string encode_half_part(pb::MessageCode code, const std::string& group_id,
                                           const std::string& peer_id, const float* values, std::size_t count,
                                           double weight);

/// Reads an AveragingData whose part is a 1-d float32 tensor sent as FLOAT16 into `out`,
/// its values decoded straight from the message into out.values. False when the bytes
/// hold anything else (the caller then takes the general path).
[[nodiscard]] bool decode_half_part(std::string_view bytes, PartMessage& out);

/// Reads an AveragingData whose part (if any) is a 1-d float32 NONE tensor into `out`.
/// False when the bytes hold anything else (a codec, chunks, unknown fields, malformed
/// bytes): the caller then takes the general path, which reports errors.
[[nodiscard]] bool decode_none_part(std::string_view bytes, PartMessage& out);

/// As decode_none_part, leaving the values where they lie: `floats` views the part's raw
/// float32 bytes inside `bytes` (any alignment; empty without a part), out.values stays
/// empty.
[[nodiscard]] bool view_none_part(std::string_view bytes, PartMessage& out, std::string_view& floats);

/// As decode_none_part, writing the part's values to `dest` (exactly `count` floats)
/// instead of out.values. False as well when the part does not hold `count` floats.
[[nodiscard]] bool decode_none_part_into(std::string_view bytes, PartMessage& out, float* dest,
                                         std::size_t count);

}  // namespace apiary::core::averaging
