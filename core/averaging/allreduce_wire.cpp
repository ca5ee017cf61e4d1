#include "core/averaging/allreduce_wire.hpp"

#include <cstdint>

#include "core/averaging/allreduce_fastwire.hpp"
#include "core/proto_scan.hpp"
#include "messages/tensor/codec.hpp"
#include "messages/tensor/tensor.hpp"

namespace apiary::core::averaging {

Result<std::string> encode_part_message(pb::MessageCode code, const std::string& group_id,
                                        const std::string& peer_id, const float* values,
                                        std::size_t count, pb::CompressionType codec,
                                        double weight) {
  if (codec == pb::NONE) return encode_none_part(code, group_id, peer_id, values, count, weight);
  if (codec == pb::FLOAT16) return encode_half_part(code, group_id, peer_id, values, count, weight);
  auto tensor = messages::Tensor::copy_of(messages::dtype::float32,
                                          {static_cast<std::uint32_t>(count)}, values,
                                          count * sizeof(float));
  if (!tensor) return tensor.error();
  pb::AveragingData data;
  data.set_code(code);
  if (!group_id.empty()) data.set_group_id(group_id);
  if (!peer_id.empty()) data.set_peer_id(peer_id);
  data.set_weight(weight);
  if (auto encoded = messages::encode_into(*tensor, codec, *data.mutable_tensor_part());
      !encoded) {
    return encoded.error();
  }
  return data.SerializeAsString();
}

double compression_ratio(pb::CompressionType codec) {
  switch (codec) {
    case pb::FLOAT16:
    case pb::MEANSTD_16BIT:
      return 0.5;  // two bytes per float32
    case pb::UNIFORM_8BIT:
    case pb::QUANTILE_8BIT:
    case pb::BLOCKWISE_8BIT:
      return 0.25;  // one byte per float32, tables aside
    default:
      return 1.0;
  }
}

std::string encode_code_message(pb::MessageCode code) {
  pb::AveragingData data;
  data.set_code(code);
  return data.SerializeAsString();
}

std::string part_group_id(std::string_view bytes) {
  core::ProtoReader r{bytes.data(), bytes.data() + bytes.size()};
  std::string group;
  while (r.p < r.end) {
    std::uint32_t number = 0, wire = 0;
    std::string_view field;
    std::uint64_t value = 0;
    if (!r.field(number, wire, field, value)) {
      // What the reader cannot read (a group among unknown fields, ...): protobuf's answer.
      pb::AveragingData data;
      if (bytes.size() > static_cast<std::size_t>(INT32_MAX) ||
          !data.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
        return {};
      }
      return data.group_id();
    }
    if (number == 2 && wire == core::k_wire_len) group.assign(field);
  }
  return group;
}

namespace {

/// Any AveragingData through protobuf and the codecs (the paths below try NONE parts first).
Result<PartMessage> decode_with_codec(std::string_view bytes) {
  pb::AveragingData data;
  if (bytes.size() > static_cast<std::size_t>(INT32_MAX) ||
      !data.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return make_error(errc::malformed,
                      "part stream: expected an AveragingData message, got {} bytes that do "
                      "not parse; the peer speaks another protocol",
                      bytes.size());
  }
  PartMessage out;
  out.code = data.code();
  out.group_id = data.group_id();
  out.peer_id = data.peer_id();
  out.weight = data.weight();
  if (!data.has_tensor_part()) return out;
  out.compression = data.tensor_part().compression();
  auto tensor = messages::decode(data.tensor_part());
  if (!tensor) return tensor.error();
  if (tensor->type() != messages::dtype::float32) {
    return make_error(errc::unsupported,
                      "part stream: expected a float32 part, got dtype {}; averaged tensors "
                      "travel as float32",
                      data.tensor_part().dtype());
  }
  const float* p = tensor->data<float>();
  out.values.assign(p, p + tensor->numel());
  return out;
}

}  // namespace

Result<PartMessage> read_part_message(std::string_view bytes, std::string_view& floats) {
  floats = {};
  if (PartMessage fast; view_none_part(bytes, fast, floats)) return fast;
  floats = {};
  if (PartMessage half; decode_half_part(bytes, half)) return half;
  return decode_with_codec(bytes);
}

Result<PartMessage> decode_part_message(std::string_view bytes) {
  if (PartMessage fast; decode_none_part(bytes, fast)) return fast;
  if (PartMessage half; decode_half_part(bytes, half)) return half;
  return decode_with_codec(bytes);
}

}  // namespace apiary::core::averaging
