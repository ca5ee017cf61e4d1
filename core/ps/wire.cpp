#include "core/ps/wire.hpp"

#include <cstring>
#include <limits>

#include "core/proto_scan.hpp"

namespace apiary::core::ps {

namespace {

/// A PS message with the fields every one of them starts with: shard, replica, step.
template <class Message, class From>
Message headed(const std::string& shard, const From& from) {
  Message m;
  m.set_shard(shard);
  m.set_replica(from.replica);
  m.set_step(from.step);
  return m;
}

/// `To` with the replica and step of a PS message.
template <class To, class Message>
To from_head(const Message& m) {
  To out;
  out.replica = m.replica();
  out.step = m.step();
  return out;
}

}  // namespace

pb::PsPushRequest to_pb(const std::string& shard, const Push& push) {
  auto m = headed<pb::PsPushRequest>(shard, push);
  m.set_samples(push.samples);
  m.set_learning_rate(push.learning_rate);
  if (const auto* dense = std::get_if<std::vector<float>>(&push.gradient)) {
    m.mutable_dense()->Add(dense->begin(), dense->end());
  } else {
    const auto& sparse = std::get<SparseGradient>(push.gradient);
    auto* s = m.mutable_sparse();
    s->mutable_rows()->Add(sparse.rows.begin(), sparse.rows.end());
    s->mutable_values()->Add(sparse.values.begin(), sparse.values.end());
  }
  return m;
}

Push from_pb(const pb::PsPushRequest& request) {
  auto p = from_head<Push>(request);
  p.samples = request.samples();
  p.learning_rate = request.learning_rate();
  if (request.has_sparse()) {
    SparseGradient g;
    g.rows.assign(request.sparse().rows().begin(), request.sparse().rows().end());
    g.values.assign(request.sparse().values().begin(), request.sparse().values().end());
    p.gradient = std::move(g);
  } else {
    p.gradient = std::vector<float>(request.dense().begin(), request.dense().end());
  }
  return p;
}

pb::PsPushResponse to_pb(const std::string& shard, const PushAck& ack) {
  return headed<pb::PsPushResponse>(shard, ack);
}

pb::PsPullResponse to_pb(const std::string& shard, const PullReply& reply) {
  auto m = headed<pb::PsPullResponse>(shard, reply);
  m.set_version(reply.version);
  m.mutable_values()->Add(reply.values.begin(), reply.values.end());
  return m;
}

PullReply from_pb(const pb::PsPullResponse& response) {
  auto r = from_head<PullReply>(response);
  r.version = response.version();
  r.values.assign(response.values().begin(), response.values().end());
  return r;
}

// ---- the direct path ----

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "float32 payloads are copied as they lie in memory: the wire is little-endian");

// Field numbers shared by PsPushRequest and PsPullResponse (proto/ps.proto).
constexpr std::uint32_t k_field_shard = 1;
constexpr std::uint32_t k_field_replica = 2;
constexpr std::uint32_t k_field_step = 3;
constexpr std::uint32_t k_field_version = 4;  // PsPullResponse
constexpr std::uint32_t k_field_values = 5;   // PsPushRequest.dense, PsPullResponse.values
constexpr std::uint32_t k_field_samples = 6;  // PsPushRequest
constexpr std::uint32_t k_field_learning_rate = 7;  // PsPushRequest

/// Appends protobuf fields to a caller-sized region.
struct Writer {
  char* p;

  void varint(std::uint64_t v) {
    for (; v >= 0x80; v >>= 7) *p++ = static_cast<char>((v & 0x7f) | 0x80);
    *p++ = static_cast<char>(v);
  }
  void tag(std::uint32_t field, std::uint32_t wire) { varint((field << 3) | wire); }
  void bytes(const void* data, std::size_t size) {
    if (size > 0) std::memcpy(p, data, size);
    p += size;
  }
};

// proto3 leaves fields at their default out; int32 and int64 travel as 64-bit varints
// (a negative int32 sign-extended to ten bytes), as protobuf writes them.
std::uint64_t as_varint(std::int64_t v) { return static_cast<std::uint64_t>(v); }
std::size_t int_field_size(std::int64_t v) { return v == 0 ? 0 : 1 + varint_size(as_varint(v)); }
void put_int(Writer& w, std::uint32_t field, std::int64_t v) {
  if (v == 0) return;
  w.tag(field, k_wire_varint);
  w.varint(as_varint(v));
}
std::size_t len_field_size(std::size_t size) { return size == 0 ? 0 : 1 + varint_size(size) + size; }
/// A double is left out when its bits are all zero (+0.0), as protobuf does.
std::uint64_t bits_of(double d) {
  std::uint64_t b = 0;
  std::memcpy(&b, &d, 8);
  return b;
}

/// The fields both float32 messages start with: shard, replica, step (and version).
std::size_t header_size(const std::string& shard, std::int32_t replica, std::int64_t step, std::int64_t version) {
  return len_field_size(shard.size()) + int_field_size(replica) + int_field_size(step) + int_field_size(version);
}
void put_header(Writer& w, const std::string& shard, std::int32_t replica, std::int64_t step, std::int64_t version) {
  if (!shard.empty()) {
    w.tag(k_field_shard, k_wire_len);
    w.varint(shard.size());
    w.bytes(shard.data(), shard.size());
  }
  put_int(w, k_field_replica, replica);
  put_int(w, k_field_step, step);
  put_int(w, k_field_version, version);
}
void put_values(Writer& w, const float* values, std::size_t count) {
  if (count == 0) return;
  w.tag(k_field_values, k_wire_len);
  w.varint(count * sizeof(float));
  w.bytes(values, count * sizeof(float));
}

using Reader = core::ProtoReader;

/// A packed float run as DenseBytes; false when its length is not whole floats.
bool as_floats(std::string_view bytes, DenseBytes& out) {
  if (bytes.size() % sizeof(float) != 0) return false;
  out = DenseBytes{bytes.data(), bytes.size() / sizeof(float)};
  return true;
}

/// A push's samples and learning rate, after its values (each left out at +0.0, as
/// protobuf does).
std::uint32_t bits_of(float f) {
  std::uint32_t b = 0;
  std::memcpy(&b, &f, 4);
  return b;
}
std::size_t samples_size(double samples, float learning_rate) {
  return (bits_of(samples) == 0 ? 0 : 1 + 8) + (bits_of(learning_rate) == 0 ? 0 : 1 + 4);
}
void put_samples(Writer& w, double samples, float learning_rate) {
  if (const auto bits = bits_of(samples); bits != 0) {
    w.tag(k_field_samples, k_wire_fixed64);
    w.bytes(&bits, 8);
  }
  if (const auto bits = bits_of(learning_rate); bits != 0) {
    w.tag(k_field_learning_rate, k_wire_fixed32);
    w.bytes(&bits, 4);
  }
}

}  // namespace

std::size_t dense_push_size(const std::string& shard, std::int32_t replica, std::int64_t step, double samples,
                            std::size_t count, float learning_rate) {
  return header_size(shard, replica, step, 0) + len_field_size(count * sizeof(float)) +
         samples_size(samples, learning_rate);
}

std::size_t encode_dense_push(char* out, const std::string& shard, std::int32_t replica, std::int64_t step,
                              double samples, const float* values, std::size_t count, float learning_rate) {
  Writer w{out};
  put_header(w, shard, replica, step, 0);
  put_values(w, values, count);
  put_samples(w, samples, learning_rate);
  return static_cast<std::size_t>(w.p - out);
}

std::pair<std::string, std::string> dense_push_framing(const std::string& shard, std::int32_t replica,
                                                       std::int64_t step, double samples, std::size_t count,
                                                       float learning_rate) {
  std::string head(header_size(shard, replica, step, 0) + 1 + varint_size(count * sizeof(float)), '\0');
  Writer w{head.data()};
  put_header(w, shard, replica, step, 0);
  w.tag(k_field_values, k_wire_len);
  w.varint(count * sizeof(float));
  std::string tail(samples_size(samples, learning_rate), '\0');
  Writer t{tail.data()};
  put_samples(t, samples, learning_rate);
  return {std::move(head), std::move(tail)};
}

bool scan_dense_push(std::string_view bytes, DensePushView& out) {
  out = DensePushView{};
  Reader r{bytes.data(), bytes.data() + bytes.size()};
  std::uint32_t seen = 0;  // bit n: field n was read (a repeated one goes to protobuf)
  while (r.p < r.end) {
    std::uint32_t number = 0, wire = 0;
    std::string_view field;
    std::uint64_t value = 0;
    if (!r.field(number, wire, field, value) || number > k_field_learning_rate || (seen & (1U << number)) != 0) {
      return false;
    }
    seen |= 1U << number;
    if (number == k_field_shard && wire == k_wire_len) out.shard = field;
    else if (number == k_field_replica && wire == k_wire_varint) out.replica = static_cast<std::int32_t>(value);
    else if (number == k_field_step && wire == k_wire_varint) out.step = static_cast<std::int64_t>(value);
    else if (number == k_field_values && wire == k_wire_len) {
      if (!as_floats(field, out.gradient)) return false;
    } else if (number == k_field_samples && wire == k_wire_fixed64) std::memcpy(&out.samples, &value, 8);
    else if (number == k_field_learning_rate && wire == k_wire_fixed32) {
      const auto bits = static_cast<std::uint32_t>(value);
      std::memcpy(&out.learning_rate, &bits, 4);
    } else return false;  // a sparse gradient, unpacked floats, a wrong wire type
  }
  return true;
}

std::string pull_response_head(const std::string& shard, std::int32_t replica, std::int64_t step,
                               std::int64_t version, std::size_t count) {
  const std::size_t head = header_size(shard, replica, step, version) + (count == 0 ? 0 : 1 + varint_size(count * 4));
  std::string prefix(head, '\0');
  Writer w{prefix.data()};
  put_header(w, shard, replica, step, version);
  if (count > 0) {
    w.tag(k_field_values, k_wire_len);
    w.varint(count * sizeof(float));
  }
  return prefix;
}

std::string encode_pull_response(const std::string& shard, std::int32_t replica, std::int64_t step,
                                 std::int64_t version, const float* values, std::size_t count) {
  // The fields before the values go through a small buffer, the values are appended:
  // the string is written once, never zero-filled first.
  const std::string head = pull_response_head(shard, replica, step, version, count);
  std::string out;
  out.reserve(head.size() + count * sizeof(float));
  out.append(head);
  out.append(reinterpret_cast<const char*>(values), count * sizeof(float));
  return out;
}

Result<PullReply> decode_pull_response(std::string_view bytes) {
  PullReply reply;
  if (auto s = decode_pull_response_into(bytes, reply); !s) return s.error();
  return reply;
}

namespace {

/// A pull response's field other than its values, read into `out`; false for anything
/// unusual (a field of the wrong wire type or an unknown one).
bool pull_header_field(std::uint32_t number, std::uint32_t wire, std::uint64_t value, PullReply& out) {
  if (number == k_field_shard && wire == k_wire_len) return true;  // the caller knows which shard it asked
  if (number == k_field_replica && wire == k_wire_varint) out.replica = static_cast<std::int32_t>(value);
  else if (number == k_field_step && wire == k_wire_varint) out.step = static_cast<std::int64_t>(value);
  else if (number == k_field_version && wire == k_wire_varint) out.version = static_cast<std::int64_t>(value);
  else return false;
  return true;
}

}  // namespace

Status decode_pull_response_into(std::string_view bytes, PullReply& out) {
  out.replica = 0;
  out.step = 0;
  out.version = 0;
  Reader r{bytes.data(), bytes.data() + bytes.size()};
  DenseBytes values;
  std::uint32_t seen = 0;
  bool direct = true;
  while (direct && r.p < r.end) {
    std::uint32_t number = 0, wire = 0;
    std::string_view field;
    std::uint64_t value = 0;
    direct = r.field(number, wire, field, value) && number <= k_field_values && (seen & (1U << number)) == 0;
    if (!direct) break;
    seen |= 1U << number;
    if (number == k_field_values && wire == k_wire_len) direct = as_floats(field, values);
    else direct = pull_header_field(number, wire, value, out);
  }
  if (direct) {
    out.values.resize(values.count);  // a no-op when the storage is reused at its size
    if (values.count > 0) std::memcpy(out.values.data(), values.bytes, values.count * sizeof(float));
    return ok_status();
  }
  // Anything unusual (unpacked floats, unknown fields): protobuf reads every valid encoding.
  pb::PsPullResponse m;
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
      !m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return make_error(errc::malformed,
                      "pull response: expected a PsPullResponse (proto/ps.proto), got {} bytes that do not parse as "
                      "one; do the replica and the PS run the same apiary version?",
                      bytes.size());
  }
  out.replica = m.replica();
  out.step = m.step();
  out.version = m.version();
  out.values.assign(m.values().begin(), m.values().end());
  return ok_status();
}

Status decode_landed_pull_response(std::string_view head, std::size_t landed, PullReply& out) {
  out.replica = 0;
  out.step = 0;
  out.version = 0;
  Reader r{head.data(), head.data() + head.size()};
  std::uint32_t seen = 0;
  while (r.p < r.end) {
    // The values' tag and length end the head; their bytes are the landed ones.
    const char* at = r.p;
    std::uint64_t tag = 0, size = 0;
    if (r.varint(tag, 5) && (tag & 0xffffffffU) == (std::uint64_t{k_field_values} << 3 | k_wire_len)) {
      if (r.varint(size, 5) && r.p == r.end && size == landed && landed % sizeof(float) == 0) return ok_status();
      break;
    }
    r.p = at;
    std::uint32_t number = 0, wire = 0;
    std::string_view field;
    std::uint64_t value = 0;
    if (!r.field(number, wire, field, value) || number >= k_field_values || (seen & (1U << number)) != 0 ||
        !pull_header_field(number, wire, value, out)) {
      break;
    }
    seen |= 1U << number;
  }
  return make_error(errc::malformed,
                    "pull response: expected a PsPullResponse head ending with the length of its {} landed value "
                    "bytes, got {} bytes that are not one; do the replica and the PS run the same apiary version?",
                    landed, head.size());
}

}  // namespace apiary::core::ps
