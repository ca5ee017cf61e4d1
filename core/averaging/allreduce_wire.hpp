#pragma once
/// The messages of the part stream (rpc_aggregate_part, AveragingData both ways): one
/// part of float32 values compressed with a codec, and the decoded view of one.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "averaging.pb.h"
#include "messages/result.hpp"

namespace apiary::core::averaging {

/// A parsed AveragingData with its tensor decoded to float32.
struct PartMessage {
  pb::MessageCode code = pb::NO_CODE;
  std::string group_id;  ///< empty on later messages of a stream
  std::string peer_id;   ///< the sender's address, if it named itself
  pb::CompressionType compression = pb::NONE;  ///< codec the part travelled with
  std::vector<float> values;  ///< the part (empty for a message without tensor)
  double weight = 0.0;
};

/// Serializes AveragingData{code, group_id, peer_id, tensor_part = `count` floats at
/// `values` encoded with `codec`, weight}; an empty group_id / peer_id is left unset.
/// Errors: the codec's (errc::unsupported / invalid_argument).
[[nodiscard]] Result<std::string> encode_part_message(pb::MessageCode code,
                                                      const std::string& group_id,
                                                      const std::string& peer_id,
                                                      const float* values, std::size_t count,
                                                      pb::CompressionType codec, double weight);

/// Compressed size / raw size of a codec on float32, as the partition estimates it: 1 for
/// NONE, 0.5 for the 16-bit codecs, 0.25 for the 8-bit ones (tables aside).
[[nodiscard]] double compression_ratio(pb::CompressionType codec);

/// Serializes AveragingData carrying only `code` (an error answer).
[[nodiscard]] std::string encode_code_message(pb::MessageCode code);

/// Parses and decodes one AveragingData. A message without tensor_part gives no values.
/// Errors: errc::malformed for bytes that are not AveragingData, the codec's errors for
/// a bad tensor, errc::unsupported for a tensor that is not floating point.
[[nodiscard]] Result<PartMessage> decode_part_message(std::string_view bytes);

/// The group_id of an AveragingData, read without decoding its part ("" when the bytes
/// are not AveragingData or carry no group id); bytes the fast reader cannot read (a
/// group among unknown fields, which protobuf skips) are parsed by protobuf, so both
/// always name the same group.
[[nodiscard]] std::string part_group_id(std::string_view bytes);

/// As decode_part_message, but an uncompressed float32 part stays where it lies: `floats`
/// then views its raw bytes inside `bytes` (any alignment) and values stays empty. For
/// any other part `floats` is empty and values holds the decoded part.
[[nodiscard]] Result<PartMessage> read_part_message(std::string_view bytes, std::string_view& floats);

}  // namespace apiary::core::averaging
