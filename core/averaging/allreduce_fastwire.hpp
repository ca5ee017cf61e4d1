#pragma once
/// The part stream's uncompressed (NONE) float32 parts, written and read without the
/// general codec path's intermediate copies. Same bytes as the general path: the
/// protobuf encoding of AveragingData{code, group_id, peer_id, tensor_part{buffer,
/// size = [count], dtype = "float32"}, weight}.
#include <cstddef>
#include <string>

#include "core/averaging/allreduce_wire.hpp"

namespace apiary::core::averaging {

/// The serialized AveragingData of a NONE part (`count` floats at `values`).
[[nodiscard]] std::string encode_none_part(pb::MessageCode code, const std::string& group_id,
                                           const std::string& peer_id, const float* values,
                                           std::size_t count, double weight);

/// Reads an AveragingData whose part (if any) is a 1-d float32 NONE tensor into `out`.
/// False when the bytes hold anything else (a codec, chunks, unknown fields, malformed
/// bytes): the caller then takes the general path, which reports errors.
[[nodiscard]] bool decode_none_part(const std::string& bytes, PartMessage& out);

/// As decode_none_part, writing the part's values to `dest` (exactly `count` floats)
/// instead of out.values. False as well when the part does not hold `count` floats.
[[nodiscard]] bool decode_none_part_into(const std::string& bytes, PartMessage& out, float* dest,
                                         std::size_t count);

}  // namespace apiary::core::averaging
