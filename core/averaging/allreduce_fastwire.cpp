// The part stream's float32 parts without a codec (NONE), written and read straight
// between the float values and the wire bytes: one copy each way instead of the
// general path's three (Tensor, pb::Tensor, serialization; parse, decode, assign).
// The bytes are the protobuf encoding of the same AveragingData the general path
// produces, so either side may use either path.
#include "core/averaging/allreduce_fastwire.hpp"

#include <cstring>

#include "core/proto_scan.hpp"

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

/// Bytes of a NONE part's tensor field: buffer (1), size (2, packed), dtype (4);
/// compression NONE is the default (0) and left out, as is an empty buffer (proto3).
std::size_t none_tensor_bytes(std::size_t count) {
  const std::size_t data_bytes = count * sizeof(float);
  const std::size_t size_field = varint_size(count);
  const std::size_t buffer_field = data_bytes == 0 ? 0 : 1 + varint_size(data_bytes) + data_bytes;
  return buffer_field + 1 + varint_size(size_field) + size_field + 1 + 1 + sizeof(k_dtype) - 1;
}

/// The bytes of a NONE part's AveragingData before its values.
void put_none_head(std::string& out, pb::MessageCode code, const std::string& group_id, const std::string& peer_id,
                   std::size_t count) {
  if (code != pb::NO_CODE) {
    put_tag(out, 1, k_wire_varint);
    put_varint(out, static_cast<std::uint64_t>(code));
  }
  if (!group_id.empty()) put_bytes(out, 2, group_id.data(), group_id.size());
  if (!peer_id.empty()) put_bytes(out, 3, peer_id.data(), peer_id.size());
  put_tag(out, 4, k_wire_len);
  put_varint(out, none_tensor_bytes(count));
  if (count > 0) {
    put_tag(out, 1, k_wire_len);
    put_varint(out, count * sizeof(float));
  }
}

/// The bytes of a NONE part's AveragingData after its values.
void put_none_tail(std::string& out, std::size_t count, double weight) {
  put_tag(out, 2, k_wire_len);
  put_varint(out, varint_size(count));
  put_varint(out, count);
  put_bytes(out, 4, k_dtype, sizeof(k_dtype) - 1);
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
  out_.reserve(none_tensor_bytes(count) + group_id.size() + peer_id.size() + 32);
  put_none_head(out_, code, group_id, peer_id, count);
}

void NonePartWriter::append(const float* values, std::size_t n) {
  out_.append(reinterpret_cast<const char*>(values), n * sizeof(float));
}

std::string NonePartWriter::finish() {
  put_none_tail(out_, count_, weight_);
  return std::move(out_);
}

std::pair<std::string, std::string> none_part_framing(pb::MessageCode code, const std::string& group_id,
                                                      const std::string& peer_id, std::size_t count, double weight) {
  std::string head;
  std::string tail;
  put_none_head(head, code, group_id, peer_id, count);
  put_none_tail(tail, count, weight);
  return {std::move(head), std::move(tail)};
}

std::string encode_none_part(pb::MessageCode code, const std::string& group_id, const std::string& peer_id,
                             const float* values, std::size_t count, double weight) {
  NonePartWriter w(code, group_id, peer_id, count, weight);
  w.append(values, count);
  return w.finish();
}

namespace {

/// Reads the AveragingData fields into `out` (not its values) and finds its part's raw
/// float bytes (`buffer`, empty without a part). False for anything but a NONE part.
bool scan_none_part(std::string_view bytes, PartMessage& out, std::string_view& buffer) {
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
    } else if (!(number == 5 && wire == k_wire_varint && value == pb::NONE)) {
      return false;  // a codec, chunks, requires_grad...: the general path decides
    }
  }
  if (dtype != "float32" || dims != 1 || buffer.size() != elements * sizeof(float)) return false;
  out.compression = pb::NONE;
  return true;
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

bool decode_none_part_into(std::string_view bytes, PartMessage& out, float* dest, std::size_t count) {
  std::string_view buffer;
  if (!scan_none_part(bytes, out, buffer) || buffer.size() != count * sizeof(float)) return false;
  if (!buffer.empty()) std::memcpy(dest, buffer.data(), buffer.size());
  return true;
}

}  // namespace apiary::core::averaging
