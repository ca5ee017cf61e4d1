// The part stream's float32 parts without a codec (NONE), written and read straight
// between the float values and the wire bytes: one copy each way instead of the
// general path's three (Tensor, pb::Tensor, serialization; parse, decode, assign).
// The bytes are the protobuf encoding of the same AveragingData the general path
// produces, so either side may use either path.
#include "core/averaging/allreduce_fastwire.hpp"

#include <cstring>

#include "core/proto_scan.hpp"
#include "messages/tensor/codec_kernels.hpp"

namespace apiary::core::averaging {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "NONE parts copy float bytes as they are: the wire is little-endian");

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_tag(std::string& out, std::uint32_t field, std::uint32_t wire) { put_varint(out, (field << 3) | wire); }

void put_bytes(std::string& out, std::uint32_t field, const char* data, std::size_t size) {
  put_tag(out, field, k_wire_len);
  put_varint(out, size);
  out.append(data, size);
}

using Reader = core::ProtoReader;

constexpr char k_dtype[] = "float32";

}  // namespace

namespace {

/// Bytes a value takes in a part sent with `codec` (NONE or FLOAT16).
std::size_t value_bytes(pb::CompressionType codec) { return codec == pb::FLOAT16 ? 2 : sizeof(float); }

/// Bytes of a part's tensor field: buffer (1), size (2, packed), dtype (4), compression
/// (5) for FLOAT16; NONE is the default (0) and left out, as is an empty buffer (proto3).
std::size_t part_tensor_bytes(std::size_t count, pb::CompressionType codec) {
  const std::size_t data_bytes = count * value_bytes(codec);
  const std::size_t size_field = varint_size(count);
  const std::size_t buffer_field = data_bytes == 0 ? 0 : 1 + varint_size(data_bytes) + data_bytes;
  return buffer_field + 1 + varint_size(size_field) + size_field + 1 + 1 + sizeof(k_dtype) - 1 +
         (codec == pb::NONE ? 0 : 2);
}

/// The bytes of a part's AveragingData before its values.
void put_part_head(std::string& out, pb::MessageCode code, const std::string& group_id, const std::string& peer_id,
                   std::size_t count, pb::CompressionType codec) {
  if (code != pb::NO_CODE) {
    put_tag(out, 1, k_wire_varint);
    put_varint(out, static_cast<std::uint64_t>(code));
  }
  if (!group_id.empty()) put_bytes(out, 2, group_id.data(), group_id.size());
  if (!peer_id.empty()) put_bytes(out, 3, peer_id.data(), peer_id.size());
  put_tag(out, 4, k_wire_len);
  put_varint(out, part_tensor_bytes(count, codec));
  if (count > 0) {
    put_tag(out, 1, k_wire_len);
    put_varint(out, count * value_bytes(codec));
  }
}

/// The bytes of a part's AveragingData after its values.
void put_part_tail(std::string& out, std::size_t count, pb::CompressionType codec, double weight) {
  put_tag(out, 2, k_wire_len);
  put_varint(out, varint_size(count));
  put_varint(out, count);
  put_bytes(out, 4, k_dtype, sizeof(k_dtype) - 1);
  if (codec != pb::NONE) {
    put_tag(out, 5, k_wire_varint);
    put_varint(out, static_cast<std::uint64_t>(codec));
  }
  if (weight != 0.0) {
    put_tag(out, 5, k_wire_fixed64);
    char bits[8];
    std::memcpy(bits, &weight, 8);
    out.append(bits, 8);
  }
}

}  // namespace

NonePartWriter::NonePartWriter(pb::MessageCode code, const std::string& group_id, const std::string& peer_id,
                               std::size_t count, double weight)
    : count_(count), weight_(weight) {
  out_.reserve(part_tensor_bytes(count, pb::NONE) + group_id.size() + peer_id.size() + 32);
  put_part_head(out_, code, group_id, peer_id, count, pb::NONE);
}

void NonePartWriter::append(const float* values, std::size_t n) {
  out_.append(reinterpret_cast<const char*>(values), n * sizeof(float));
}

std::string NonePartWriter::finish() {
  put_part_tail(out_, count_, pb::NONE, weight_);
  return std::move(out_);
}

std::pair<std::string, std::string> none_part_framing(pb::MessageCode code, const std::string& group_id,
                                                      const std::string& peer_id, std::size_t count, double weight) {
  std::string head;
  std::string tail;
  put_part_head(head, code, group_id, peer_id, count, pb::NONE);
  put_part_tail(tail, count, pb::NONE, weight);
  return {std::move(head), std::move(tail)};
}

std::string encode_none_part(pb::MessageCode code, const std::string& group_id, const std::string& peer_id,
                             const float* values, std::size_t count, double weight) {
  NonePartWriter w(code, group_id, peer_id, count, weight);
  w.append(values, count);
  return w.finish();
}

std::string encode_half_part(pb::MessageCode code, const std::string& group_id, const std::string& peer_id,
                             const float* values, std::size_t count, double weight) {
  std::string out;
  out.reserve(part_tensor_bytes(count, pb::FLOAT16) + group_id.size() + peer_id.size() + 32);
  put_part_head(out, code, group_id, peer_id, count, pb::FLOAT16);
  const std::size_t at = out.size();
  out.resize(at + count * 2);
  messages::kernels::floats_to_halves_clamped(reinterpret_cast<std::uint16_t*>(out.data() + at), values, count);
  put_part_tail(out, count, pb::FLOAT16, weight);
  return out;
}

namespace {

/// Reads the AveragingData fields into `out` (not its values) and finds its part's raw
/// bytes (`buffer`, empty without a part) and codec. False for anything but a 1-d
/// float32 part sent as NONE or FLOAT16.
bool scan_part(std::string_view bytes, PartMessage& out, std::string_view& buffer, pb::CompressionType& codec) {
  Reader r{bytes.data(), bytes.data() + bytes.size()};
  std::string_view tensor;
  bool has_tensor = false;
  while (r.p < r.end) {
    std::uint32_t number = 0, wire = 0;
    std::string_view field;
    std::uint64_t value = 0;
    if (!r.field(number, wire, field, value)) return false;
    if (number == 1 && wire == k_wire_varint) out.code = static_cast<pb::MessageCode>(value);
    else if (number == 2 && wire == k_wire_len) out.group_id.assign(field);
    else if (number == 3 && wire == k_wire_len) out.peer_id.assign(field);
    // A second tensor_part is merged into the first by protobuf (or refused, with the
    // first malformed): the general path decides.
    else if (number == 4 && wire == k_wire_len && !has_tensor) tensor = field, has_tensor = true;
    else if (number == 5 && wire == k_wire_fixed64) std::memcpy(&out.weight, &value, 8);
    else return false;  // anything else: the general path decides
  }
  buffer = {};
  codec = pb::NONE;
  if (!has_tensor) return true;
  Reader t{tensor.data(), tensor.data() + tensor.size()};
  std::string_view dtype;
  std::uint64_t elements = 0;
  std::size_t dims = 0;
  while (t.p < t.end) {
    std::uint32_t number = 0, wire = 0;
    std::string_view field;
    std::uint64_t value = 0;
    if (!t.field(number, wire, field, value)) return false;
    if (number == 1 && wire == k_wire_len) {
      buffer = field;
    } else if (number == 2 && wire == k_wire_len) {
      Reader sizes{field.data(), field.data() + field.size()};
      while (sizes.p < sizes.end) {
        if (!sizes.varint(elements)) return false;
        ++dims;
      }
    } else if (number == 4 && wire == k_wire_len) {
      dtype = field;
    } else if (number == 5 && wire == k_wire_varint && (value == pb::NONE || value == pb::FLOAT16)) {
      codec = static_cast<pb::CompressionType>(value);
    } else {
      return false;  // another codec, chunks, requires_grad...: the general path decides
    }
  }
  if (dtype != "float32" || dims != 1 || elements > buffer.size() || buffer.size() != elements * value_bytes(codec)) {
    return false;
  }
  out.compression = codec;
  return true;
}

/// scan_part for a NONE part (or none): `buffer` holds the part's float32 bytes.
bool scan_none_part(std::string_view bytes, PartMessage& out, std::string_view& buffer) {
  pb::CompressionType codec = pb::NONE;
  return scan_part(bytes, out, buffer, codec) && codec == pb::NONE;
}

}  // namespace

bool decode_none_part(std::string_view bytes, PartMessage& out) {
  std::string_view buffer;
  if (!scan_none_part(bytes, out, buffer)) return false;
  out.values.resize(buffer.size() / sizeof(float));
  if (!buffer.empty()) std::memcpy(out.values.data(), buffer.data(), buffer.size());
  return true;
}

bool view_none_part(std::string_view bytes, PartMessage& out, std::string_view& floats) {
  out.values.clear();
  return scan_none_part(bytes, out, floats);
}

bool decode_half_part(std::string_view bytes, PartMessage& out) {
  std::string_view buffer;
  pb::CompressionType codec = pb::NONE;
  if (!scan_part(bytes, out, buffer, codec) || codec != pb::FLOAT16) return false;
  out.values.resize(buffer.size() / 2);
  messages::kernels::halves_to_floats(out.values.data(), reinterpret_cast<const std::uint16_t*>(buffer.data()),
                                      out.values.size());
  return true;
}

bool decode_none_part_into(std::string_view bytes, PartMessage& out, float* dest, std::size_t count) {
  std::string_view buffer;
  if (!scan_none_part(bytes, out, buffer) || buffer.size() != count * sizeof(float)) return false;
  if (!buffer.empty()) std::memcpy(dest, buffer.data(), buffer.size());
  return true;
}

}  // namespace apiary::core::averaging
